"""Nothing the product makes outlives the process that made it, unless it is state in its own
directory: the main paths, each run as a user runs them (the CLI, the MCP server, a hook), with
a private TMPDIR, leave it as they found it, and leave no scratch behind in the state directory
(foundation.scratch). The Wasm tools, @bwrap and @landlock calls, a @docker call, a @bwrap call
through the egress proxy, the MCP server over stdio, Claude Code's hook; and a runtime that was
never closed, or whose process was killed (what used to leave `codecoder-wasm-*` in /tmp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap


@pytest.fixture
def tmpdir_env(tmp_path: Path, private_state_and_config: Path) -> dict[str, str]:
    private = tmp_path / "tmpdir"
    private.mkdir()
    return {**os.environ, "TMPDIR": str(private), "CODECODER_DAEMON": "0"}


def codecoder(
    env: dict[str, str], project: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codecoder", args[0], "--project", str(project), *args[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def left_behind(env: dict[str, str]) -> dict[str, list[str]]:
    scratch = Path(env["XDG_STATE_HOME"]) / "codecoder" / "scratch"
    return {
        "tmpdir": sorted(os.listdir(env["TMPDIR"])),
        "scratch": sorted(os.listdir(scratch)) if scratch.is_dir() else [],
    }


def test_the_tools_leave_no_temporary_files(tmpdir_env: dict[str, str], project: Path) -> None:
    need_bwrap()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "notes.txt").write_text("needle\n")
    runs = [
        ("call", "--answer", "once", "write_file", '{"path": "a.txt", "content": "x\\n"}'),
        ("call", "--answer", "once", "edit_file",
         '{"path": "a.txt", "old_string": "x", "new_string": "y"}'),
        ("call", "read_file", "a.txt"),
        ("call", "grep", "needle"),
        ("call", "run_command", "--", "echo", "hi"),
        ("call", "--answer", "once", "run_command", "--", "touch", "made"),
        ("call", "--answer", "once", "run_wasm", '{"path": "m.wat"}'),
    ]  # fmt: skip
    (project / "m.wat").write_text('(module (func (export "_start")))')
    for args in runs:
        done = codecoder(tmpdir_env, project, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert (project / "a.txt").read_text() == "y\n"
    assert left_behind(tmpdir_env) == {"tmpdir": [], "scratch": []}


def test_a_call_through_the_egress_proxy_leaves_no_temporary_files(
    tmpdir_env: dict[str, str], project: Path
) -> None:
    need_bwrap()
    write_config(project, {"docker": {"network": {"allow": ["127.0.0.1"]}}})
    done = codecoder(tmpdir_env, project, "call", "--answer", "once", "run_command", "--", "true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert left_behind(tmpdir_env) == {"tmpdir": [], "scratch": []}


def _need_docker() -> None:
    from codecoder.environments.docker.image import sandbox_status
    from codecoder.environments.docker.settings import DockerSettings

    status = sandbox_status(DockerSettings())
    if status.problems:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the @docker tests must run, but {status.problems[0]}")
        pytest.skip(status.problems[0])


def test_a_docker_call_leaves_no_temporary_files(tmpdir_env: dict[str, str], project: Path) -> None:
    _need_docker()
    done = codecoder(
        tmpdir_env, project, "call", "--answer", "once", "run_container", "--", "touch", "x"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (project / "x").is_file()
    assert left_behind(tmpdir_env) == {"tmpdir": [], "scratch": []}


def _rpc(proc: subprocess.Popen[str], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


def _reply(proc: subprocess.Popen[str], ident: int) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        message = json.loads(line)
        if message.get("id") == ident:
            return dict(message)
    raise AssertionError("the server ended without answering")


def test_the_mcp_server_and_a_hook_leave_no_temporary_files(
    tmpdir_env: dict[str, str], project: Path
) -> None:
    need_bwrap()
    (project / "notes.txt").write_text("needle\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "codecoder", "serve", "--project", str(project)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=tmpdir_env,
    )
    try:
        _rpc(server, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "litter", "version": "1"}}})  # fmt: skip
        assert "result" in _reply(server, 1)
        _rpc(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for ident, (tool, arguments) in enumerate(
            [("grep", {"pattern": "needle"}), ("run_command", {"command": "echo hi"})], start=2
        ):
            _rpc(server, {"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}})  # fmt: skip
            reply = _reply(server, ident)
            assert not reply["result"].get("isError"), reply
        assert server.stdin is not None
        server.stdin.close()
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
        server.wait()
    event = {
        "session_id": "s1",
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "echo hi"},
        "tool_use_id": "t1",
    }
    done = codecoder(tmpdir_env, project, "hook", "claude-code", stdin=json.dumps(event))
    assert done.returncode == 0, done.stderr
    assert left_behind(tmpdir_env) == {"tmpdir": [], "scratch": []}


UNCLOSED = """
import os, signal, sys
from codecoder.foundation.decision import Answer
from codecoder.session import Runtime

runtime = Runtime(sys.argv[1], asker=lambda request: Answer.ONCE)
session = runtime.session()
for tool, arguments in [
    ("write_file", {"path": "a.txt", "content": "x"}),
    ("run_command", {"command": "touch made"}),
]:
    outcome = session.call(tool, arguments)
    assert outcome.ok, outcome
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("end", ["exit", "kill"])
def test_a_runtime_never_closed_leaves_nothing_in_tmp_and_a_killed_ones_scratch_is_swept(
    tmpdir_env: dict[str, str], project: Path, end: str
) -> None:
    need_bwrap()
    done = subprocess.run(
        [sys.executable, "-c", UNCLOSED, str(project), end],
        capture_output=True,
        text=True,
        env=tmpdir_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == (-9 if end == "kill" else 0), done.stderr
    assert (project / "a.txt").read_text() == "x"
    left = left_behind(tmpdir_env)
    assert left["tmpdir"] == []
    assert len(left["scratch"]) == (1 if end == "kill" else 0)
    # The next runtime to start takes what the killed one left.
    codecoder(tmpdir_env, project, "call", "read_file", "a.txt")
    assert left_behind(tmpdir_env) == {"tmpdir": [], "scratch": []}
