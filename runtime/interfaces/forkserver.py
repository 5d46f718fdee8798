"""The decision server's process (`runtime.interfaces.decisiond` says what it is for and how
client and server speak): it listens on the user's private socket, forks a child for every
request (`runtime.interfaces.forkchild` becomes the client's process there), tells each client
how its child ended, kills a child whose client went away, and exits when idle, when its
socket is removed or replaced, or when the code it runs changed on disk.

It imports the runtime once (`_warm_up`) and never evaluates or runs anything itself, so no
state of one request reaches another. It is single-threaded, so that every child is a clean
copy of it. Started by the first client that finds none: `python -m
codecoder.runtime.interfaces.forkserver [IDLE SECONDS]`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from typing import Any, Final

from codecoder.runtime.interfaces import codewatch, decisiond, forkchild, peercontext

__all__ = ["serve"]

_TICK: Final = 5.0  # how often an idle server checks that its socket is still its own
_SO_PASSPIDFD: Final = 76  # Linux 6.5; not named by Python 3.11's socket module


def serve(idle: float = decisiond.IDLE) -> int:
    """Listen for requests until idle for `idle` seconds; returns the exit status."""
    import fcntl
    import select
    import time

    context = peercontext.fingerprint()
    ident = decisiond.identity(context)
    _warm_up()
    code = codewatch.CodeWatch(_package_folders())
    directory = decisiond.socket_directory()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if not decisiond.private_directory(dir_fd):
        print(f"codecoder decisiond: {directory} is not private to this user", file=sys.stderr)
        return 1
    name = decisiond.socket_name(ident)
    lock = os.open(f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another server of this installation is already listening
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())
    address = decisiond.address(directory, name, dir_fd)
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
    if code.fd is not None:
        poller.register(code.fd, select.POLLIN)  # an upgrade ends an idle server at once
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
                elif fd == code.fd:
                    if code.changed():
                        stopping = True
                        poller.unregister(fd)
                elif fd == listener.fileno():
                    last = time.monotonic()
                    inherited = (lock, dir_fd, wake_read, wake_write, devnull, code.fd or -1)
                    if not _accept(listener, code, context, running, inherited):
                        stopping = True  # the code changed: no more requests
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
        code.close()


def _accept(
    listener: socket.socket,
    code: codewatch.CodeWatch,
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
        if decisiond.peer_uid(conn) != os.geteuid():
            conn.close()
            continue
        if code.changed():
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
                if fd >= 0:
                    os.close(fd)
            forkchild.run(conn, context)  # never returns
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
            decisiond.reply(conn, {"signal": os.WTERMSIG(status)})
        else:
            decisiond.reply(conn, {"exit": os.waitstatus_to_exitcode(status)})
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


def _package_folders() -> list[str]:
    """The folders of codecoder's packages, whose modules a command may import after the server
    started: a change to any of them is an upgrade too."""
    import codecoder.environments
    import codecoder.runtime
    import codecoder.sandboxes

    return [
        *codecoder.runtime.__path__,
        *codecoder.environments.__path__,
        *codecoder.sandboxes.__path__,
    ]


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
        _, fds, _, _ = socket.recv_fds(conn, decisiond.MAX_REQUEST + 1, decisiond.DESCRIPTORS + 1)
        for fd in fds:
            os.close(fd)
    decisiond.reply(conn, {"refused": problem})


if __name__ == "__main__":
    sys.exit(serve(float(sys.argv[1]) if len(sys.argv) > 1 else decisiond.IDLE))
