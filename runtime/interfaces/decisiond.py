"""The decision server: `codecoder decide` and `codecoder hook` without the start-up cost.

A hook is a new process on every tool call of its host, and a new codecoder process spends
about half a second importing the runtime (pydantic, bashlex, the tool catalogue) before its
first decision. The decision server is a process that has imported it once. It is a fork
server: for every request it forks a child, and the child runs `runtime.interfaces.cli.main` on the
client's arguments with the client's standard streams (passed over the socket), working
directory, environment and umask, then reports the exit code. The server itself never
evaluates anything and keeps no state between requests, so every answer is the one a fresh
process would give: codecoder.json, the user's file, trust records, capabilities, PATH and
the hook sessions' grants are read by the child, as they are at that moment.

    client (`python -m runtime` / `codecoder`)         server (`python -m
    runtime.interfaces.decisiond`) connect, check the server's uid           ───▶     accept, check
    the client's uid {argv, env, cwd, umask} + fds 0,1,2,cwd   ───▶     fork: the child reads it,
    checks it,
                                                        runs `decide`/`hook`, writes to fd 1
    exit with the child's code                ◀───     {"exit": code}

Who can talk to it. The socket is in `<state dir>/daemon/` (mode 0700, owned by the user; a
directory that is not is never used), the socket is 0600, and each side checks the other's
uid with SO_PEERCRED: only the same user's processes, which could run codecoder themselves,
can ask. What they can make it do is what `decide` and `hook` do: evaluate a call and record
a hook session's grant after its host ran an approved call. Any other command is refused: the
server never runs a tool. A server whose code changed on disk since it started (an upgrade)
refuses, and exits.

Failing closed. When the server cannot be reached, refuses, or its directory is not private,
the client returns None and the caller evaluates in-process (`runtime.__main__`). Once a
request was accepted the child owns the streams; if it ends without an exit code, the client
reports that and exits 2, which both hosts read as "blocked", and `decide` as an error.

The server is started on demand by the first client that finds none (that client waits for it
to be ready), one per user, state directory and installation (the socket's name is a digest of
the interpreter and the package's location), and exits after `IDLE` seconds without a request
or when its socket is removed. `CODECODER_DAEMON=0` turns it off: every call is in-process.

This module's top level imports only the standard library pieces the client needs; the
server's imports are made in `serve`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import zlib

TYPE_CHECKING = False  # typing itself is not imported: the client's start-up is its cost
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["COMMANDS", "IDLE", "answer", "serve", "socket_directory"]

COMMANDS: Final = frozenset({"decide", "hook"})  # what the server runs; nothing else
IDLE: Final = 900.0  # seconds without a request after which the server exits
_TICK: Final = 5.0  # how often an idle server checks that its socket is still its own
_READY_WAIT: Final = 20.0  # seconds a client waits for the server it started
_MAX_REQUEST: Final = 4 << 20  # bytes: argv and environment of one request
_FDS: Final = 4  # stdin, stdout, stderr, working directory
_OFF: Final = frozenset({"0", "off", "no", "false"})
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


def identity() -> str:
    """Which code a server runs: the interpreter, the package's location, PYTHONPATH and the
    user. A client is served only by a server of the same identity."""
    python_path = os.environ.get("PYTHONPATH", "")
    return f"{sys.executable}\n{_PACKAGE_ROOT}\n{python_path}\n{os.geteuid()}"


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
    """Run `codecoder ARGV` (`decide` or `hook`) in the decision server; its exit code, or None
    when the server cannot answer (the caller then runs it in-process: nothing was read from
    stdin, nothing written)."""
    if not argv or argv[0] not in COMMANDS:
        return None
    if os.environ.get("CODECODER_DAEMON", "").strip().lower() in _OFF:
        return None
    ident = identity()
    name = _socket_name(ident)
    directory = socket_directory()
    try:
        sock = _connect(directory, name, ident)
    except (OSError, ValueError):
        return None
    if sock is None:
        return None
    with sock:
        try:
            if not _send_request(sock, ident, argv):
                return None
        except OSError:
            return None  # nothing was accepted: the streams are untouched
        try:
            reply = sock.recv(65536)
        except OSError:
            reply = b""
        except KeyboardInterrupt:
            print("codecoder: interrupted", file=sys.stderr)
            return 130
    try:
        message = json.loads(reply) if reply else {}
    except ValueError:
        message = {}
    if "refused" in message:
        return None
    code = message.get("exit")
    if isinstance(code, int):
        return code
    # Accepted, then no answer: what ran may have written already, so it is not run again.
    print(
        "codecoder: the decision server ended without an answer; the call is not allowed",
        file=sys.stderr,
    )
    return 2


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


def _send_request(sock: socket.socket, ident: str, argv: list[str]) -> bool:
    old = os.umask(0o077)
    os.umask(old)
    streams = [sys.stdin, sys.stdout, sys.stderr]
    header = {
        "identity": ident,
        "argv": argv,
        "env": dict(os.environ),
        "umask": old,
        "streams": [
            [getattr(s, "encoding", None), getattr(s, "errors", None)] if s else None
            for s in streams
        ],
    }
    data = json.dumps(header, ensure_ascii=False).encode("utf-8", "surrogateescape")
    if len(data) > _MAX_REQUEST:
        return False
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        socket.send_fds(sock, [data], [0, 1, 2, cwd])
    finally:
        os.close(cwd)
    return True


# --- the server ------------------------------------------------------------------------------


def serve(idle: float = IDLE) -> int:
    """Listen for requests until idle for `idle` seconds; returns the exit status."""
    import fcntl
    import signal
    import time

    ident = identity()
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
    listener.listen(64)
    listener.settimeout(min(_TICK, idle))

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.write(1, b"ready\n")
    os.dup2(devnull, 1)
    os.dup2(devnull, 0)
    last = time.monotonic()
    try:
        while True:
            _reap()
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if time.monotonic() - last > idle or not _still_ours(dir_fd, name, bound):
                    return 0
                continue
            last = time.monotonic()
            with conn:
                if _peer_uid(conn) != os.geteuid():
                    continue
                if _code_snapshot() != snapshot:
                    _refuse(conn, "the installed code changed; start a new server")
                    return 0
                if os.fork() == 0:
                    listener.close()
                    os.close(lock)
                    os.close(dir_fd)
                    _child(conn)  # never returns
    finally:
        if _still_ours(dir_fd, name, bound):
            os.unlink(f"{name}.sock", dir_fd=dir_fd)
        listener.close()
        os.close(lock)


def _warm_up() -> None:
    """Import what `decide` and `hook` use (lazily, in a fresh process): importing is all the
    server does before it forks; no call is evaluated here, so no cache holds an answer."""
    import bashlex  # noqa: F401  (builds its parser tables on import: ~0.1 s)

    import codecoder.environments.landlock
    import codecoder.runtime.evaluation
    import codecoder.runtime.interfaces.hooks
    import codecoder.runtime.session  # noqa: F401
    from codecoder.runtime.interfaces import cli

    cli._parser()  # the grammar only: it reads no configuration
    # What contains commands here (bubblewrap tried once): a fact of the machine, not an answer.
    from codecoder.environments.bwrap.probe import command_sandbox

    command_sandbox()


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


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _refuse(conn: socket.socket, problem: str) -> None:
    """Refuse a request without running it. The request is taken first (its descriptors
    closed): closing a Unix socket with unread data resets it, and the client would read that
    as a call that was accepted and ended without an answer, instead of running it itself."""
    with contextlib.suppress(OSError):
        conn.settimeout(2.0)
        _, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST + 1, _FDS)
        for fd in fds:
            os.close(fd)
    _reply(conn, {"refused": problem})


def _reply(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.send(json.dumps(message).encode())


def _child(conn: socket.socket) -> None:
    """One request, in a forked child: become the client's process, run `main`, report.

    Until `main` starts nothing of the client's was read or written, so any problem up to
    there is a refusal (the client runs the command itself); after that, the exit code."""
    try:
        conn.settimeout(10.0)
        data, fds, flags, _ = socket.recv_fds(conn, _MAX_REQUEST + 1, _FDS)
        problem = _check_request(data, fds, flags)
        if problem is None:
            request = json.loads(data.decode("utf-8", "surrogateescape"))
            _become_client(request, fds)
    except BaseException as exc:  # the child never returns into the server loop
        problem = f"the request could not be taken: {exc!r}"
    if problem is not None:
        _reply(conn, {"refused": problem})
        os._exit(0)
    try:
        code = _run(request["argv"])
    except BaseException:
        import traceback

        traceback.print_exc()  # as a fresh process would, exit status 1
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    _reply(conn, {"exit": code})
    os._exit(0)


def _check_request(data: bytes, fds: list[int], flags: int) -> str | None:
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != _FDS:
        return "a request is one message with four descriptors"
    try:
        request = json.loads(data.decode("utf-8", "surrogateescape"))
    except ValueError:
        return "the request is not JSON"
    if not isinstance(request, dict) or request.get("identity") != identity():
        return "the request is for another installation"
    argv, env = request.get("argv"), request.get("env")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "argv is not a list of strings"
    if not argv or argv[0] not in COMMANDS:
        return "this server only decides (decide, hook); it runs nothing"
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in env.items()
    ):
        return "env is not a map of strings"
    if not isinstance(request.get("umask"), int):
        return "umask is not a number"
    return None


def _become_client(request: dict[str, Any], fds: list[int]) -> None:
    """Take the client's streams, directory, environment, umask and arguments."""
    import io
    import signal

    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    os.umask(request["umask"] & 0o777)
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
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
