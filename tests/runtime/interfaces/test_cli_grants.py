"""`codecoder allowlist list|revoke`: every grant in force, wherever it is kept, and revoked
there: codecoder.json, the user's file, a running MCP server (its `--allow` and its answers), a
running `codecoder session` in a real terminal, and the hooks' host sessions. Real processes."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pexpect
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from codecoder.interfaces.livegrants import live_sessions, sessions_directory
from tests.conftest import write_config
from tests.runtime.interfaces.test_cli import as_json, codecoder
from tests.runtime.interfaces.test_hooks import answer, claude
from tests.runtime.interfaces.test_mcp_server import REPO, Human, decision_of, text_of

PROMPT = "codecoder> "


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def listed(project: Path) -> dict[str, Any]:
    proc = codecoder("allowlist", "list", "--json", project=project)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = as_json(proc)
    return result


def grants_of(project: Path, source: str) -> list[tuple[str, str]]:
    return [(g["key"], g["origin"]) for g in listed(project)["grants"] if g["source"] == source]


@asynccontextmanager
async def server(project: Path, human: Human, *allow: str) -> AsyncIterator[ClientSession]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    args = ["-m", "codecoder", "serve", "--project", str(project)]
    for key in allow:
        args += ["--allow", key]
    parameters = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO), env=env)
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(parameters, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=human) as session,
        ):
            await session.initialize()
            yield session


def session_in_terminal(project: Path) -> pexpect.spawn:
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
    child.expect_exact(PROMPT)
    return child


@pytest.mark.anyio
async def test_list_shows_every_grant_in_force_with_where_it_is_kept_what_it_covers_and_how_long(
    project: Path,
) -> None:
    user_file = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('{"deny": ["run_command:curl"]}\n')
    write_config(
        project,
        {"allowlist": {"write_file:tests/**": "AlwaysThisProject"}, "deny": ["run_command:rm"]},
    )
    hooked = claude("Bash", {"command": "ls -la"}, call="c1", session="claude-session-1")
    assert answer("claude-code", hooked, project)["hookSpecificOutput"]["permissionDecision"] == (
        "ask"
    )
    answer("claude-code", {**hooked, "hook_event_name": "PostToolUse"}, project)
    child = session_in_terminal(project)
    child.sendline("run_command mkdir build")
    child.expect_exact("choice [o/s/p/c/g/d]: ")
    child.sendline("s")
    child.expect_exact(PROMPT)
    human = Human("session")
    async with server(project, human, "run_command:echo") as mcp:
        result = await mcp.call_tool("run_command", {"command": "touch ok"})
        assert decision_of(result)["source"] == "session"
        everything = listed(project)
    child.sendline("/quit")
    child.expect(pexpect.EOF)

    grants = {g["key"]: g for g in everything["grants"]}
    assert grants["write_file:tests/**"] == {
        "key": "write_file:tests/**",
        "source": "project",
        "origin": f"{project / 'codecoder.json'} line 3",
        "covers": "any file under tests/, at any depth; never a protected path (codecoder.json,"
        " .codecoder/, any .git or .gitmodules, the agents' settings such as .claude/): those are"
        " asked every time",
        "lasts": "until revoked",
        "expiry": None,
        "environment": None,
        "grants": True,
        "problem": None,
    }
    served = [g for g in everything["grants"] if g["origin"].startswith("codecoder serve (pid ")]
    assert [(g["key"], g["origin"].split(", ", 1)[1]) for g in served] == [
        ("run_command:echo", "--allow"),
        ("run_command:touch", "answered AlwaysThisSession"),
    ]
    assert served[0]["covers"] == "every simple `echo …` command, with any arguments"
    assert served[0]["lasts"].startswith("while codecoder serve (pid ")
    assert served[0]["environment"] == "@bwrap"
    interactive = grants["run_command:mkdir"]
    assert interactive["origin"].startswith("codecoder session (pid ")
    assert interactive["lasts"].endswith(" runs")
    assert grants["run_command:ls"]["origin"] == (
        "the Claude Code session claude-sessi, approved at its prompt (codecoder hook claude-code)"
    )
    assert grants["run_command:ls"]["lasts"] == "until the Claude Code session claude-sessi ends"
    assert everything["deny"] == [
        {"key": "run_command:curl", "line": 1, "file": str(user_file)},
        {"key": "run_command:rm", "line": 6, "file": str(project / "codecoder.json")},
    ]
    # Both ended: what they published went with them.
    assert grants_of(project, "session") == []


@pytest.mark.anyio
async def test_revoke_takes_a_grant_back_from_a_running_server_which_then_asks_again(
    project: Path,
) -> None:
    human = Human("once")
    async with server(project, human, "run_command:mkdir") as mcp:
        first = await mcp.call_tool("run_command", {"command": "mkdir -v one"})
        assert decision_of(first)["source"] == "session" and not human.asked
        revoked = codecoder("allowlist", "revoke", "run_command:mkdir", project=project)
        assert revoked.returncode == 0, revoked.stderr
        assert revoked.stdout.startswith("revoked run_command:mkdir from codecoder serve (pid ")
        assert grants_of(project, "session") == []
        second = await mcp.call_tool("run_command", {"command": "mkdir -v two"})
        assert (text_of(second), decision_of(second)["source"]) == (
            "mkdir: created directory 'two'\n[exit code 0]",
            "once",
        )
        assert len(human.asked) == 1
    again = codecoder("allowlist", "revoke", "run_command:mkdir", project=project)
    assert (again.returncode, again.stdout, again.stderr) == (
        1,
        "",
        "codecoder: run_command:mkdir is not granted anywhere (`codecoder allowlist list`)\n",
    )


def test_revoke_takes_a_grant_back_from_a_session_in_a_terminal(project: Path) -> None:
    child = session_in_terminal(project)
    child.sendline("run_command touch hi")
    child.expect_exact("choice [o/s/p/c/g/d]: ")
    child.sendline("s")
    child.expect_exact(PROMPT)
    assert [key for key, _ in grants_of(project, "session")] == ["run_command:touch"]
    revoked = codecoder("allowlist", "revoke", "run_command:touch", "--json", project=project)
    assert revoked.returncode == 0
    (where,) = as_json(revoked)["from"]
    assert where == f"codecoder session (pid {child.pid})"
    child.sendline("run_command touch again")
    child.expect_exact("choice [o/s/p/c/g/d]: ")  # asked again: the grant is gone
    child.sendline("d")
    child.expect_exact(PROMPT)
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0  # SIGUSR1 was handled, not fatal


def test_revoke_takes_a_grant_back_from_a_hook_session_and_the_project_file(project: Path) -> None:
    write_config(project, {"allowlist": {"write_file:notes.txt": "AlwaysThisProject"}})
    event = claude("Bash", {"command": "ls -la"}, call="c1")
    answer("claude-code", event, project)
    answer("claude-code", {**event, "hook_event_name": "PostToolUse"}, project)
    again = claude("Bash", {"command": "ls"}, call="c2")
    decided = answer("claude-code", again, project)["hookSpecificOutput"]
    assert decided["permissionDecision"] == "allow"
    revoked = codecoder("allowlist", "revoke", "run_command:ls", "--json", project=project)
    assert as_json(revoked)["from"] == ["the Claude Code session s1"]
    asked = answer("claude-code", claude("Bash", {"command": "ls"}, call="c3"), project)
    assert asked["hookSpecificOutput"]["permissionDecision"] == "ask"
    file = codecoder("allowlist", "revoke", "write_file:notes.txt", project=project)
    assert file.stdout == f"revoked write_file:notes.txt from {project / 'codecoder.json'}\n"
    assert "allowlist" not in json.loads((project / "codecoder.json").read_text()) or (
        json.loads((project / "codecoder.json").read_text())["allowlist"] == {}
    )


def test_what_a_dead_or_reused_process_published_is_ignored_and_removed(project: Path) -> None:
    directory = sessions_directory(project.resolve())
    directory.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    grant = {"tool": "run_command", "entry": "run_command:rm", "environment": "@shell"}
    forged = {"pid": dead.pid, "kind": "codecoder serve", "grants": [grant]}
    (directory / f"{dead.pid}.json").write_text(json.dumps(forged))
    reused = {"pid": os.getpid(), "started": "1", "kind": "codecoder serve", "grants": [grant]}
    (directory / f"{os.getpid()}.json").write_text(json.dumps(reused))
    (directory / "junk.json").write_text("{")
    assert live_sessions(project.resolve()) == []
    assert sorted(p.name for p in directory.iterdir()) == ["junk.json"]
    assert grants_of(project, "session") == []


def test_a_published_grant_is_readable_by_its_user_only_and_outside_the_workspace(
    project: Path,
) -> None:
    child = session_in_terminal(project)
    child.sendline("run_command touch hi")
    child.expect_exact("choice [o/s/p/c/g/d]: ")
    child.sendline("s")
    child.expect_exact(PROMPT)
    (process,) = live_sessions(project.resolve())
    assert stat.S_IMODE(process.path.stat().st_mode) == 0o600
    assert project.resolve() not in process.path.parents
    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()
    deadline = time.monotonic() + 10
    while process.path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.path.exists()
