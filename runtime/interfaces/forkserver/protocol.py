"""The decision server: the `codecoder` command without its start-up cost.

A hook is a new process on every tool call of its host, and so is an agent's `codecoder call`
or `codecoder exec`; a new codecoder process spends about half a second importing the runtime
(pydantic, bashlex, the tool catalogue, the Docker SDK) before it does anything. The decision
server is a process that has imported it once. It is a fork server: for every request it forks
a child, and the child becomes the client's process (its arguments, standard streams and
terminal, working directory, environment, umask, signal dispositions) and runs
`runtime.interfaces.cli.main` there. The server itself never evaluates or runs anything and
keeps no state between requests, so every command runs as in a fresh process:
codecoder.json, the user's file, trust records, capabilities, PATH and grants are read by the
child, as they are at that moment.

    client (`codecoder ...`)                               server
    connect, check the server's uid                ───▶   accept, check the client's uid, fork
    {argv, env, umask, signals, ...}                      child: the client's context? (below)
      + fds 0, 1, 2, cwd [, its terminal]          ───▶   take the streams, directory, env ...
    forward SIGINT/TERM/HUP/QUIT, Ctrl-Z           ◀───   {"started"} + a pidfd of the child
                                                          runs the command on the client's fds
    exit with the code, or die of the signal       ◀───   {"exit": code} (the child), then
                                                          {"exit"} or {"signal"} (the server,
                                                          from the child's wait status)

What it serves (`SERVED`): decide, hook, key, tools, check, and the commands that run tools:
call, exec and replay. Everything else (an interactive session, the MCP server, audit, image
builds) runs in the client's own process. A question is asked on the client's terminal (its
stdin, or the `/dev/tty` it hands over: `foundation.terminal`); Ctrl-C and SIGTERM reach
the client, which passes them on to the child, so a call is interrupted, audited and ends with
130 or 143 as in its own process; if the client itself disappears, the child is killed.

Who can talk to it. The socket is in `<state dir>/daemon/` (mode 0700, owned by the user; a
directory that is not is never used), the socket is 0600, and each side checks the other's
uid with SO_PEERCRED: only the same user's processes, which could run codecoder themselves,
can ask (`foundation.localserver`, which the warm pool's server shares). The child runs a
command only for a client in exactly the server's own context
(`interfaces.forkserver.peercontext`: uid, groups, capabilities, namespaces, root, cgroup,
limits, niceness, seccomp and no_new_privs, security label), or it would run the command with
more than the client has: a client in another context is refused and runs the command itself.
The socket's name carries a digest of that context, so each context starts its own server.
Commands that run tools are served only to a client identified race-free whose context can be
compared in full (`Peer.runs_tools`). A server whose code changed on disk since it started (an
upgrade) refuses, and exits.

Failing closed. When the server cannot be reached, refuses, or its directory is not private,
the client returns None and the caller runs the command in-process (`runtime.__main__`). Once
the child took the request it owns the streams; if it ends without an exit code, the client
reports that and exits 2, which both hosts read as "blocked", and `decide` as an error.

The server is started on demand by the first client that finds none (that client waits for it
to be ready), one per user, state directory, installation and context, and exits after `IDLE`
seconds without a request or when its socket is removed (once the commands it runs have
ended). `CODECODER_DAEMON=0` turns it off: every command runs in-process.

This module is the protocol and the client; the server's process is
`interfaces.forkserver.server`, the child it forks for each request
`interfaces.forkserver.child`. This module imports only the standard library pieces the client
needs (and `peercontext`, which imports no more): the client's start-up is its cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import zlib

from codecoder.foundation import localserver
from codecoder.interfaces.forkserver import peercontext

TYPE_CHECKING = False  # typing itself is not imported: the client's start-up is its cost
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Final

__all__ = [
    "DESCRIPTORS",
    "IDLE",
    "MAX_REQUEST",
    "RUNS_TOOLS",
    "SERVED",
    "answer",
    "die_of",
    "identity",
    "reply",
    "socket_directory",
    "socket_name",
]

# What the server runs, by the command's first word; nothing else.
SERVED: Final = frozenset({"decide", "hook", "key", "tools", "check", "call", "exec", "replay"})
RUNS_TOOLS: Final = frozenset({"call", "exec", "replay"})  # need a peer whose context is known
IDLE: Final = 900.0  # seconds without a request after which the server exits
_READY_WAIT: Final = 20.0  # seconds a client waits for the server it started
MAX_REQUEST: Final = 4 << 20  # bytes: argv and environment of one request
DESCRIPTORS: Final = (
    4  # stdin, stdout, stderr, working directory (and the terminal, when there is one)
)
_OFF: Final = frozenset({"0", "off", "no", "false"})
# Signals the client passes on to the child running its command (Ctrl-Z is handled apart).
_FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# What the interpreter reads at start-up (and so a served command would not take from its
# client's environment): such variables are part of a server's identity.
_STARTUP_VARIABLES: Final = ("LC_ALL", "LC_CTYPE", "LANG")
# The folder holding runtime/ (the repository, or site-packages/codecoder when installed).
_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def socket_directory(environ: Any = None) -> str:
    """`<state dir>/daemon`, as `foundation.state.state_directory` finds the state directory
    (written with os.path here: the client must not import pathlib and the runtime)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME", "")
    if not (base and os.path.isabs(base)):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "codecoder", "daemon")


def identity(context: str | None = None) -> str:
    """Which code a server runs and where: the interpreter, the package's location, the
    user, the environment the interpreter read at start-up (PYTHON*, the locale) and a digest
    of the process context (`peercontext.fingerprint`; this process's when not given). A
    client is served only by a server of the same identity."""
    if context is None:
        context = peercontext.fingerprint()
    startup = sorted(
        f"{name}={value}"
        for name, value in os.environ.items()
        if name.startswith("PYTHON") or name in _STARTUP_VARIABLES
    )
    return "\n".join(
        [
            localserver.interpreter(),
            _PACKAGE_ROOT,
            str(os.geteuid()),
            *startup,
            f"context {zlib.crc32(context.encode('utf-8', 'surrogateescape')):08x}",
        ]
    )


def socket_name(ident: str) -> str:
    return localserver.socket_name("decide", ident)


# --- the client ------------------------------------------------------------------------------


def answer(argv: list[str]) -> int | None:
    """Run `codecoder ARGV` in the decision server: its exit code, or None when the server
    cannot run it (the caller then runs it in-process: nothing was read from stdin, nothing
    written). A command that ended by a signal ends this process by the same signal."""
    if not argv or argv[0] not in SERVED:
        return None
    if os.environ.get("CODECODER_DAEMON", "").strip().lower() in _OFF:
        return None
    try:
        ident = identity()
    except (OSError, IndexError, ValueError):
        return None  # this process's context cannot be read: it is served by nobody
    name = socket_name(ident)
    directory = socket_directory()
    try:
        sock = _connect(directory, name)
    except (OSError, ValueError):
        return None
    if sock is None:
        return None
    with sock, _Forwarding() as forwarding:
        try:
            sent = _send_request(sock, ident, argv, forwarding.ignored)
        except OSError:
            sent = False  # nothing was accepted: the streams are untouched
        if not sent:
            forwarding.give_back()
            return None
        outcome = _follow(sock, forwarding)
        if outcome is None:
            forwarding.give_back()
            return None
    kind, code = outcome
    if kind == "signal":
        die_of(code)
    elif kind == "lost":
        what = "the call is not allowed" if argv[0] not in RUNS_TOOLS else "its outcome is unknown"
        print(f"codecoder: the decision server ended without an answer; {what}", file=sys.stderr)
    return code


def _follow(sock: socket.socket, forwarding: _Forwarding) -> tuple[str, int] | None:
    """Read the server's messages until the command's end: ("exit", code), ("signal",
    number), ("lost", 2) when it ended without saying how, or None when it was refused before
    it started (then nothing of it ran)."""
    started = False
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 1)
        except OSError:
            data, fds = b"", []
        try:
            message = json.loads(data) if data else {}
        except ValueError:
            message = {}
        if not isinstance(message, dict):
            message = {}
        if message.get("started") is True and not started and len(fds) == 1:
            started = True
            forwarding.attach(fds[0])
            continue
        for fd in fds:
            os.close(fd)
        if "refused" in message and not started:
            return None
        for kind in ("exit", "signal"):
            value = message.get(kind)
            if isinstance(value, int) and not isinstance(value, bool):
                return kind, value
        # Accepted, then no answer: what ran may have written already, so it is not run again.
        return "lost", 2


def die_of(number: int) -> None:
    """End this process by signal `number`, as the command's own process ended."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
        os.kill(os.getpid(), number)


class _Forwarding:
    """While a command runs in the server, the signals a terminal or a host sends to this
    process go on to the child running it. Signals that arrive before the child has started
    wait; if the server refuses the request, they are delivered here instead (`give_back`).
    Ctrl-Z stops the child with this process, and `fg` continues both; a Ctrl-Z that arrives
    before the child is known waits too (stopping here alone would leave the call running)."""

    def __init__(self) -> None:
        self.pidfd: int | None = None
        self.pending: list[int] = []
        self.previous: dict[int, Any] = {}
        # Ignored by this process (`nohup`, a background job): ignored by the command too.
        self.ignored = [
            int(sig)
            for sig in signal.valid_signals()
            if sig not in (signal.SIGKILL, signal.SIGSTOP)
            and signal.getsignal(sig) is signal.SIG_IGN
        ]

    def __enter__(self) -> _Forwarding:
        try:
            for sig in (*_FORWARDED, signal.SIGTSTP):
                if sig in self.ignored:
                    continue
                handler = self._stop if sig == signal.SIGTSTP else self._forward
                self.previous[sig] = signal.signal(sig, handler)
        except ValueError:
            pass  # not the main thread: signals stay as they are
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        self.previous.clear()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def attach(self, pidfd: int) -> None:
        self.pidfd = pidfd
        pending, self.pending = self.pending, []
        for sig in pending:
            if sig == signal.SIGTSTP:
                self._stop(sig, None)
            else:
                self._send(sig)

    def give_back(self) -> None:
        """The command runs here after all: the signals that waited are this process's."""
        self.__exit__()
        for sig in self.pending:
            os.kill(os.getpid(), sig)
        self.pending.clear()

    def _send(self, sig: int) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def _forward(self, sig: int, frame: FrameType | None) -> None:
        if self.pidfd is None:
            self.pending.append(sig)
        else:
            self._send(sig)

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        if self.pidfd is None:
            if sig not in self.pending:
                self.pending.append(sig)
            return
        self._send(signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until `fg` or SIGCONT
        signal.signal(signal.SIGTSTP, self._stop)
        self._send(signal.SIGCONT)


def _connect(directory: str, name: str) -> socket.socket | None:
    """A connection to this installation's server, started if there is none; None when the
    directory is not private, the listener is another user's or no server could be started."""
    for attempt in range(2):
        try:
            sock = localserver.connect(directory, name)
        except PermissionError:
            return None
        if sock is not None:
            return sock
        if attempt == 0 and not localserver.start(
            "codecoder.interfaces.forkserver.server",
            directory,
            "server.log",
            cwd=_PACKAGE_ROOT,
            ready_wait=_READY_WAIT,
        ):
            return None
    return None


def _send_request(sock: socket.socket, ident: str, argv: list[str], ignored: list[int]) -> bool:
    old = os.umask(0o077)
    os.umask(old)
    streams = [sys.stdin, sys.stdout, sys.stderr]
    header = {
        "identity": ident,
        "argv": argv,
        "env": dict(os.environ),
        "umask": old,
        "path0": sys.path[0] if sys.path else "",
        "ignored": ignored,
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ())),
        "streams": [
            [getattr(s, "encoding", None), getattr(s, "errors", None)] if s else None
            for s in streams
        ],
    }
    data = json.dumps(header, ensure_ascii=False).encode("utf-8", "surrogateescape")
    if len(data) > MAX_REQUEST:
        return False
    fds = [0, 1, 2, os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    # The terminal a question is asked on when stdin carries data (foundation.terminal);
    # without one, the command has none either, as in its own process.
    with contextlib.suppress(OSError):
        fds.append(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    try:
        socket.send_fds(sock, [data], fds)
    finally:
        for fd in fds[3:]:
            os.close(fd)
    return True


def reply(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.send(json.dumps(message).encode(), socket.MSG_DONTWAIT)
