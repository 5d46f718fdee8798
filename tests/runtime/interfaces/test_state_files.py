"""The files the runtime reads for itself may be anything: a FIFO where codecoder.json, the trust
record, a session file or the audit log should be never blocks a command (each is refused with
its path), and a damaged or forged session or pid file is never believed (pid 0 would signal
the revoker's own process group). Real processes, real FIFOs, the real CLI."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codecoder.config import trust
from codecoder.foundation.state import project_state_directory
from codecoder.interfaces.livegrants import live_sessions, sessions_directory, start_time
from codecoder.interfaces.mcp_server import live_servers, pid_directory, signal_servers
from tests.conftest import write_config

# A command that blocks on a FIFO would wait forever; one that does not takes a few seconds.
PATIENCE = 60


def codecoder(project: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    try:
        return subprocess.run(
            [sys.executable, "-m", "codecoder", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=PATIENCE,
            env=env,
            cwd=project,
            # Its own process group: a signal to "pid 0" reaches it, not the test.
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`codecoder {' '.join(args)}` blocked for {PATIENCE} s")


def _claude_event(project: Path) -> str:
    return json.dumps(
        {
            "session_id": "s1",
            "transcript_path": "/tmp/transcript.jsonl",
            "cwd": str(project),
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "touch x"},
            "tool_use_id": "t1",
        }
    )


def _serve(project: Path) -> dict[str, Any]:
    """`codecoder serve`'s answer to an MCP initialize request and a tools/call."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": "x", "content": "x"}},
        },
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "codecoder", "serve", "--project", str(project)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert server.stdin is not None and server.stdout is not None
    answers: dict[Any, Any] = {}
    try:
        server.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        server.stdin.flush()
        deadline = time.monotonic() + PATIENCE
        received = b""
        while 2 not in answers:
            ready, _, _ = select.select([server.stdout], [], [], deadline - time.monotonic())
            if not ready:
                pytest.fail(f"`codecoder serve` blocked for {PATIENCE} s")
            chunk = os.read(server.stdout.fileno(), 65536)
            if not chunk:
                break
            *lines, received = (received + chunk).split(b"\n")
            for line in lines:
                answer = json.loads(line)
                answers[answer.get("id")] = answer
    finally:
        server.kill()
        server.wait()
    return answers


def test_a_fifo_for_codecoder_json_blocks_no_command_and_is_named(project: Path) -> None:
    os.mkfifo(project / "codecoder.json")

    check = codecoder(project, "check")
    call = codecoder(
        project, "call", "--answer", "once", "write_file", '{"path":"x","content":"x"}'
    )
    listing = codecoder(project, "allowlist", "list")
    hook = codecoder(
        project, "hook", "claude-code", "--project", str(project), stdin=_claude_event(project)
    )
    served = _serve(project)

    fifo = str(project / "codecoder.json")
    for done in (check, call, listing):
        assert done.returncode != 0, done
        assert "FIFO" in done.stdout + done.stderr, done
        assert "codecoder.json" in done.stdout + done.stderr, done
    assert not (project / "x").exists()
    verdict = json.loads(hook.stdout)["hookSpecificOutput"]
    assert verdict["permissionDecision"] == "deny"
    assert "FIFO" in verdict["permissionDecisionReason"]
    assert served[2]["result"]["isError"] is True
    assert "FIFO" in json.dumps(served[2])
    assert os.path.exists(fifo)  # left as it is: the user's to look at


def test_a_fifo_for_the_trust_record_leaves_the_file_untrusted_without_blocking(
    project: Path,
) -> None:
    write_config(project, {"allowlist": {"write_file:x": "AlwaysThisProject"}})
    record = trust.record_path(project.resolve())
    record.unlink()
    os.mkfifo(record)

    check = codecoder(project, "check")
    call = codecoder(
        project, "call", "--non-interactive", "write_file", '{"path":"x","content":"x"}'
    )

    assert "untrusted" in check.stdout + check.stderr, check
    assert call.returncode == 3, call  # refused: nothing trusts the grant
    assert not (project / "x").exists()


def test_a_fifo_for_a_session_file_or_the_audit_log_blocks_nothing(project: Path) -> None:
    state = project_state_directory(project.resolve())
    sessions = sessions_directory(project.resolve())
    sessions.mkdir(parents=True)
    os.mkfifo(sessions / f"{os.getpid()}.json")
    os.mkfifo(state / "audit.jsonl")

    listing = codecoder(project, "allowlist", "list")
    call = codecoder(project, "call", "read_file", '{"path":"."}')
    log = codecoder(project, "log")

    assert listing.returncode == 0, listing
    assert call.returncode != 0, call
    assert "audit log" in call.stderr and "FIFO" in call.stderr, call
    assert "Traceback" not in call.stderr
    assert log.returncode != 0 and "FIFO" in log.stderr, log


def _publish(project: Path, pid: Any, *, name: str | None = None, **record: Any) -> Path:
    directory = sessions_directory(project.resolve())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name if name is not None else pid}.json"
    grant = {"tool": "run_command", "entry": "run_command:make", "environment": "@bwrap"}
    document = {"pid": pid, "kind": "a forged session", "since": 0.0, "grants": [grant]}
    path.write_text(json.dumps({**document, **record}))
    return path


@pytest.mark.parametrize(
    ("pid", "started", "name"),
    [
        (0, None, "0"),  # pid 0: the revoker's own process group
        (-1, None, "-1"),  # every process the revoker may signal
        (1, None, "1"),  # init
        (True, None, "1"),  # a bool is not a pid
        ("self", None, None),  # our own pid, but no start time to tell a reuse apart
        ("self", "12", None),  # our own pid, with another start time: a reused pid
        ("self", "now", "1234567"),  # the file's name and its pid disagree
    ],
)
def test_a_damaged_session_file_is_neither_listed_nor_signalled(
    project: Path, pid: Any, started: str | None, name: str | None
) -> None:
    me = os.getpid()
    pid = me if pid == "self" else pid
    started = start_time(me) if started == "now" else started
    path = _publish(project, pid, name=name, started=started)
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        listed = live_sessions(project.resolve())
        revoked = codecoder(project, "allowlist", "revoke", "run_command:make")
    finally:
        signal.signal(signal.SIGUSR1, previous)

    assert listed == []
    assert revoked.returncode in (0, 1), revoked  # not killed by its own signal (-10)
    assert received == []  # nor was this process signalled on the file's word
    if path.name[0].isdigit():  # what the runtime looks at: a damaged file is removed
        assert not path.exists()


def test_a_pid_file_naming_pid_0_is_not_signalled_by_reload(project: Path) -> None:
    directory = pid_directory(project.resolve())
    directory.mkdir(parents=True)
    (directory / "serve-0.pid").write_text(json.dumps({"pid": 0}))

    reload = codecoder(project, "reload")

    assert reload.returncode in (0, 1), reload  # before: killed by its own SIGHUP (-1)
    assert live_servers(project.resolve()) == []
    assert signal_servers(project.resolve()) == []
