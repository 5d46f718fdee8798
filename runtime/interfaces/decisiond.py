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
stdin, or the `/dev/tty` it hands over: `runtime.kernel.terminal`); Ctrl-C and SIGTERM reach
the client, which passes them on to the child, so a call is interrupted, audited and ends with
130 or 143 as in its own process; if the client itself disappears, the child is killed.

Who can talk to it. The socket is in `<state dir>/daemon/` (mode 0700, owned by the user; a
directory that is not is never used), the socket is 0600, and each side checks the other's
uid with SO_PEERCRED: only the same user's processes, which could run codecoder themselves,
can ask. The child runs a command only for a client in exactly the server's own context
(`runtime.interfaces.peercontext`: uid, groups, capabilities, namespaces, root, cgroup,
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

This module's top level imports only the standard library pieces the client needs; the
server's imports are made in `serve`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import zlib

from codecoder.runtime.interfaces import peercontext

TYPE_CHECKING = False  # typing itself is not imported: the client's start-up is its cost
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, Final

__all__ = ["IDLE", "RUNS_TOOLS", "SERVED", "answer", "serve", "socket_directory"]

# What the server runs, by the command's first word; nothing else.
SERVED: Final = frozenset({"decide", "hook", "key", "tools", "check", "call", "exec", "replay"})
RUNS_TOOLS: Final = frozenset({"call", "exec", "replay"})  # need a peer whose context is known
IDLE: Final = 900.0  # seconds without a request after which the server exits
_TICK: Final = 5.0  # how often an idle server checks that its socket is still its own
_READY_WAIT: Final = 20.0  # seconds a client waits for the server it started
_MAX_REQUEST: Final = 4 << 20  # bytes: argv and environment of one request
_FDS: Final = 4  # stdin, stdout, stderr, working directory (and the terminal, when there is one)
_OFF: Final = frozenset({"0", "off", "no", "false"})
_SO_PASSPIDFD: Final = 76  # Linux 6.5; not named by Python 3.11's socket module
_SCM_PIDFD: Final = 4
# Signals the client passes on to the child running its command (Ctrl-Z is handled apart).
_FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# What the interpreter reads at start-up (and so a served command would not take from its
# client's environment): such variables are part of a server's identity.
_STARTUP_VARIABLES: Final = ("LC_ALL", "LC_CTYPE", "LANG")
# The folder holding runtime/ (the repository, or site-packages/codecoder when installed).
_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def socket_directory(environ: Any = None) -> str:
    """`<state dir>/daemon`, as `runtime.kernel.state.state_directory` finds the state directory
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
            sys.executable,
            _PACKAGE_ROOT,
            str(os.geteuid()),
            *startup,
            f"context {zlib.crc32(context.encode('utf-8', 'surrogateescape')):08x}",
        ]
    )


def _socket_name(ident: str) -> str:
    return f"decide-{zlib.crc32(ident.encode('utf-8', 'surrogateescape')):08x}"


def _address(directory: str, name: str, directory_fd: int) -> str:
    """The socket's address; through the directory's descriptor when the path is longer than
    an AF_UNIX address may be (108 bytes)."""
    path = os.path.join(directory, f"{name}.sock")
    if len(os.fsencode(path)) < 100:
        return path
    return f"/proc/self/fd/{directory_fd}/{name}.sock"


def _private(fd: int) -> bool:
    """A directory only this user can enter and change."""
    info = os.fstat(fd)
    return info.st_uid == os.geteuid() and info.st_mode & 0o077 == 0


def _peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (struct ucred: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


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
    name = _socket_name(ident)
    directory = socket_directory()
    try:
        sock = _connect(directory, name, ident)
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
        _die_of(code)
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


def _die_of(number: int) -> None:
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
    Ctrl-Z stops the child with this process, and `fg` continues both."""

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
        for sig in self.pending:
            self._send(sig)
        self.pending.clear()

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
        self._send(signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until `fg` or SIGCONT
        signal.signal(signal.SIGTSTP, self._stop)
        self._send(signal.SIGCONT)


def _connect(directory: str, name: str, ident: str) -> socket.socket | None:
    """A connection to this installation's server, started if there is none; None when the
    directory is not private or the server cannot be started."""
    for attempt in range(2):
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            dir_fd = -1
        if dir_fd >= 0:
            try:
                if not _private(dir_fd):
                    return None
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    sock.connect(_address(directory, name, dir_fd))
                except OSError:
                    sock.close()
                else:
                    if _peer_uid(sock) == os.geteuid():
                        return sock
                    sock.close()
                    return None
            finally:
                os.close(dir_fd)
        if attempt == 0 and not _start_server(directory, ident):
            return None
    return None


def _start_server(directory: str, ident: str) -> bool:
    """Start a server in the background and wait until it listens (or gives up)."""
    import select
    import subprocess

    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        log = os.open(
            os.path.join(directory, "decisiond.log"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return False
    try:
        server = subprocess.Popen(
            [sys.executable, "-m", "codecoder.runtime.interfaces.decisiond"],
            cwd=_PACKAGE_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    except (OSError, ValueError):
        return False
    finally:
        os.close(log)
    assert server.stdout is not None
    with server.stdout:
        ready, _, _ = select.select([server.stdout], [], [], _READY_WAIT)
        return bool(ready) and server.stdout.readline() == b"ready\n"


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
    if len(data) > _MAX_REQUEST:
        return False
    fds = [0, 1, 2, os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    # The terminal a question is asked on when stdin carries data (runtime.kernel.terminal);
    # without one, the command has none either, as in its own process.
    with contextlib.suppress(OSError):
        fds.append(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    try:
        socket.send_fds(sock, [data], fds)
    finally:
        for fd in fds[3:]:
            os.close(fd)
    return True


# --- the server ------------------------------------------------------------------------------


def serve(idle: float = IDLE) -> int:
    """Listen for requests until idle for `idle` seconds; returns the exit status."""
    import fcntl
    import select
    import time

    context = peercontext.fingerprint()
    ident = identity(context)
    _warm_up()
    snapshot = _code_snapshot()
    directory = socket_directory()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if not _private(dir_fd):
        print(f"codecoder decisiond: {directory} is not private to this user", file=sys.stderr)
        return 1
    name = _socket_name(ident)
    lock = os.open(f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another server of this installation is already listening
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())
    address = _address(directory, name, dir_fd)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{name}.sock", dir_fd=dir_fd)
    old = os.umask(0o177)
    try:
        listener.bind(address)
    finally:
        os.umask(old)
    bound = os.stat(f"{name}.sock", dir_fd=dir_fd, follow_symlinks=False).st_ino
    # Every request carries a pidfd of the process that sent it: a message sent before its
    # connection was accepted, because the kernel adds one when no socket receives it yet, one
    # sent after, because accepted sockets inherit this option.
    with contextlib.suppress(OSError):
        listener.setsockopt(socket.SOL_SOCKET, _SO_PASSPIDFD, 1)
    listener.listen(64)
    listener.setblocking(False)

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    # A child's end wakes the loop (its wait status goes to its client).
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.write(1, b"ready\n")
    os.dup2(devnull, 1)
    os.dup2(devnull, 0)
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    running: dict[int, socket.socket] = {}  # child pid -> its client's connection
    watched: dict[int, int] = {}  # connection fd -> child pid
    last = time.monotonic()
    try:
        while True:
            if stopping or not _still_ours(dir_fd, name, bound):
                if not running:
                    return 0
                with contextlib.suppress(KeyError):
                    poller.unregister(listener)  # no new requests; the running ones end
            elif not running and time.monotonic() - last > idle:
                return 0
            events = poller.poll(min(_TICK, idle) * 1000)
            # Hang-ups first: a connection closed below may free its number for one accepted
            # below, whose child must not be taken for the one whose client went away.
            for fd, _ in sorted(events, key=lambda event: event[0] not in watched):
                if fd in watched:
                    # The client is gone (killed, or its host closed it): so is its command,
                    # as it would be in the client's own process.
                    poller.unregister(fd)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(watched.pop(fd), signal.SIGKILL)
                elif fd == wake_read:
                    with contextlib.suppress(OSError):
                        os.read(wake_read, 512)
                    _report_ended(running, watched, poller)
                elif fd == listener.fileno():
                    last = time.monotonic()
                    inherited = (lock, dir_fd, wake_read, wake_write, devnull)
                    if not _accept(listener, snapshot, context, running, inherited):
                        return 0
                    for pid, conn in running.items():
                        if conn.fileno() not in watched:
                            watched[conn.fileno()] = pid
                            poller.register(conn, 0)  # only its hang-up is of interest
            _report_ended(running, watched, poller)
    finally:
        if _still_ours(dir_fd, name, bound):
            os.unlink(f"{name}.sock", dir_fd=dir_fd)
        listener.close()
        os.close(lock)


def _accept(
    listener: socket.socket,
    snapshot: dict[str, tuple[int, int]],
    context: str,
    running: dict[int, socket.socket],
    inherited: tuple[int, ...],
) -> bool:
    """Take every waiting connection, forking a child for each (which closes the server's
    `inherited` descriptors); False when the installed code changed (the server then exits)."""
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return True
        if _peer_uid(conn) != os.geteuid():
            conn.close()
            continue
        if _code_snapshot() != snapshot:
            _refuse(conn, "the installed code changed; start a new server")
            conn.close()
            return False
        conn.setblocking(True)
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other in running.values():
                other.close()
            for fd in inherited:
                os.close(fd)
            _child(conn, context)  # never returns
        running[pid] = conn


def _report_ended(running: dict[int, socket.socket], watched: dict[int, int], poller: Any) -> None:
    """Tell the clients of children that ended how they ended (the child said so itself when
    it could; this covers a child that died of a signal)."""
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        if conn is None:
            continue
        if conn.fileno() in watched:
            del watched[conn.fileno()]
            with contextlib.suppress(KeyError):
                poller.unregister(conn)
        if os.WIFSIGNALED(status):
            _reply(conn, {"signal": os.WTERMSIG(status)})
        else:
            _reply(conn, {"exit": os.waitstatus_to_exitcode(status)})
        conn.close()


def _warm_up() -> None:
    """Import what the served commands use (lazily, in a fresh process): importing is all the
    server does before it forks; no call is evaluated here, so no cache holds an answer, and
    no thread is started (a forked child has only the thread that forked)."""
    import bashlex  # noqa: F401  (builds its parser tables on import: ~0.1 s)
    import pydantic.type_adapter  # noqa: F401

    import codecoder.environments.docker.environment
    import codecoder.environments.docker.image
    import codecoder.environments.landlock
    import codecoder.runtime.evaluation
    import codecoder.runtime.interfaces.hooks
    import codecoder.runtime.session  # noqa: F401
    from codecoder.runtime.interfaces import cli

    cli._parser()  # the grammar only: it reads no configuration


def _code_snapshot() -> dict[str, tuple[int, int]]:
    """The modification time and size of every module file loaded, to notice an upgrade."""
    snapshot: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str):
            continue
        try:
            info = os.stat(path)
        except OSError:
            snapshot[path] = (-1, -1)
            continue
        snapshot[path] = (info.st_mtime_ns, info.st_size)
    return snapshot


def _still_ours(dir_fd: int, name: str, inode: int) -> bool:
    try:
        return os.stat(f"{name}.sock", dir_fd=dir_fd, follow_symlinks=False).st_ino == inode
    except OSError:
        return False


def _refuse(conn: socket.socket, problem: str) -> None:
    """Refuse a request without running it. The request is taken first (its descriptors
    closed): closing a Unix socket with unread data resets it, and the client would read that
    as a call that was accepted and ended without an answer, instead of running it itself."""
    with contextlib.suppress(OSError):
        conn.settimeout(2.0)
        _, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST + 1, _FDS + 1)
        for fd in fds:
            os.close(fd)
    _reply(conn, {"refused": problem})


def _reply(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.send(json.dumps(message).encode(), socket.MSG_DONTWAIT)


def _child(conn: socket.socket, context: str) -> None:
    """One request, in a forked child: become the client's process, run `main`, report.

    Until `main` starts nothing of the client's was read or written, so any problem up to
    there is a refusal (the client runs the command itself); after that, the exit code."""
    fds: list[int] = []
    try:
        signal.set_wakeup_fd(-1)
        conn.settimeout(10.0)
        data, fds, sender, flags = _receive(conn)
        try:
            peer = peercontext.identify(conn, context, sender)
        finally:
            if sender is not None:
                os.close(sender)
        problem = _check_request(data, fds, flags, peer, identity(context))
        if problem is None:
            request = json.loads(data.decode("utf-8", "surrogateescape"))
            _become_client(request, fds)
    except BaseException as exc:  # the child never returns into the server loop
        problem = f"the request could not be taken: {exc!r}"
    if problem is not None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        _reply(conn, {"refused": problem})
        os._exit(0)
    conn.settimeout(None)
    try:
        pidfd = os.pidfd_open(os.getpid())
        socket.send_fds(conn, [b'{"started": true}'], [pidfd])
        os.close(pidfd)
    except OSError:
        os._exit(1)  # the client is gone already
    try:
        code = _run(request["argv"])
    except KeyboardInterrupt:
        _die_of(signal.SIGINT)  # as Python's own end by an uncaught Ctrl-C
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()  # as a fresh process would, exit status 1
        code = 1
    _exit(conn, code)


def _receive(conn: socket.socket) -> tuple[bytes, list[int], int | None, int]:
    """The request: its bytes, the descriptors passed with it, a pidfd of the process that
    sent it (SCM_PIDFD; None on kernels before 6.5) and the message flags."""
    room = socket.CMSG_SPACE((_FDS + 1) * 4) + socket.CMSG_SPACE(4)
    data, ancillary, flags, _ = conn.recvmsg(_MAX_REQUEST + 1, room, socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    sender: int | None = None
    for level, kind, payload in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        numbers = [
            int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True)
            for i in range(0, len(payload) - 3, 4)
        ]
        if kind == socket.SCM_RIGHTS:
            fds += numbers
        elif kind == _SCM_PIDFD and len(numbers) == 1 and sender is None:
            sender = numbers[0]
        else:
            for fd in numbers if kind == _SCM_PIDFD else ():
                os.close(fd)
    return data, fds, sender, flags


def _exit(conn: socket.socket, code: int) -> None:
    """End the child as the interpreter ends a process: wait for its threads, run the exit
    handlers, flush the streams; then the exit code goes to the client."""
    import atexit
    import threading

    with contextlib.suppress(BaseException):
        getattr(threading, "_shutdown", lambda: None)()
    with contextlib.suppress(BaseException):
        getattr(atexit, "_run_exitfuncs", lambda: None)()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    _reply(conn, {"exit": code})
    os._exit(code & 0xFF)


def _check_request(
    data: bytes, fds: list[int], flags: int, peer: peercontext.Peer | None, ident: str
) -> str | None:
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) not in (_FDS, _FDS + 1):
        return "a request is one message with four descriptors (five with a terminal)"
    if peer is None or not peer.same:
        return (
            "the client runs in another context than this server (namespaces, cgroup, limits "
            "or credentials): it runs the command itself"
        )
    try:
        request = json.loads(data.decode("utf-8", "surrogateescape"))
    except ValueError:
        return "the request is not JSON"
    if not isinstance(request, dict) or request.get("identity") != ident:
        return "the request is for another installation"
    argv, env = request.get("argv"), request.get("env")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "argv is not a list of strings"
    if not argv or argv[0] not in SERVED:
        return f"this server runs only {', '.join(sorted(SERVED))}"
    if argv[0] in RUNS_TOOLS and not peer.runs_tools:
        return (
            "the client's confinement cannot be compared in full (a seccomp filter, or a "
            "kernel without SO_PEERPIDFD): it runs tools itself"
        )
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in env.items()
    ):
        return "env is not a map of strings"
    if not isinstance(request.get("umask"), int):
        return "umask is not a number"
    for field in ("ignored", "blocked"):
        numbers = request.get(field, [])
        if not isinstance(numbers, list) or not all(isinstance(n, int) for n in numbers):
            return f"{field} is not a list of signal numbers"
    if not isinstance(request.get("path0", ""), str):
        return "path0 is not a string"
    return None


def _become_client(request: dict[str, Any], fds: list[int]) -> None:
    """Take the client's streams, directory, terminal, environment, umask, signal
    dispositions and arguments."""
    import io
    import time

    from codecoder.runtime.kernel import terminal

    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds[:4]:
        os.close(fd)
    terminal.hand_over(fds[4] if len(fds) > _FDS else None)
    os.umask(request["umask"] & 0o777)
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    _take_signals(set(request.get("ignored", [])), set(request.get("blocked", [])))
    streams = request.get("streams") or [None, None, None]
    for number, (name, mode) in enumerate((("stdin", "rb"), ("stdout", "wb"), ("stderr", "wb"))):
        given = streams[number] if number < len(streams) else None
        encoding, errors = given if isinstance(given, list) and len(given) == 2 else (None, None)
        text = io.TextIOWrapper(
            open(number, mode, closefd=False),  # noqa: SIM115
            encoding=encoding if isinstance(encoding, str) else "utf-8",
            errors=errors if isinstance(errors, str) else "strict",
            line_buffering=number == 2 or os.isatty(number),
            write_through=number == 2,
        )
        setattr(sys, name, text)
    sys.argv = ["codecoder", *request["argv"]]
    if sys.path:
        sys.path[0] = request.get("path0", "")


def _take_signals(ignored: set[int], blocked: set[int]) -> None:
    """The signal dispositions a fresh interpreter would have in the client's place: what the
    client ignores stays ignored, Ctrl-C raises KeyboardInterrupt, the rest is the default."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if sig in ignored:
            handler: Any = signal.SIG_IGN
        elif sig == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, {s for s in blocked if 0 < s < signal.NSIG})


def _run(argv: list[str]) -> int:
    """`runtime.interfaces.cli.main(argv)`, with an exit status as a fresh process would have it."""
    from codecoder.runtime.interfaces.cli import main

    try:
        return main(argv)
    except SystemExit as exit_:
        if exit_.code is None:
            return 0
        if isinstance(exit_.code, int):
            return exit_.code
        print(exit_.code, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(serve(float(sys.argv[1]) if len(sys.argv) > 1 else IDLE))
