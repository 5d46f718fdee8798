"""The CLI contract, as scripts and CI call it: real processes, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.reading import user_file_path
from codecoder.foundation.state import project_state_directory
from tests.conftest import gone, trust_project, write_config

SEED = (
    "{\n"
    '  "allowlist": {\n'
    '    "run_command:git": "AlwaysThisProject",\n'
    '    "run_command:cargo": "AlwaysThisSession",\n'
    '    "write_file:tests/**": "AlwaysThisProject"\n'
    "  }\n"
    "}\n"
)


ANY_COMMAND = (
    "any command in @bwrap, compound lines included (never one that needs the host, nor one "
    "touching a protected path; deny rules still refuse)"
)


def codecoder(*args: str, project: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=project,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(proc.stdout)


def test_tools_lists_every_tool_with_its_permission(project: Path) -> None:
    proc = codecoder("tools", "--json", project=project)
    assert proc.returncode == 0
    rows = {row["name"]: row for row in as_json(proc)}
    assert rows["run_command"] == {
        "name": "run_command",
        "category": "execute",
        "environment": "@bwrap",
        "permission": "ask",
        "description": rows["run_command"]["description"],
        "child": False,
    }
    assert {name for name, row in rows.items() if row["child"]} == {
        "read_file",
        "glob",
        "grep",
        "diff",
        "web_search",
        "web_fetch",
        "github_search",
        "agent",
        "reason",
    }
    assert {row["environment"] for row in rows.values() if row["category"] == "read"} == {
        "@landlock"
    }
    assert all(rows[n]["permission"] == "none" for n in rows if rows[n]["child"])
    assert len(rows) == 26


def test_key_of_a_simple_and_of_a_compound_command(project: Path) -> None:
    simple = as_json(codecoder("key", "--json", "--", "git status -s", project=project))
    assert {k: simple[k] for k in ("tool", "key", "compound", "argv")} == {
        "tool": "run_command",
        "key": "run_command:git:status",
        "compound": False,
        "argv": ["git", "status", "-s"],
    }
    assert [grant["entry"] for grant in simple["grants"]] == [
        "run_command:git:status",
        "run_command:git",
    ]
    compound = as_json(codecoder("key", "--json", "--", "git status && git push", project=project))
    assert {k: compound[k] for k in ("key", "compound", "argv")} == {
        "key": 'run_command:"git status && git push"',
        "compound": True,
        "argv": None,
    }


def test_key_of_a_command_after_harmless_assignments_names_them(project: Path) -> None:
    keyed = as_json(codecoder("key", "--json", "--", "TZ=UTC git log -3", project=project))
    assert {k: keyed[k] for k in ("key", "compound", "argv", "assignments")} == {
        "key": "run_command:git:log",
        "compound": False,
        "argv": ["git", "log", "-3"],
        "assignments": ["TZ=UTC"],
    }
    kept = as_json(codecoder("key", "--json", "--", "GIT_DIR=x git log", project=project))
    assert {k: kept[k] for k in ("key", "compound", "assignments", "reason")} == {
        "key": 'run_command:"GIT_DIR=x git log"',
        "compound": True,
        "assignments": [],
        "reason": "assignment",
    }
    by_tool = as_json(
        codecoder(
            "key", "--json", "--tool", "run_command", '{"command": "LANG=C ls"}', project=project
        )
    )
    assert (by_tool["key"], by_tool["assignments"]) == ("run_command:ls", ["LANG=C"])


def test_key_for_any_tool_takes_its_arguments_as_json(project: Path) -> None:
    proc = codecoder("key", "--json", "--tool", "commit", '{"message": "m"}', project=project)
    assert (as_json(proc)["key"], as_json(proc)["permission"]) == ("commit", "ask")
    bad = codecoder("key", "--json", "--tool", "commit", '{"mesage": "m"}', project=project)
    assert bad.returncode == 2
    error = as_json(bad)["error"]  # with --json, the error is JSON on stdout
    assert error["type"] == "InvalidArguments"
    assert "message" in error["message"] and "mesage" in error["message"]


def test_check_reports_the_seed_example_as_a_user_would_expect(project: Path) -> None:
    def found(proc: subprocess.CompletedProcess[str]) -> list[tuple[Any, ...]]:
        diagnostics = as_json(proc)["diagnostics"]
        return [(d["severity"], d["code"], d["key"], d["line"], d["column"]) for d in diagnostics]

    # run_command is contained by default (@bwrap): its project grant holds.
    write_config(project, SEED)
    contained = codecoder("check", "--json", project=project)
    assert (contained.returncode, as_json(contained)["ok"]) == (0, True)
    assert found(contained) == [("warning", "invalid_scope", "run_command:cargo", 4, 26)]
    # On the host, as in the seed's own design, it is above the ceiling.
    on_shell = SEED.replace("{\n", '{\n  "environments": {"run_command": "@shell"},\n', 1)
    write_config(project, on_shell)
    host = codecoder("check", "--json", project=project)
    assert (host.returncode, as_json(host)["ok"]) == (1, False)
    assert found(host) == [
        ("error", "ceiling_violation", "run_command:git", 4, 5),
        ("warning", "invalid_scope", "run_command:cargo", 5, 26),
    ]


def test_check_of_a_good_file_is_ok_and_of_a_broken_one_names_line_and_column(
    project: Path,
) -> None:
    write_config(
        project,
        {
            "environments": {"run_command": "@docker"},
            "allowlist": {"run_command:git": "AlwaysThisProject"},
        },
    )
    checked = as_json(codecoder("check", "--json", project=project))
    sandbox = checked.pop("docker")  # a tool is bound to @docker: check reports the sandbox
    # A project that belongs to root is synced (environments.docker.workspacemode).
    expected = "sync" if project.stat().st_uid == 0 else "bind"
    assert (sandbox["image"], sandbox["workspace"]) == ("codecoder-sandbox", expected)
    commands = checked.pop("commands")  # where run_command runs, and why
    assert {k: commands[k] for k in ("environment", "ceiling", "why")} == {
        "environment": "@docker",
        "ceiling": "AlwaysThisProject",
        "why": "bound to @docker by the configuration (a hardened container)",
    }
    file = str(project / "codecoder.json")
    assert checked == {
        "ok": True,
        "project": str(project),
        "found_by": "the nearest codecoder.json",
        "exists": True,
        "file": file,
        "user_file": None,
        "trust": {
            "state": "trusted",
            "digest": checked["trust"]["digest"],
            # The binding to @docker narrows: obeyed whatever the trust, not a widening.
            "widenings": [
                {
                    "section": "allowlist",
                    "key": "run_command:git",
                    "what": "grants run_command:git for the project",
                    "line": 6,
                    "column": 5,
                    "never": None,
                },
            ],
        },
        "rules": [
            {"kind": "environment", "value": "run_command: @docker", "file": file, "line": 3},
            {"kind": "allow", "value": "run_command:git", "file": file, "line": 6},
        ],
        "diagnostics": [],
    }
    write_config(project, '{\n  "allowlist": {\n    "run_command:git": AlwaysThisProject\n}}\n')
    proc = codecoder("check", "--json", project=project)
    [diagnostic] = as_json(proc)["diagnostics"]
    assert (proc.returncode, diagnostic["code"], diagnostic["line"], diagnostic["column"]) == (
        1,
        "syntax",
        3,
        24,
    )
    human = codecoder("check", project=project)
    assert "codecoder.json:3:24: error: [syntax]" in human.stdout


def test_call_runs_through_the_chain_with_exit_codes(project: Path) -> None:
    ok = codecoder(
        "call",
        "run_command",
        '{"command": "sh -c \'echo hello\'"}',
        "--answer",
        "once",
        "--json",
        project=project,
    )
    result = as_json(ok)
    assert (ok.returncode, result["result"]["data"]["stdout"]) == (0, "hello\n")
    assert result["decision"]["source"] == "once"
    failed = codecoder(
        "call", "run_command", '{"command": "false"}', "--answer", "once", project=project
    )
    assert failed.returncode == 1
    denied = codecoder(
        "call",
        "run_command",
        '{"command": "touch hi"}',
        "--non-interactive",
        "--json",
        project=project,
    )
    assert (denied.returncode, as_json(denied)["decision"]["source"]) == (3, "denied")
    assert not (project / "hi").exists()
    usage = codecoder("call", "run_command", '{"command": ', project=project)
    assert usage.returncode == 2
    unknown = codecoder("call", "no_such_tool", "{}", project=project)
    assert unknown.returncode == 2


def test_call_with_always_this_project_on_a_shell_tool_is_refused(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@shell"}})
    proc = codecoder(
        "call", "run_command", '{"command": "git status"}', "--answer", "project", project=project
    )
    assert proc.returncode == 3
    assert "CeilingViolation" in proc.stderr
    assert "AlwaysThisProject" not in (project / "codecoder.json").read_text()


def test_replay_runs_one_session_so_session_grants_carry_over(project: Path) -> None:
    lines = [
        {"tool": "run_command", "args": {"command": "mkdir -v one"}, "answer": "session"},
        {"tool": "run_command", "args": {"command": "mkdir -v two"}},
        {"tool": "run_command", "args": {"command": "mkdir 3 && mkdir 4"}},
        {"tool": "run_command", "args": {"command": "touch five"}, "answer": "deny"},
    ]
    script = project / "run.jsonl"
    script.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    proc = codecoder("replay", str(script), "--json", project=project)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r.get("decision") or {}).get("source") for r in rows] == [
        "session",
        "session",
        "denied",
        "denied",
        None,
    ]
    assert rows[1]["result"]["data"]["stdout"] == "mkdir: created directory 'two'\n"
    assert sorted(path.name for path in project.iterdir()) == ["one", "run.jsonl", "two"]
    assert rows[4]["error"]["type"] == "UsageError"
    assert proc.returncode == 2


def test_allowlist_lists_and_revokes(project: Path) -> None:
    write_config(
        project,
        {
            "environments": {"run_command": "@docker"},
            "allowlist": {
                "run_command:git": "AlwaysThisProject",
                "run_command:make": "AlwaysThisProject",
            },
            "deny": ["run_command:rm"],
        },
    )
    listed = as_json(codecoder("allowlist", "list", "--json", project=project))
    assert [(e["key"], e["grants"]) for e in listed["allowlist"]] == [
        ("run_command:git", True),
        ("run_command:make", True),
    ]
    assert listed["deny"] == [
        {
            "key": "run_command:rm",
            "line": listed["deny"][0]["line"],
            "file": str(project / "codecoder.json"),
        }
    ]
    revoked = codecoder("allowlist", "revoke", "run_command:git", project=project)
    assert revoked.returncode == 0
    config = json.loads((project / "codecoder.json").read_text())
    assert config["allowlist"] == {"run_command:make": "AlwaysThisProject"}
    assert config["deny"] == ["run_command:rm"]
    missing = codecoder("allowlist", "revoke", "run_command:git", project=project)
    assert missing.returncode == 1


def test_commit_runs_git_through_the_chain(project: Path) -> None:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / "a.txt").write_text("a\n")
    os.environ.update(env)
    proc = codecoder(
        "call",
        "commit",
        '{"message": "add a", "paths": ["a.txt"]}',
        "--answer",
        "once",
        "--json",
        project=project,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = subprocess.run(
        ["git", "log", "--format=%s"], cwd=project, capture_output=True, text=True, check=True
    )
    assert log.stdout == "add a\n"


def test_check_warns_about_each_loosened_docker_setting_and_rejects_impossible_ones(
    project: Path,
) -> None:
    write_config(
        project,
        '{\n  "docker": {\n    "network": "bridge",\n    "memory": "512m",\n'
        '    "read_only_rootfs": false\n  }\n}\n',
    )
    report = as_json(codecoder("check", "--json", project=project))
    assert report["ok"] is True
    assert [(d["severity"], d["code"], d["key"], d["line"]) for d in report["diagnostics"]] == [
        ("warning", "docker_looser", "docker.network", 3),
        ("warning", "docker_looser", "docker.read_only_rootfs", 5),
    ]
    write_config(project, {"docker": {"memory": "1k"}})
    proc = codecoder("check", "--json", project=project)
    [diagnostic] = as_json(proc)["diagnostics"]
    assert (proc.returncode, diagnostic["code"]) == (1, "invalid_docker_settings")


def test_check_flags_every_entry_that_can_never_match_and_says_how_to_spell_it(
    project: Path,
) -> None:
    (project / "codecoder.json").write_text(
        "{\n"
        '  "deny": ["run_command:git push", "run_command: rm", "read_file:.env",\n'
        '           "write_file:./x", "write_file:/abs", "write_file:dir/"],\n'
        '  "allowlist": {"web_fetch:*": "AlwaysThisProject",\n'
        '                "run_wasm:tools/./fmt.wasm": "AlwaysThisProject"}\n'
        "}\n"
    )
    trust_project(project)  # an untrusted file's grants are not obeyed, let alone analysed
    proc = codecoder("check", "--json", project=project)
    assert proc.returncode == 1
    found = {
        (d["severity"], d["key"], d["line"])
        for d in as_json(proc)["diagnostics"]
        if d["code"] == "never_matches"
    }
    assert found == {
        ("error", "run_command:git push", 2),
        ("error", "run_command: rm", 2),
        ("error", "read_file:.env", 2),
        ("error", "write_file:./x", 3),
        ("error", "write_file:/abs", 3),
        ("error", "write_file:dir/", 3),
        ("error", "web_fetch:*", 4),
        ("error", "run_wasm:tools/./fmt.wasm", 5),
    }
    text = codecoder("check", project=project).stdout
    assert "to mean that, write run_command:git:push" in text
    assert "to mean that, write write_file:dir/**" in text
    assert "read_file needs no permission (Permission::None)" in text


def test_check_flags_a_second_deny_section_and_the_file_fails_closed(project: Path) -> None:
    (project / "codecoder.json").write_text(
        '{"deny": ["run_command:rm"],\n "deny": ["run_command:git:push"]}\n'
    )
    proc = codecoder("check", "--json", project=project)
    assert proc.returncode == 1
    assert [(d["severity"], d["code"]) for d in as_json(proc)["diagnostics"]] == [
        ("error", "duplicate_section")
    ]
    listed = as_json(codecoder("allowlist", "list", "--json", project=project))
    assert [d["key"] for d in listed["deny"]] == ["run_command:rm", "run_command:git:push"]
    refused = codecoder(
        "call", "run_command", '{"command": "rm x"}', "--non-interactive", project=project
    )
    assert refused.returncode == 3
    assert "[duplicate_section]" in refused.stderr
    assert "nothing that needs permission runs" in refused.stderr


# --- interrupts ----------------------------------------------------------------------------


def _wait_for(path: Path, lines: int) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= lines:
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} never got {lines} pids")


@pytest.mark.parametrize(
    ("signal_number", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_an_interrupted_call_kills_the_commands_group_exits_and_is_audited(
    project: Path, signal_number: int, code: int, word: str
) -> None:
    write_config(project, {"environments": {"run_command": "@shell"}})  # pids of the host's
    pids = project / "pids"
    command = f"echo $$ > {pids}; sleep 300 & echo $! >> {pids}; wait"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    call = ["call", "run_command", json.dumps({"command": command}), "--answer", "once"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "codecoder", *call, "--project", str(project)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    bash, sleeper = _wait_for(pids, 2)

    proc.send_signal(signal_number)
    _, stderr = proc.communicate(timeout=30)

    assert proc.returncode == code
    assert stderr.strip().splitlines()[-1] == f"codecoder: {word}"
    assert "Traceback" not in stderr
    assert gone(bash, sleeper)
    log = project_state_directory(project.resolve()) / "audit.jsonl"
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert (record["outcome"], record["source"], record["error"]) == (
        "interrupted",
        "once",
        "Terminated" if signal_number == signal.SIGTERM else "KeyboardInterrupt",
    )


def test_the_progress_line_writes_nothing_for_a_call_that_reports_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from codecoder.interfaces.cli import ProgressLine

    quiet = ProgressLine()
    quiet.clear()
    assert capsys.readouterr().err == ""

    loud = ProgressLine()
    loud(3, 10, None)
    loud(5, None, "searched 5 files\x1b[8m")
    loud.clear()
    assert capsys.readouterr().err == (
        "\r\x1b[K3/10" + "\r\x1b[Ksearched 5 files\\e[8m" + "\r\x1b[K"
    )


# --- decide, --allow, arguments from stdin and files, JSON errors, --version -----------------


def test_decide_says_what_would_happen_and_runs_and_records_nothing(project: Path) -> None:
    write_config(project, {"deny": ["run_command:git:push"]})
    would_ask = codecoder(
        "decide", "run_command", '{"command": "touch marker"}', "--json", project=project
    )
    assert would_ask.returncode == 4
    assert as_json(would_ask) == {
        "decision": "ask",
        "tool": "run_command",
        "key": "run_command:touch",
        "environment": "@bwrap",
        "source": None,
        "matched": None,
        "would_ask": True,
        "choices": ["once", "session", "project", "project-any", "every-project", "deny"],
        "options": [
            {
                "answer": "once",
                "letter": "o",
                "scope": "Once",
                "entry": None,
                "covers": "this call only; nothing is recorded",
                "lasts": "this call only",
                "kept": "nothing is recorded",
                "runs_in": None,
                "also": [],
            },
            {
                "answer": "session",
                "letter": "s",
                "scope": "AlwaysThisSession",
                "entry": "run_command:touch",
                "covers": "every simple `touch …` command, with any arguments",
                "lasts": "until this session ends",
                "kept": "kept in memory only (nothing is written)",
                "runs_in": None,
                "also": [],
            },
            {
                "answer": "project",
                "letter": "p",
                "scope": "AlwaysThisProject",
                "entry": "run_command:touch",
                "covers": "every simple `touch …` command, with any arguments",
                "lasts": "until revoked",
                "kept": f"written to {project.resolve() / 'codecoder.json'}",
                "runs_in": None,
                "also": [],
            },
            {
                "answer": "project-any",
                "letter": "c",
                "scope": "AlwaysThisProject",
                "entry": "run_command:**",
                "covers": ANY_COMMAND,
                "lasts": "until revoked",
                "kept": f"written to {project.resolve() / 'codecoder.json'}",
                "runs_in": None,
                "also": [],
            },
            {
                "answer": "every-project",
                "letter": "g",
                "scope": "AlwaysEveryProject",
                "entry": "run_command:**",
                "covers": ANY_COMMAND,
                "lasts": "until revoked, in every project where it runs contained",
                "kept": f"written to your own file, {user_file_path()}",
                "runs_in": None,
                "also": [],
            },
            {
                "answer": "deny",
                "letter": "d",
                "scope": "Deny",
                "entry": None,
                "covers": "nothing runs; nothing is recorded",
                "lasts": "this call only",
                "kept": "nothing is recorded",
                "runs_in": None,
                "also": [],
            },
        ],
        "reason": "nothing grants this key: the human would be asked",
        "violations": [],
        "protected": False,
    }
    denied = codecoder(
        "decide", "run_command", '{"command": "git push"}', "--json", project=project
    )
    assert denied.returncode == 3
    assert (as_json(denied)["decision"], as_json(denied)["matched"]) == (
        "deny",
        "run_command:git:push",
    )
    allowed = codecoder(
        "decide",
        "run_command",
        '{"command": "touch x"}',
        "--allow",
        "run_command:touch",
        "--json",
        project=project,
    )
    assert allowed.returncode == 0
    assert (as_json(allowed)["source"], as_json(allowed)["would_ask"]) == ("session", False)
    assert not (project / "marker").exists() and not (project / "x").exists()
    assert not (project / ".codecoder" / "audit.jsonl").exists()


def test_allow_grants_only_its_key_and_refuses_what_a_session_grant_cannot_be(
    project: Path,
) -> None:
    ok = codecoder(
        "call",
        "run_command",
        '{"command": "touch hi"}',
        "--allow",
        "run_command:touch",
        "--non-interactive",
        "--json",
        project=project,
    )
    assert ok.returncode == 0, ok.stderr
    assert as_json(ok)["decision"]["source"] == "session"
    assert (project / "hi").exists()
    other = codecoder(
        "call",
        "run_command",
        '{"command": "mkdir y"}',
        "--allow",
        "run_command:touch",
        "--non-interactive",
        project=project,
    )
    assert other.returncode == 3 and not (project / "y").exists()
    for key, message in [
        ("run_command:*", "wildcard patterns belong in codecoder.json"),
        ("write_file:.git/hooks/pre-commit", "can be allowed only once"),
        ("write_file:codecoder.json", "can be allowed only once"),
        ("nosuch:x", "there is no tool named 'nosuch'"),
    ]:
        proc = codecoder(
            "call",
            "write_file",
            '{"path": "a", "content": "b"}',
            "--allow",
            key,
            "--json",
            project=project,
        )
        assert proc.returncode in (2, 3), key
        assert message in as_json(proc)["error"]["message"], key
    assert not (project / "a").exists()


def test_call_reads_its_arguments_from_stdin_or_a_file_of_any_size(project: Path) -> None:
    content = "x" * 300_000  # more than a command line may carry
    args = json.dumps({"path": "big.txt", "content": content})
    proc = codecoder(
        "call", "write_file", "-", "--answer", "once", "--json", project=project, stdin=args
    )
    assert proc.returncode == 0, proc.stderr
    assert (project / "big.txt").read_text() == content
    (project / "args.json").write_text(json.dumps({"path": "big.txt"}))
    read = codecoder("call", "read_file", "@args.json", "--json", project=project)
    assert read.returncode == 0 and as_json(read)["ok"]
    missing = codecoder("call", "read_file", "@nope.json", "--json", project=project)
    assert missing.returncode == 2
    assert as_json(missing)["error"]["message"].startswith("cannot read nope.json")


def test_json_errors_are_json(project: Path) -> None:
    bad = codecoder("call", "run_command", '{"command": "ls"', "--json", project=project)
    assert bad.returncode == 2
    assert as_json(bad) == {
        "ok": False,
        "error": {
            "type": "UsageError",
            "message": "the arguments are not valid JSON: Expecting ',' delimiter at line 1 "
            "column 17",
        },
    }
    usage = codecoder("schema", "--format", "nope", "--json", project=project)
    assert usage.returncode == 2
    assert as_json(usage)["error"] == {
        "type": "UsageError",
        "message": "codecoder schema: argument --format: 'nope' is not a choice; the choices are "
        "openai, openai-responses, anthropic, mcp",
    }


def test_version(project: Path) -> None:
    proc = codecoder("--version", project=project)
    assert proc.returncode == 0
    assert proc.stdout.startswith("codecoder 0.")


def test_allow_takes_a_key_escaped_as_answers_record_it_and_refuses_real_wildcards(
    project: Path,
) -> None:
    """`[c]` escapes one glob character: `write_file:a[*]b[[]1[]].txt` is the file `a*b[1].txt`
    and nothing else; `a*b`, `a?b`, `[ab]` and a stray bracket are patterns, refused."""
    (project / "a*b[1].txt").write_text("old")
    (project / "axb[1].txt").write_text("old")
    key = codecoder(
        "key",
        "--tool",
        "write_file",
        '{"path": "a*b[1].txt", "content": ""}',
        "--json",
        project=project,
    )
    (entry,) = [grant["entry"] for grant in as_json(key)["grants"]]
    assert entry == "write_file:a[*]b[[]1[]].txt"

    def write(path: str, allow: str) -> subprocess.CompletedProcess[str]:
        arguments = json.dumps({"path": path, "content": "new"})
        return codecoder(
            "call",
            "write_file",
            arguments,
            "--allow",
            allow,
            "--non-interactive",
            "--json",
            project=project,
        )

    assert write("a*b[1].txt", entry).returncode == 0
    assert (project / "a*b[1].txt").read_text() == "new"
    assert write("axb[1].txt", entry).returncode == 3  # the escaped key is that one file
    assert (project / "axb[1].txt").read_text() == "old"
    npm = codecoder(
        "decide",
        "run_command",
        '{"command": "npm run test:unit"}',
        "--allow",
        "run_command:npm:run:test[:]unit",
        "--json",
        project=project,
    )
    assert (npm.returncode, as_json(npm)["source"]) == (0, "session")
    for pattern in (
        "write_file:a*b[1].txt",
        "write_file:a?b",
        "write_file:[ab]",
        "write_file:a[*",
        "write_file:a]b",
        "write_file:a[x]b",
        "run_command:npm:run:test[:]*",
    ):
        proc = write("a*b[1].txt", pattern)
        assert proc.returncode == 2, pattern
        message = as_json(proc)["error"]["message"]
        assert "wildcard patterns belong in codecoder.json" in message, pattern
    hint = as_json(write("a*b[1].txt", "write_file:a*b[1].txt"))["error"]["message"]
    assert hint.endswith("escape each: write_file:a[*]b[[]1[]].txt)")
    for protected in ("write_file:.git/hooks/pre[*]", "write_file:sub/.GIT/x[?]"):
        proc = write("a", protected)  # the literal behind the escapes is what is checked
        assert proc.returncode in (2, 3), protected
        assert "can be allowed only once" in as_json(proc)["error"]["message"], protected
    assert not (project / "a").exists()


def test_answer_takes_every_choice_the_prompt_can_offer() -> None:
    from codecoder.foundation.decision import Answer
    from codecoder.interfaces.cli.grammar import ANSWERS

    assert tuple(answer.value for answer in Answer) == ANSWERS


def test_decide_and_call_in_bwrap_read_only_never_asks_and_an_answer_for_any_command_holds(
    project: Path,
) -> None:
    write_config(project, {"environments": {"run_command": "@bwrap"}})
    read = codecoder("decide", "run_command", '{"command": "ls -la"}', "--json", project=project)
    assert read.returncode == 0
    assert {k: as_json(read)[k] for k in ("decision", "source", "environment")} == {
        "decision": "allow",
        "source": "read-only",
        "environment": "@bwrap",
    }
    codecoder(
        "call",
        "run_command",
        '{"command": "cargo build"}',
        "--answer",
        "project-any",
        project=project,
    )
    later = codecoder(
        "decide", "run_command", '{"command": "make test"}', "--json", project=project
    )
    assert (as_json(later)["source"], as_json(later)["matched"]) == ("project", "run_command:**")
    push = codecoder("decide", "run_command", '{"command": "git push"}', "--json", project=project)
    assert push.returncode == 4
    assert as_json(push)["choices"] == [
        "once",
        "session",
        "project",
        "host-once",
        "host-session",
        "host-session-program",
        "deny",
    ]


def test_replay_takes_the_sandbox_choices_too(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@bwrap"}})
    lines = [
        {"tool": "run_command", "args": {"command": "git status"}},
        {"tool": "run_command", "args": {"command": "cargo build"}, "answer": "project-any"},
    ]
    done = codecoder(
        "replay", "-", "--json", project=project, stdin="\n".join(map(json.dumps, lines))
    )
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["decision"]["source"] for row in rows] == ["read-only", "project"]
    assert rows[1]["decision"]["matched"] == "run_command:**"
    assert json.loads((project / "codecoder.json").read_text())["allowlist"] == {
        "run_command:**": "AlwaysThisProject"
    }
