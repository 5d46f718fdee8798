"""The terminal prompt: what a person sees, in a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.display import for_terminal, lookalikes, renders_blank, visible
from codecoder.permissions.keys import GrantLevel
from codecoder.permissions.prompt import AskRequest, render
from tests.conftest import write_config


def user_file() -> Path:
    """The user's own file where the tests put it (tests/conftest.py: XDG_CONFIG_HOME)."""
    return Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"


def test_visible_makes_escapes_and_invisible_characters_visible() -> None:
    assert visible("git status\x1b[2K\rrm -rf /") == "git status\\e[2K\\rrm -rf /"
    assert visible("ls\u202e/txt.exe") == "ls\\u{202e}/txt.exe"
    assert visible("a\u200bb\x00c\nd\te") == "a\\u{200b}b\\x00c\\nd\\te"
    assert visible("plain `text` $HOME") == "plain `text` $HOME"
    assert visible("a\\e") == "a\\\\e"


def test_lookalike_letters_are_named() -> None:
    assert lookalikes("gіt status") == ["U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I"]
    assert lookalikes("git status") == []


def test_the_prompt_shows_tool_environment_key_command_and_why_project_is_missing() -> None:
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key="run_command:git",
        subject="git push\x1b[8m --force",
        choices=(Answer.ONCE, Answer.SESSION, Answer.DENY),
        why_not_project="run_command:git runs in @shell",
    )
    assert render(request).splitlines() == [
        "codecoder: permission required",
        "  tool         run_command",
        "  environment  @shell (host processes, not sandboxed)",
        "  key          run_command:git",
        "  runs         git push\\e[8m --force",
        "",
        "  [o] Once               this call only; nothing is recorded",
        "  [s] AlwaysThisSession  run_command:git — exactly this key",
        "                         lasts until this session ends; kept in memory only (nothing is "
        "written)",
        "  [d] Deny               nothing runs; nothing is recorded",
        "  (AlwaysThisProject is not offered: run_command:git runs in @shell)",
    ]


def spawn(project: Path, command: str, environment: str = "@shell") -> pexpect.spawn:
    """`codecoder call run_command` in a terminal, run_command bound to `environment`: by
    default @shell, the prompt of a tool on the host."""
    write_config(project, {"environments": {"run_command": environment}})
    # Plain text, compared as such (colours: tests/runtime/interfaces/test_cli_questions.py).
    env = {**{k: v for k, v in os.environ.items() if k != "CI"}, "NO_COLOR": "1"}
    args = [
        "-m",
        "codecoder",
        "call",
        "run_command",
        json.dumps({"command": command}),
        "--json",
    ]
    return pexpect.spawn(
        sys.executable,
        args,
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 200),
    )


def test_a_person_answers_in_a_real_terminal(project: Path) -> None:
    child = spawn(project, "printf 'ok\\n'")
    child.expect("permission required")
    child.expect(r"choice \[o/d\]: ")
    screen = child.before
    assert "environment  @shell (host processes, not sandboxed)" in screen
    assert "AlwaysThisProject is not offered" in screen
    assert "ceiling is AlwaysThisSession" in screen
    assert "[p]" not in screen
    child.sendline("x")
    child.expect("please answer one of o/d")
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert '"source": "once"' in child.before


def test_escape_codes_in_a_command_are_shown_harmlessly(project: Path) -> None:
    hidden = "echo safe\x1b[2K\x1b[1A\rrm -rf ~ # \u202eevil"
    child = spawn(project, hidden)
    child.expect(r"choice \[o/d\]: ")
    screen = child.before
    assert "\x1b" not in screen.replace("\x1b[?1034h", "")
    assert "echo safe\\e[2K\\e[1A\\rrm -rf ~ # \\u{202e}evil" in screen
    child.sendline("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3


def test_end_of_input_at_the_prompt_denies(project: Path) -> None:
    child = spawn(project, "echo hi")
    child.expect(r"choice \[o/d\]: ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3


def test_visible_shows_a_long_run_of_spaces_as_a_marker_with_its_length() -> None:
    assert visible("ls" + " " * 4000 + "; rm -rf ~") == "ls[4000 spaces]; rm -rf ~"
    assert visible("a       b") == "a       b"  # seven: still text
    assert visible("a" + " " * 8 + "b") == "a[8 spaces]b"


# Padding in every spelling that renders blank: each a payload's way off screen.
BLANK_PADDING = {
    "braille blank": ("\u2800", "[3000 × U+2800 BRAILLE PATTERN BLANK]"),
    "hangul filler": ("\u3164", "[3000 × U+3164 HANGUL FILLER]"),
    "halfwidth hangul filler": ("\uffa0", "[3000 × U+FFA0 HALFWIDTH HANGUL FILLER]"),
    "hangul choseong and jungseong fillers": (
        "\u115f\u1160",
        "[6000 blank or invisible characters]",
    ),
    "ideographic space": ("\u3000", "[3000 × U+3000 IDEOGRAPHIC SPACE]"),
    "no-break space": ("\u00a0", "[3000 × U+00A0 NO-BREAK SPACE]"),
    "zero-width space": ("\u200b", "[3000 × U+200B ZERO WIDTH SPACE]"),
    "variation selector": ("\ufe0f", "[3000 × U+FE0F VARIATION SELECTOR-16]"),
    "combining grapheme joiner": ("\u034f", "[3000 × U+034F COMBINING GRAPHEME JOINER]"),
    "tag space": ("\U000e0020", "[3000 × U+E0020 TAG SPACE]"),
    "musical null": ("\U0001d159", "[3000 × U+1D159 MUSICAL SYMBOL NULL NOTEHEAD]"),
    "nul": ("\x00", "[3000 × U+0000]"),
    "newlines": ("\n", "[3000 × U+000A]"),
    "spaces and fillers mixed": (" \u2800\u3164", "[9000 blank or invisible characters]"),
}


@pytest.mark.parametrize("padding", sorted(BLANK_PADDING))
def test_every_character_that_renders_blank_is_collapsed_so_the_payload_stays_in_view(
    padding: str,
) -> None:
    unit, marker = BLANK_PADDING[padding]
    shown = visible("echo ok" + unit * 3000 + "; touch PWNED")
    assert shown == "echo ok" + marker + "; touch PWNED"
    # One alone is shown by its code: nothing that renders blank reaches the screen raw.
    one = visible("a" + unit + "b")
    assert all(char == " " or not renders_blank(char) for char in one)


def test_a_single_blank_glyph_is_shown_by_its_code() -> None:
    assert visible("rm\u2800-rf") == "rm\\u{2800}-rf"
    assert visible("a\u3164b") == "a\\u{3164}b"
    assert visible("a\u00a0b") == "a\\xa0b"


def test_for_terminal_keeps_lines_and_neutralises_escapes_and_padding() -> None:
    text = (
        "ok\x1b[8mhidden\x1b[0m\r\nnext\tcol\x1b(0qqq\x9b2J"
        + " " * 200
        + "tail"
        + "\n" * 30
        + "end"
    )
    assert for_terminal(text) == (
        "ok\\e[8mhidden\\e[0m\nnext\tcol\\e(0qqq\\x9b2J[200 spaces]tail\n[29 blank lines]\nend"
    )
    assert for_terminal("  indented\n\n\nthree blank lines kept\n") == (
        "  indented\n\n\nthree blank lines kept\n"
    )
    assert for_terminal("x" + "\u2800" * 200 + "y\tz") == (
        "x[200 × U+2800 BRAILLE PATTERN BLANK]y\tz"
    )


def test_the_prompt_offers_the_narrow_key_and_the_program_wide_one_and_says_what_each_covers() -> (
    None
):
    narrow = GrantLevel("run_command:git:status", "only `git status …` commands")
    wide = GrantLevel("run_command:git", "every simple `git …` command: any subcommand")
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key="run_command:git:status",
        subject="git status --short",
        choices=(Answer.ONCE, Answer.SESSION, Answer.SESSION_PROGRAM, Answer.DENY),
        grants=((Answer.SESSION, narrow), (Answer.SESSION_PROGRAM, wide)),
    )
    assert render(request).splitlines()[-6:] == [
        "  [o] Once               this call only; nothing is recorded",
        "  [s] AlwaysThisSession  run_command:git:status — only `git status …` commands",
        "                         lasts until this session ends; kept in memory only (nothing is "
        "written)",
        "  [a] AlwaysThisSession  run_command:git — every simple `git …` command: any subcommand",
        "                         lasts until this session ends; kept in memory only (nothing is "
        "written)",
        "  [d] Deny               nothing runs; nothing is recorded",
    ]


@pytest.mark.parametrize(
    ("padding", "marker"),
    [
        (" ", "[3000 spaces]"),
        ("\u2800", "[3000 × U+2800 BRAILLE PATTERN BLANK]"),
        ("\u3164", "[3000 × U+3164 HANGUL FILLER]"),
    ],
)
def test_a_padded_command_shows_its_payload_in_a_real_terminal(
    project: Path, padding: str, marker: str
) -> None:
    child = spawn(project, "echo ok" + padding * 3000 + "; touch PWNED")
    child.expect(r"choice \[o/d\]: ")
    assert f"echo ok{marker}; touch PWNED" in child.before
    child.sendline("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3 and not (project / "PWNED").exists()


def test_call_output_on_a_terminal_cannot_restyle_or_hide_what_follows(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    command = "printf 'visible\\033[8mhidden\\033(0qq\\033[0m\\n'"
    args = ["-m", "codecoder", "call", "run_command", json.dumps({"command": command})]
    child = pexpect.spawn(
        sys.executable,
        [*args, "--answer", "once"],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    # Conceal and the line-drawing charset are shown, never obeyed; a reset hides nothing.
    assert "visible\\e[8mhidden\\e(0qq\x1b[0m" in child.before
    assert "\x1b[8m" not in child.before and "\x1b(0" not in child.before


def test_the_mcp_form_titles_say_what_the_program_wide_choice_covers() -> None:
    from codecoder.interfaces.mcp_server import elicitation_schema
    from codecoder.permissions.commandkey import key_command

    key = key_command("git status").permission_key()
    narrow, wide = key.levels
    request = AskRequest(
        tool="run_command",
        environment=EnvironmentTag.SHELL,
        key=key.raw,
        subject=key.subject,
        choices=(Answer.ONCE, Answer.SESSION, Answer.SESSION_PROGRAM, Answer.DENY),
        grants=((Answer.SESSION, narrow), (Answer.SESSION_PROGRAM, wide)),
    )
    field = elicitation_schema(request, "2025-11-25")["properties"]["decision"]
    titles = {choice["const"]: choice["title"] for choice in field["oneOf"]}
    assert titles["session"] == (
        "AlwaysThisSession: run_command:git:status — only `git status …` commands (lasts until "
        "this session ends; kept in memory only (nothing is written))"
    )
    assert titles["session-program"].startswith(
        "AlwaysThisSession: run_command:git — every simple `git …` command: any subcommand"
    )


def call_in_terminal(project: Path, *args: str) -> pexpect.spawn:
    """`codecoder call ARGS` in a real terminal, in `project` (plain text: NO_COLOR)."""
    env = {**{k: v for k, v in os.environ.items() if k != "CI"}, "NO_COLOR": "1"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", "call", *args],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(60, 220),
    )


def screen_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").splitlines()


def session_in_terminal(project: Path) -> pexpect.spawn:
    """`codecoder session` in a real terminal, in `project`: a session that outlives a call,
    so its questions offer the session choices (a one-shot `call` offers none)."""
    env = {**{k: v for k, v in os.environ.items() if k != "CI"}, "NO_COLOR": "1"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", "session"],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(60, 220),
    )
    child.expect_exact("codecoder> ")
    return child


def test_the_question_says_what_a_session_answer_records_covers_and_how_long_in_a_session(
    project: Path,
) -> None:
    (project / "README.md").write_text("hello\n")
    write_config(project, {"environments": {"run_command": "@shell"}})
    child = session_in_terminal(project)
    child.sendline("run_command " + json.dumps({"command": "cp README.md README.bak"}))
    child.expect_exact("choice [o/s/d]: ")
    shown = screen_lines(child.before)
    assert shown[shown.index("  [o] Once               this call only; nothing is recorded") :] == [
        "  [o] Once               this call only; nothing is recorded",
        "  [s] AlwaysThisSession  run_command:cp — every simple `cp …` command, with any arguments",
        "                         lasts until you leave this session (/quit); kept in its memory; "
        "`codecoder allowlist list` shows it",
        "  [d] Deny               nothing runs; nothing is recorded",
        "  (AlwaysThisProject is not offered: run_command:cp runs in @shell (host processes, not "
        "sandboxed), whose ceiling is AlwaysThisSession: permanent trust goes only to sandboxed "
        "tools)",
    ]
    child.sendline("s")
    child.expect_exact("codecoder> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert (project / "README.bak").read_text() == "hello\n"


def test_with_a_session_ttl_the_session_choice_says_when_it_expires(project: Path) -> None:
    import time

    write_config(project, {"session_ttl": 3600, "environments": {"run_command": "@shell"}})
    before = time.time() + 3600
    child = session_in_terminal(project)
    child.sendline("run_command true")
    child.expect_exact("choice [o/s/d]: ")
    after = time.time() + 3600
    times = {time.strftime("%H:%M", time.localtime(t)) for t in (before, after)}
    said = {
        "                         lasts until you leave this session (/quit), and at most until "
        f"{at} (session_ttl 3600 s); kept in its memory; `codecoder allowlist list` shows it"
        for at in times
    }
    assert said & set(screen_lines(child.before)), screen_lines(child.before)
    child.sendline("d")
    child.expect_exact("codecoder> ")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()


def test_a_write_question_shows_the_path_the_sizes_and_a_diff_and_where_a_project_grant_goes(
    project: Path,
) -> None:
    (project / "app.py").write_text("def main():\n    return 1\n\n\nmain()\n")
    content = "def main():\n    return 2\n\n\nmain()\n"
    child = call_in_terminal(
        project, "write_file", json.dumps({"path": "app.py", "content": content})
    )
    child.expect_exact("choice [o/p/c/g/d]: ")  # a one-shot call: no session choice
    shown = screen_lines(child.before)
    start = shown.index("  key          write_file:app.py")
    assert shown[start:] == [
        "  key          write_file:app.py",
        "  path         app.py",
        "  changes      │ replaces app.py: 34 bytes, 5 lines → 34 bytes, 5 lines",
        "               │ --- app.py (now)",
        "               │ +++ app.py (after)",
        "               │ @@ -1,4 +1,4 @@",
        "               │  def main():",
        "               │ -    return 1",
        "               │ +    return 2",
        "               │  ",
        "               │  ",
        "",
        "  [o] Once                this call only; nothing is recorded",
        "  [p] AlwaysThisProject   write_file:app.py — only app.py",
        f"                          lasts until revoked; written to {project / 'codecoder.json'}",
        "  [c] AlwaysThisProject   write_file:** + edit_file:** — any file in this workspace, "
        "written or edited (write_file and edit_file), at any depth; never a protected path "
        "(codecoder.json, .codecoder/, any .git or",  # wrapped between words at 220 columns
        "                          .gitmodules, the agents' settings such as .claude/): those "
        "are asked every time",
        f"                          lasts until revoked; written to {project / 'codecoder.json'}",
        "  [g] AlwaysEveryProject  write_file:** + edit_file:** — any file in this workspace, "
        "written or edited (write_file and edit_file), at any depth; never a protected path "
        "(codecoder.json, .codecoder/, any .git or",  # wrapped between words at 220 columns
        "                          .gitmodules, the agents' settings such as .claude/): those "
        "are asked every time",
        "                          lasts until revoked, in every project where it runs "
        f"contained; written to your own file, {user_file()}",
        "  [d] Deny                nothing runs; nothing is recorded",
    ]
    child.sendline("p")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (project / "app.py").read_text() == content
    assert json.loads((project / "codecoder.json").read_text())["allowlist"] == {
        "write_file:app.py": "AlwaysThisProject"
    }


def test_a_new_file_question_shows_its_size_and_head_bounded_and_neutralised(
    project: Path,
) -> None:
    content = "#!/bin/sh\necho hi\x1b[8m hidden\n" + "".join(f"line {n}\n" for n in range(200))
    child = call_in_terminal(
        project, "write_file", json.dumps({"path": "tools/run.sh", "content": content})
    )
    child.expect_exact("choice [o/p/w/c/g/d]: ")
    shown = screen_lines(child.before)
    start = shown.index("  path         tools/run.sh")
    assert shown[start + 1 : start + 5] == [
        "  changes      │ creates tools/run.sh: 1,719 bytes, 202 lines; its first lines:",
        "               │ #!/bin/sh",
        "               │ echo hi\\e[8m hidden",
        "               │ line 0",
    ]
    assert shown[start + 21 : start + 23] == [
        "               │ line 17",
        "               │ … 182 more lines",
    ]
    assert "\x1b[8m" not in child.before
    child.sendline("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3 and not (project / "tools").exists()


def test_an_edit_question_shows_the_diff_of_the_edit(project: Path) -> None:
    (project / "notes.txt").write_text("".join(f"line {n}\n" for n in range(10)))
    edit = {"path": "notes.txt", "old_string": "line 5\n", "new_string": "line five\nmore\n"}
    child = call_in_terminal(project, "edit_file", json.dumps(edit))
    child.expect_exact("choice [o/p/c/g/d]: ")
    shown = screen_lines(child.before)
    start = shown.index("  path         notes.txt")
    assert shown[start + 1 : shown.index("", start)] == [
        "  changes      │ edits notes.txt: 1 replacement, 70 bytes, 10 lines → 78 bytes, 11 lines",
        "               │ --- notes.txt (now)",
        "               │ +++ notes.txt (after)",
        "               │ @@ -4,5 +4,6 @@",
        "               │  line 3",
        "               │  line 4",
        "               │ -line 5",
        "               │ +line five",
        "               │ +more",
        "               │  line 6",
        "               │  line 7",
    ]
    child.sendline("o")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "line five\nmore\n" in (project / "notes.txt").read_text()


def test_a_multi_line_command_is_shown_as_lines_and_its_notes_apart_without_escaped_newlines(
    project: Path,
) -> None:
    write_config(project, {"environments": {"run_command": "@shell"}})
    child = call_in_terminal(
        project, "run_command", json.dumps({"command": "echo one\necho 'two\x1b[2K'\r\nls"})
    )
    child.expect_exact("choice [o/d]: ")
    shown = screen_lines(child.before)
    start = shown.index(
        '  key          run_command:"…" (this whole command, exactly as shown below)'
    )
    assert shown[start + 1 : start + 4] == [
        "  runs         │ echo one",
        "               │ echo 'two\\e[2K'\\r",
        "               │ ls",
    ]
    assert "\\n" not in "\n".join(shown[start + 1 :])
    child.sendline("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3


def test_a_timeout_message_shows_the_last_output_as_lines(project: Path) -> None:
    command = {"command": "echo first; echo second; sleep 30", "timeout": 1}
    child = call_in_terminal(project, "run_command", json.dumps(command), "--answer", "once")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    # What it printed was shown as it came, as lines; the error follows it.
    assert screen_lines(child.before)[-3:] == [
        "first",
        "second",
        "codecoder: tool error: command killed after 1s (its whole process group)",
    ]


def colour_output(project: Path, **env: str) -> str:
    """What `call` prints on a terminal for a command whose output is coloured."""
    command = (
        "printf '\\033[32mPASS\\033[0m ok\\n\\033[30;40mblack\\033[0m "
        "\\033[38;5;196mred\\033[0m\\n\\033[8mhidden\\n'"
    )
    environ = {**{k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}, **env}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "codecoder", "call", "run_command", command, "--answer", "once"],
        cwd=str(project),
        env=environ,
        encoding="utf-8",
        timeout=30,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    return str(child.before).replace("\r\n", "\n")


def test_on_a_terminal_harmless_colours_show_as_colours_and_hiding_ones_are_shown(
    project: Path,
) -> None:
    assert colour_output(project).splitlines()[:3] == [
        "\x1b[32mPASS\x1b[0m ok\x1b[0m",
        "black\x1b[0m red\x1b[0m\x1b[0m",  # black, a background and 256 colours: plain text
        "\\e[8mhidden",
    ]


def test_with_no_color_the_terminal_gets_no_colour_and_no_raw_codes(project: Path) -> None:
    shown = colour_output(project, NO_COLOR="1")
    assert shown.splitlines()[:3] == ["PASS ok", "black red", "\\e[8mhidden"]
    assert "\x1b" not in shown.replace("\x1b[?1034h", "")
    assert "\\e[32m" not in shown


def test_a_contained_command_offers_the_sandbox_choices_in_a_real_terminal(project: Path) -> None:
    child = spawn(project, "npm test", "@bwrap")
    child.expect(r"choice \[o/p/w/c/g/d\]: ")
    screen = child.before.replace("\r\n", "\n")
    said = [" ".join(line.split()) for line in screen.splitlines()]
    assert "environment  @bwrap (host processes in bubblewrap namespaces" in screen
    assert "[p] AlwaysThisProject run_command:npm:test — only `npm test …` commands" in said
    assert any(
        line.startswith("[w] AlwaysThisProject run_command:npm — every simple `npm …` command")
        for line in said
    )
    assert (
        "[c] AlwaysThisProject run_command:** — any command in @bwrap, compound lines included "
        "(never one that needs the host, nor one touching a protected path; deny rules still "
        "refuse)" in said
    )
    assert f"lasts until revoked; written to {project / 'codecoder.json'}" in said
    assert (
        "[g] AlwaysEveryProject run_command:** — any command in @bwrap, compound lines included "
        "(never one that needs the host, nor one touching a protected path; deny rules still "
        "refuse)" in said
    )
    child.sendline("c")
    child.expect(pexpect.EOF)
    child.close()
    assert json.loads((project / "codecoder.json").read_text())["allowlist"] == {
        "run_command:**": "AlwaysThisProject"
    }


def test_an_escalation_is_chosen_in_a_real_terminal_and_runs_on_the_host(
    project: Path, tmp_path: Path
) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    child = spawn(project, f"git ls-remote {remote}", "@bwrap")
    child.expect(r"choice \[o/p/h/d\]: ")  # a one-shot call: the host once, no session
    screen = child.before.replace("\r\n", "\n")
    said = [" ".join(line.split()) for line in screen.splitlines()]
    assert "  on the host  run_command:git:ls-remote (@shell, unconfined)" in screen
    assert (
        "[o] Once this call only, contained in @bwrap (it would likely fail); nothing is "
        "recorded" in said
    )
    assert (
        "[h] Once on the host this call only, run on the host, unconfined (@shell), as "
        "run_command:git:ls-remote; nothing is recorded" in said
    )
    assert not any(line.startswith(("[r]", "[e]")) for line in said)
    child.sendline("h")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    out = json.loads(child.before[child.before.index("{") :])
    assert (out["decision"]["environment"], out["decision"]["escalated_from"]) == (
        "@shell",
        "@bwrap",
    )
    assert out["result"]["data"]["exit_code"] == 0
