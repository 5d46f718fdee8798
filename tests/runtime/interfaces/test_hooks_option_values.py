"""Values on the command lines codecoder builds are never read as options (issue 32.1).

A hook rewrites the host's shell command into `codecoder exec … --approved TOKEN -- COMMAND`;
`secrets.token_urlsafe` starts a token with `-` about once in 64, and `--approved -iPGz…` was
read as a missing value: the approved command failed. Every value is now joined to its option
(`--approved=-iPGz…`) and the command follows `--`; these tests give each value a leading `-`
and run what the hook wrote, for real (@bwrap)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codecoder.interfaces import hooks
from codecoder.interfaces.cli.grammar import parse as _parsed
from codecoder.interfaces.hooks import HookOptions, handle
from tests.environments.bwrap_support import need_bwrap


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    need_bwrap()


def pre_tool(command: str, session: str = "s1", call: str = "t1") -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": "/",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": call,
    }


def rewritten(answer: dict[str, Any]) -> str:
    command = answer["hookSpecificOutput"]["updatedInput"]["command"]
    assert isinstance(command, str)
    return command


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )


def test_an_approval_token_starting_with_a_dash_still_runs_the_approved_command(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    monkeypatch.setattr(hooks.secrets, "token_urlsafe", lambda n: "-iPGz-option-looking")
    options = HookOptions(project=project, sandbox="bwrap")
    answer = handle("claude-code", pre_tool("touch made"), options)
    assert answer["hookSpecificOutput"]["permissionDecision"] == "ask"
    command = rewritten(answer)
    assert "--approved=-iPGz-option-looking" in shlex.split(command)

    done = run(command, project)

    assert done.returncode == 0, done.stderr
    assert (project / "made").exists()


def test_every_value_of_the_rewritten_command_parses_as_the_value_it_is(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session id, the allowed key and the command itself all start with `-` here."""
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    monkeypatch.setattr(hooks.secrets, "token_urlsafe", lambda n: "--json")
    options = HookOptions(project=project, sandbox="bwrap", allow=("run_command:echo",))
    answer = handle("claude-code", pre_tool("-x", session="--help"), options)
    words = shlex.split(rewritten(answer))
    parsed = _parsed(words[words.index("exec") :])
    assert (parsed.command, parsed.hook, parsed.approved) == (
        "exec",
        "claude-code:--help",
        "--json",
    )
    assert (parsed.allow, parsed.command_line, parsed.json) == (["run_command:echo"], "-x", False)
    assert parsed.project == project


def test_an_allowed_command_runs_under_a_session_id_starting_with_a_dash(project: Path) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    options = HookOptions(project=project, sandbox="bwrap", allow=("run_command:touch",))
    answer = handle("claude-code", pre_tool("touch granted", session="-s"), options)
    assert answer["hookSpecificOutput"]["permissionDecision"] == "allow"

    done = run(rewritten(answer), project)

    assert done.returncode == 0, done.stderr
    assert (project / "granted").exists()
