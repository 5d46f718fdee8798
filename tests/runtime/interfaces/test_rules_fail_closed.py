"""A rules file that cannot be read never lets a denied command run, on any surface.

Each broken spelling (a trailing comma, a wrong type, a top-level array, a deny rule for no
tool, bytes that are not UTF-8, a section twice, the user's own file broken) is attacked the
way the issue found it: a deny rule for `touch`, a run-wide `--allow` for `touch`, and the
command run for real on the host. The command must not run, and every surface must say which
file is broken and where; a read still works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]

# (project file bytes, user file bytes or None, the place the error names, its code)
BROKEN: dict[str, tuple[bytes, bytes | None, str, str]] = {
    "trailing comma": (b'{"deny": ["run_command:touch"],}\n', None, "project:1:32", "syntax"),
    "deny as a string": (b'{"deny": "run_command:touch"}\n', None, "project:1:10", "schema"),
    "top-level array": (b'["run_command:touch"]\n', None, "project:1:1", "schema"),
    "a number among the denies": (
        b'{"deny": ["run_command:touch", 7]}\n',
        None,
        "project:1:32",
        "schema",
    ),
    "a deny rule for no tool": (
        b'{"deny": ["run_comand:touch"]}\n',
        None,
        "project:1:11",
        "unknown_tool",
    ),
    "a deny rule that can never match": (
        b'{"deny": ["run_command:touch M"]}\n',
        None,
        "project:1:11",
        "never_matches",
    ),
    "not UTF-8": (b'{"deny": ["run_command:touch\xff"]}\n', None, "project:1:29", "unreadable"),
    "a section twice": (
        b'{"deny": ["run_command:touch"],\n "deny": []}\n',
        None,
        "project:1:2",
        "duplicate_section",
    ),
    "a directory in its place": (b"", None, "project", "unreadable"),
    "the user's file": (b"{}\n", b'{"deny": ["run_command:touch"],}\n', "user:1:32", "syntax"),
    "the user's file, a wrong type": (
        b"{}\n",
        b'{"deny": {"run_command:touch": 1}}\n',
        "user:1:10",
        "schema",
    ),
}


@pytest.fixture(params=sorted(BROKEN))
def broken(request: pytest.FixtureRequest, project: Path) -> tuple[Path, str, str]:
    """A project whose rules cannot be read; returns it, the place named and the error code."""
    text, user, where, code = BROKEN[request.param]
    file = project / "codecoder.json"
    if request.param == "a directory in its place":
        file.mkdir()
    else:
        file.write_bytes(text)
    user_file = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    if user is not None:
        user_file.parent.mkdir(parents=True, exist_ok=True)
        user_file.write_bytes(user)
    kind, _, position = where.partition(":")
    place = str(file if kind == "project" else user_file) + (f":{position}" if position else "")
    (project / "notes.txt").write_text("still readable\n")
    return project, place, code


def codecoder(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


TOUCH = json.dumps({"command": "touch M"})


def test_call_with_allow_is_refused_and_nothing_runs(broken: tuple[Path, str, str]) -> None:
    project, place, code = broken
    for extra in (["--allow", "run_command:touch"], ["--allow", "run_command:*"]):
        proc = codecoder("call", "run_command", TOUCH, *extra, "--non-interactive", cwd=project)
        assert proc.returncode == 3, proc.stderr
        assert f"{place}: error: [{code}]" in proc.stderr
        assert "nothing that needs permission runs" in proc.stderr
        assert not (project / "M").exists()


def test_call_answered_by_a_person_is_refused_before_the_question(
    broken: tuple[Path, str, str],
) -> None:
    project, place, _ = broken
    proc = codecoder("call", "run_command", TOUCH, "--answer", "once", cwd=project)
    assert proc.returncode == 3
    assert place in proc.stderr
    assert not (project / "M").exists()


def test_decide_says_deny_and_why(broken: tuple[Path, str, str]) -> None:
    project, place, code = broken
    proc = codecoder("decide", "run_command", TOUCH, "--json", cwd=project)
    verdict = json.loads(proc.stdout)
    assert proc.returncode == 3
    assert (verdict["decision"], verdict["source"], verdict["would_ask"]) == ("deny", "deny", False)
    assert f"{place}: error: [{code}]" in verdict["reason"]


def test_reads_still_work(broken: tuple[Path, str, str]) -> None:
    project, _, _ = broken
    proc = codecoder("call", "read_file", '{"path": "notes.txt"}', "--json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "still readable" in json.loads(proc.stdout)["result"]["output"]


def hook_answer(host: str, project: Path, tool: str, tool_input: dict[str, Any]) -> Any:
    event = {
        "session_id": "s1",
        "cwd": str(project),
        "hook_event_name": "PreToolUse" if host == "claude-code" else "BeforeTool",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": "t1",
    }
    proc = codecoder(
        "hook", host, "--allow", "run_command:touch", cwd=REPO, stdin=json.dumps(event)
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_both_hooks_deny_with_the_reason(broken: tuple[Path, str, str]) -> None:
    project, place, code = broken
    claude = hook_answer("claude-code", project, "Bash", {"command": "touch M"})
    gemini = hook_answer("gemini", project, "run_shell_command", {"command": "touch M"})
    specific = claude["hookSpecificOutput"]
    assert specific["permissionDecision"] == "deny"
    assert f"{place}: error: [{code}]" in specific["permissionDecisionReason"]
    assert gemini["decision"] == "deny"
    assert f"{place}: error: [{code}]" in gemini["reason"]
    read = hook_answer("claude-code", project, "Read", {"file_path": str(project / "notes.txt")})
    assert read["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_replay_refuses_its_allow_keys(broken: tuple[Path, str, str]) -> None:
    project, place, _ = broken
    line = json.dumps({"tool": "run_command", "args": {"command": "touch M"}, "answer": "once"})
    proc = codecoder("replay", "-", "--allow", "run_command:touch", cwd=project, stdin=line)
    assert proc.returncode == 3
    assert place in proc.stderr
    plain = codecoder("replay", "-", cwd=project, stdin=line)
    assert plain.returncode == 3
    assert not (project / "M").exists()


def test_check_names_the_file_and_what_it_means(broken: tuple[Path, str, str]) -> None:
    project, place, code = broken
    proc = codecoder("check", cwd=project)
    assert proc.returncode == 1
    assert f"{place}: error: [{code}]" in proc.stdout
    assert "every call that needs permission is refused" in proc.stdout
