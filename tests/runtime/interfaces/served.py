"""A user's machine for `codecoder` processes and the decision server they start: the state
and configuration directories, PATH, and the servers to stop at the end of a test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from codecoder.foundation import localserver
from codecoder.interfaces.forkserver import protocol


class Machine:
    """A user's environment for codecoder processes: state, configuration, PATH."""

    def __init__(self, root: Path, project: Path) -> None:
        self.project = project
        self.env = {k: v for k, v in os.environ.items() if k not in ("CI", "CODECODER_DAEMON")}
        self.env["XDG_STATE_HOME"] = str(root / "state")
        self.env["XDG_CONFIG_HOME"] = str(root / "config")
        self.directory = Path(protocol.socket_directory(self.env))

    def environment(self, daemon: bool = True, **env: str) -> dict[str, str]:
        environment = {**self.env, **env}
        if not daemon:
            environment["CODECODER_DAEMON"] = "0"
        return environment

    def command(self, *args: str, prefix: Sequence[str] = ()) -> list[str]:
        return [*prefix, sys.executable, "-m", "codecoder", *args]

    def run(
        self,
        *args: str,
        stdin: str = "",
        daemon: bool = True,
        prefix: Sequence[str] = (),
        preexec: Callable[[], None] | None = None,
        **env: str,
    ) -> tuple[int, str, str]:
        proc = subprocess.run(
            self.command(*args, prefix=prefix),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env=self.environment(daemon, **env),
            cwd=self.project,
            preexec_fn=preexec,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def popen(self, *args: str, daemon: bool = True, **options: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args),
            text=True,
            env=self.environment(daemon),
            cwd=self.project,
            **options,
        )

    def server_pids(self) -> list[int]:
        """The servers listening in this state directory (one per context)."""
        pids = []
        for lock in self.directory.glob("*.lock"):
            text = lock.read_text().strip()
            if text and alive(int(text)):
                pids.append(int(text))
        return pids

    def server_pid(self) -> int | None:
        pids = self.server_pids()
        return pids[0] if pids else None

    def serving(self, within: float = 120.0) -> int:
        """The pid of a server that serves, started by `codecoder tools` as often as needed: on
        a loaded machine a client waits `_READY_WAIT` for the server it started, then runs
        in-process (as it should) while the server is still starting."""
        deadline = time.monotonic() + within
        while (pid := self.server_pid()) is None:
            assert time.monotonic() < deadline, "no decision server started"
            self.run("tools")
        return pid

    def stop(self) -> None:
        for pid in self.server_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            wait_until(lambda pid=pid: not alive(pid))  # type: ignore[misc]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (the server is not our child; init reaps it).
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            return False
    return True


def children(pid: int) -> list[int]:
    """The live child processes of `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def wait_until(condition: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """An AF_UNIX address for `path`, however long, as the client and server make it."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield localserver.address(str(path.parent), path.stem, fd)
    finally:
        os.close(fd)


def request(
    machine: Machine, argv: list[str], ident: str | None = None, fds: Sequence[int] = ()
) -> list[dict[str, Any]]:
    """Speak the server's protocol directly, as any process of the user could: every message
    until the connection closes."""
    ident = ident or protocol.identity()
    name = protocol.socket_name(ident)
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock,
        address(machine.directory / f"{name}.sock") as where,
    ):
        sock.connect(where)
        header = {"identity": ident, "argv": argv, "env": machine.env, "umask": 18}
        cwd = os.open(machine.project, os.O_RDONLY | os.O_DIRECTORY)
        null = os.open(os.devnull, os.O_RDWR)
        try:
            given = list(fds) or [null, null, null]
            socket.send_fds(sock, [json.dumps(header).encode()], [*given, cwd])
        finally:
            os.close(cwd)
            os.close(null)
        messages = []
        sock.settimeout(30)
        while True:
            data, received, _, _ = socket.recv_fds(sock, 65536, 1)
            for fd in received:
                os.close(fd)
            if not data:
                return messages
            messages.append(json.loads(data))
