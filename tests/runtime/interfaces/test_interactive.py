"""`codecoder session`, used as a person uses it: in a real pseudo-terminal.

Most tests here are about the prompt and the session on @shell, so their project binds
run_command there (`start` writes that binding unless the test wrote its own codecoder.json);
the last ones are about commands contained in @bwrap, the default."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import pexpect

from codecoder.foundation.state import project_state_directory
from tests.conftest import gone, write_config

PROMPT = "codecoder> "
ON_SHELL = {"environments": {"run_command": "@shell"}}


def start(project: Path, *, contained: bool = False) -> tuple[pexpect.spawn, io.StringIO]:
    """A session in a terminal, and everything the terminal received. Unless `contained`, or
    the test wrote its own codecoder.json, run_command is bound to @shell."""
    if not contained and not (project / "codecoder.json").exists():
        write_config(project, ON_SHELL)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", "session", "--project", str(project)],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 250),
    )
    screen = io.StringIO()
    child.logfile_read = screen
    child.expect_exact(PROMPT)
    return child, screen


def run(child: pexpect.spawn, line: str) -> str:
    """Send a line and return what was printed until the next prompt (without the echo)."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    before: str = child.before
    return before.replace("\r\n", "\n").split("\n", 1)[1] if "\n" in before else ""


def quit(child: pexpect.spawn) -> None:
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_the_prompt_shows_the_choices_and_why_project_is_missing_for_a_shell_tool(
    project: Path,
) -> None:
    child, _ = start(project)
    child.sendline("run_command echo hi")
    child.expect_exact("choice [o/s/d]: ")
    shown = child.before.replace("\r\n", "\n")
    assert shown.split("\n", 1)[1].splitlines() == [
        "codecoder: permission required",
        "  tool         run_command",
        "  environment  @shell (host processes, not sandboxed)",
        "  key          run_command:echo",
        "  runs         echo hi",
        "",
        "  [o] Once               this call only; nothing is recorded",
        "  [s] AlwaysThisSession  run_command:echo — every simple `echo …` command, with any "
        "arguments",
        "                         lasts until you leave this session (/quit); kept in its "
        "memory; `codecoder allowlist list` shows it",
        "  [d] Deny               nothing runs; nothing is recorded",
        "  (AlwaysThisProject is not offered: run_command:echo runs in @shell (host "
        "processes, not sandboxed), whose ceiling is AlwaysThisSession: permanent trust goes "
        "only to sandboxed tools)",
    ]
    child.sendline("o")
    child.expect_exact(PROMPT)
    lines = child.before.replace("\r\n", "\n").splitlines()
    assert lines[1] == "hi"
    assert lines[2] == "[exit code 0]"
    assert lines[3].startswith("[ok · run_command:echo · @shell · once: allowed once · ")
    quit(child)


def test_an_answer_for_the_session_holds_until_quit_and_shows_in_the_allowlist(
    project: Path,
) -> None:
    child, _ = start(project)
    child.sendline('run_command {"command": "echo one"}')
    child.expect_exact("choice [o/s/d]: ")
    child.sendline("s")
    child.expect_exact(PROMPT)
    second = run(child, "run_command echo two")
    assert second.splitlines()[:2] == ["two", "[exit code 0]"]
    assert "permission required" not in second
    assert "· session: session allowlist ·" in second
    assert run(child, "/allowlist").splitlines() == [
        "session grants (until /quit):",
        "  run_command:echo  (run_command in @shell, no expiry)",
        f"project grants ({project / 'codecoder.json'}):",
        "  (none)",
        "deny rules:",
        "  (none)",
    ]
    quit(child)


def test_escape_sequences_in_a_command_and_its_output_are_shown_harmlessly(
    project: Path,
) -> None:
    child, screen = start(project)
    # The JSON escape \u001b is six plain characters on the wire; the command gets a real ESC.
    child.sendline(r'run_command {"command": "printf \u001b[2J\u001b[31mred"}')
    child.expect_exact("choice [o/s/d]: ")
    assert "  runs         printf \\e[2J\\e[31mred" in child.before.replace("\r\n", "\n")
    child.sendline("o")
    child.expect_exact(PROMPT)
    lines = child.before.replace("\r\n", "\n").splitlines()
    # The clear-screen is shown, not obeyed; red is a colour that hides nothing, shown as red
    # on a terminal and reset at the end of its line.
    assert lines[1:3] == ["\\e[2J\x1b[31mred\x1b[0m", "[exit code 0]"]
    quit(child)
    assert "\x1b[2J" not in screen.getvalue()


def test_reload_after_a_broken_edit_shows_the_error_and_keeps_the_last_good_rules(
    project: Path,
) -> None:
    write_config(project, {**ON_SHELL, "deny": ["run_command:rm"]})
    child, _ = start(project)
    for broken in ('{\n  "deny": ["run_command:rm",]\n}\n', '{\n  "deny": "run_command:rm"\n}\n'):
        write_config(project, broken)
        shown = run(child, "/reload").splitlines()
        file = project / "codecoder.json"
        assert len(shown) == 3
        where = f"{file}:2:29" if broken.endswith(",]\n}\n") else f"{file}:2:11"
        assert shown[0].startswith(f"{where}: error: [syntax] " if "," in broken else where)
        assert shown[1] == (
            f"{where}: error: [kept_last_good] the rules cannot be read now, so the last good "
            "rules stay in effect until the file is fixed and reloaded"
        )
        assert shown[2] == f"reloaded {file}: 2 error(s); the last good rules stay in effect"
        # The deny rule of the last good file still refuses, without a question.
        refused = run(child, 'run_command {"command": "rm x"}')
        assert "deny rule 'run_command:rm'" in refused
        assert "choice [" not in refused
    quit(child)


def test_a_ceiling_violation_is_reported_at_start_and_by_reload(project: Path) -> None:
    write_config(project, {**ON_SHELL, "allowlist": {"run_command:git": "AlwaysThisProject"}})
    child, screen = start(project)
    where = f"{project / 'codecoder.json'}:6:5: error: [ceiling_violation] "
    banner = screen.getvalue().replace("\r\n", "\n").splitlines()
    assert [line for line in banner if line.startswith(where)] != []
    shown = run(child, "/reload").splitlines()
    assert shown[0].startswith(where)
    assert "run_command:git" in shown[0]
    assert shown[1] == f"reloaded {project / 'codecoder.json'}: 1 error(s)"
    quit(child)


def test_audit_shows_the_last_decisions(project: Path) -> None:
    child, _ = start(project)
    child.sendline("run_command echo hi")
    child.expect_exact("choice [o/s/d]: ")
    child.sendline("d")
    child.expect_exact(PROMPT)
    assert "codecoder: permission denied: run_command:echo was not allowed" in child.before
    child.sendline("run_command true")
    child.expect_exact("choice [o/s/d]: ")
    child.sendline("o")
    child.expect_exact(PROMPT)
    rows = [line.split("  ")[2:-1] for line in run(child, "/audit 2").splitlines()]
    assert rows == [
        ["run_command", "run_command:echo", "@shell", "deny/denied", "denied"],
        ["run_command", "run_command:true", "@shell", "allow/once", "ok"],
    ]
    quit(child)
    log = project_state_directory(project.resolve()) / "audit.jsonl"
    records = [json.loads(line) for line in log.open()]
    assert [r["key"] for r in records] == ["run_command:echo", "run_command:true"]


def test_tools_help_and_mistakes_are_answered_in_place(project: Path) -> None:
    child, _ = start(project)
    tools = run(child, "/tools").splitlines()
    assert any(line.split()[:3] == ["run_command", "@shell", "ask"] for line in tools)
    assert "/reload" in run(child, "/help")
    assert run(child, "/frobnicate").splitlines() == [
        "unknown command /frobnicate; /help lists them"
    ]
    invalid = run(child, 'run_command {"cmd": "ls"}').splitlines()
    assert invalid[0] == (
        "codecoder: error: invalid arguments for run_command: command: Field required; "
        "cmd: Extra inputs are not permitted"
    )
    typo = run(child, "run_comand ls").splitlines()
    assert typo[0].startswith(
        "codecoder: unknown tool 'run_comand' (did you mean run_command?); available: "
    )
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def _pids(path: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= count:
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} never got {count} pids")


def test_ctrl_c_stops_the_running_command_and_its_background_jobs_and_the_session_goes_on(
    project: Path,
) -> None:
    pids = project / "pids"
    child, _ = start(project)
    child.sendline(f"run_command echo $$ > {pids}; sleep 300 & echo $! >> {pids}; wait")
    child.expect_exact("choice [o/s/d]: ")
    child.sendline("o")
    running = _pids(pids, 2)

    child.sendintr()
    child.expect_exact("(interrupted)")
    child.expect_exact(PROMPT)

    assert gone(*running)
    assert run(child, 'reason {"thought": "still here"}').startswith("Thought recorded.")
    quit(child)
    log = project_state_directory(project.resolve()) / "audit.jsonl"
    outcomes = [json.loads(line)["outcome"] for line in log.read_text().splitlines()]
    assert outcomes == ["interrupted", "ok"]


def test_sigterm_ends_the_session_and_the_running_command(project: Path) -> None:
    pids = project / "pids"
    child, _ = start(project)
    child.sendline(f"run_command echo $$ > {pids}; sleep 300 & echo $! >> {pids}; wait")
    child.expect_exact("choice [o/s/d]: ")
    child.sendline("o")
    running = _pids(pids, 2)

    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()

    assert child.exitstatus == 143
    assert gone(*running)


def test_a_contained_command_offers_the_project_and_its_grant_holds_in_the_next_session(
    project: Path,
) -> None:
    child, _ = start(project, contained=True)
    child.sendline("run_command mkdir -v hi")
    child.expect_exact("choice [o/s/p/c/g/d]: ")
    shown = child.before.replace("\r\n", "\n")
    assert "  environment  @bwrap (host processes in bubblewrap namespaces" in shown
    child.sendline("p")
    child.expect_exact(PROMPT)
    lines = child.before.replace("\r\n", "\n").splitlines()
    assert lines[1:3] == ["mkdir: created directory 'hi'", "[exit code 0]"]
    assert " · @bwrap · " in lines[3]
    quit(child)
    again, _ = start(project, contained=True)
    answered = run(again, "run_command mkdir -v again")
    assert answered.splitlines()[:2] == ["mkdir: created directory 'again'", "[exit code 0]"]
    assert "permission required" not in answered
    quit(again)


def test_ctrl_c_ends_a_contained_command_and_everything_it_started(project: Path) -> None:
    marker = f"313.{os.getpid()}"
    child, _ = start(project, contained=True)
    child.sendline(f"run_command (setsid sleep {marker} &); sleep {marker}")
    child.expect(r"choice \[o/s/p(/c/g)?/d\]: ")
    child.sendline("o")
    deadline = time.monotonic() + 30
    while not _with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _with(marker)

    child.sendintr()
    child.expect_exact("(interrupted)")
    child.expect_exact(PROMPT)

    deadline = time.monotonic() + 10  # the kernel ends the sandbox's processes: a moment
    while _with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _with(marker) == []
    quit(child)


def _with(marker: str) -> list[str]:
    """Host processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline and "codecoder" not in cmdline:
                found.append(cmdline)
    return found


def test_broken_json_is_refused_and_a_command_group_is_still_a_command(project: Path) -> None:
    (project / '{"path": "notes"').write_text("never read\n")
    child, _ = start(project)
    assert run(child, 'read_file {"path": "notes"').splitlines() == [
        "codecoder: the arguments are not valid JSON: Expecting ',' delimiter at line 1 column 17"
    ]
    child.sendline("run_command { echo grouped; }")
    child.expect_exact("choice [o/s/d]: ")
    assert "  runs         { echo grouped; }" in child.before.replace("\r\n", "\n")
    child.sendline("o")
    child.expect_exact(PROMPT)
    assert child.before.replace("\r\n", "\n").splitlines()[1] == "grouped"
    quit(child)
