"""One request of the decision server, in the child forked for it (`interfaces.forkserver.protocol`
says what the server is for): the child takes the request, checks who sent it and what it asks,
becomes the client's process (its standard streams and terminal, working directory,
environment, umask, signal dispositions, arguments), runs the command as a fresh process
would (`runtime.interfaces.cli.main`) and ends as the interpreter ends a process.

Until the command starts nothing of the client's was read or written, so any problem up to
there is a refusal, and the client runs the command itself; after that, only the exit code
(or the signal the child died of, which the server reports) goes back.

The call ends with its client whatever happens to the server: the server kills a child whose
client hung up, but a server that died (killed, or ended by an upgrade) kills nothing, so the
child watches its client's connection itself (`_end_with_client`) and ends, with everything it
started (bubblewrap dies with its parent), the moment the client is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from typing import Any, Final, NoReturn

from codecoder.interfaces.forkserver import peercontext, protocol

__all__ = ["run"]

_SCM_PIDFD: Final = 4  # Linux 6.5; not named by Python 3.11's socket module


def run(conn: socket.socket, context: str) -> NoReturn:
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
        problem = _check_request(data, fds, flags, peer, protocol.identity(context))
        if problem is None:
            request = json.loads(data.decode("utf-8", "surrogateescape"))
            _become_client(request, fds)
    except BaseException as exc:  # the child never returns into the server loop
        problem = f"the request could not be taken: {exc!r}"
    if problem is not None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        protocol.reply(conn, {"refused": problem})
        os._exit(0)
    conn.settimeout(None)
    try:
        pidfd = os.pidfd_open(os.getpid())
        socket.send_fds(conn, [b'{"started": true}'], [pidfd])
        os.close(pidfd)
    except OSError:
        os._exit(1)  # the client is gone already
    _end_with_client(conn)
    try:
        code = _run(request["argv"])
    except KeyboardInterrupt:
        protocol.die_of(signal.SIGINT)  # as Python's own end by an uncaught Ctrl-C
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()  # as a fresh process would, exit status 1
        code = 1
    _exit(conn, code)


def _end_with_client(conn: socket.socket) -> None:
    """Kill this process, as the server would, once the client's end of `conn` is closed (the
    client ended or was killed): a thread waits for the hang-up."""
    import select
    import threading

    # A descriptor of its own (not inherited: PEP 446), which nothing else closes, so its
    # number is never another file's.
    watched = os.dup(conn.fileno())

    def watch() -> None:
        poller = select.poll()
        poller.register(watched, 0)  # only a hang-up or an error is of interest
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            if any(event & (select.POLLHUP | select.POLLERR) for _, event in events):
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="codecoder-client-watch", daemon=True).start()


def _receive(conn: socket.socket) -> tuple[bytes, list[int], int | None, int]:
    """The request: its bytes, the descriptors passed with it, a pidfd of the process that
    sent it (SCM_PIDFD; None on kernels before 6.5) and the message flags."""
    room = socket.CMSG_SPACE((protocol.DESCRIPTORS + 1) * 4) + socket.CMSG_SPACE(4)
    data, ancillary, flags, _ = conn.recvmsg(
        protocol.MAX_REQUEST + 1, room, socket.MSG_CMSG_CLOEXEC
    )
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


def _exit(conn: socket.socket, code: int) -> NoReturn:
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
    # The client's streams are let go now, not when this copy of the server is torn down (its
    # memory unmapped, a descriptor whose close waits on the kernel): whoever reads the
    # command's output sees its end with the exit code. /dev/null takes their place, for
    # whatever a daemon thread still writes.
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
    protocol.reply(conn, {"exit": code})
    os._exit(code & 0xFF)


def _check_request(
    data: bytes, fds: list[int], flags: int, peer: peercontext.Peer | None, ident: str
) -> str | None:
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) not in (
        protocol.DESCRIPTORS,
        protocol.DESCRIPTORS + 1,
    ):
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
    if not argv or argv[0] not in protocol.SERVED:
        return f"this server runs only {', '.join(sorted(protocol.SERVED))}"
    if argv[0] in protocol.RUNS_TOOLS and not peer.runs_tools:
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

    from codecoder.foundation import terminal

    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds[:4]:
        os.close(fd)
    terminal.hand_over(fds[4] if len(fds) > protocol.DESCRIPTORS else None)
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
    from codecoder.interfaces.cli import main

    try:
        return main(argv)
    except SystemExit as exit_:
        if exit_.code is None:
            return 0
        if isinstance(exit_.code, int):
            return exit_.code
        print(exit_.code, file=sys.stderr)
        return 1
