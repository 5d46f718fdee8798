"""The decision server's process (`interfaces.forkserver.protocol` says what it is for and how
client and server speak): it listens on the user's private socket, gives every request to a
child of its own (`interfaces.forkserver.child` becomes the client's process there; one is
forked ahead of the next request), tells each client how its child ended, kills a child whose
client went away, and exits when idle, when its socket is removed or replaced, or when the
code it runs changed on disk.

It imports the runtime once (`_warm_up`), freezes what it imported out of the garbage
collector's reach (so children do not copy the pages a collection would touch), and never
evaluates or runs anything itself, so no state of one request reaches another. It is
single-threaded, so that every child is a clean copy of it. Started by the first client that
finds none: `python -m codecoder.interfaces.forkserver.server [IDLE SECONDS]`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
from typing import Any, Final

from codecoder.foundation import localserver
from codecoder.interfaces.forkserver import child, codewatch, peercontext, protocol

__all__ = ["serve"]

_TICK: Final = 5.0  # how often an idle server checks that its socket is still its own
_SO_PASSPIDFD: Final = 76  # Linux 6.5; not named by Python 3.11's socket module


def serve(idle: float = protocol.IDLE) -> int:
    """Listen for requests until idle for `idle` seconds; returns the exit status."""
    import select
    import time

    context = peercontext.fingerprint()
    ident = protocol.identity(context)
    _warm_up()
    code = codewatch.CodeWatch(_package_folders())
    gc.freeze()  # what the server holds now stays; a child's collections leave it untouched
    directory = protocol.socket_directory()
    # Every request carries a pidfd of the process that sent it: a message sent before its
    # connection was accepted, because the kernel adds one when no socket receives it yet, one
    # sent after, because accepted sockets inherit this option.
    try:
        listening = localserver.Listening.claim(directory, protocol.socket_name(ident))
    except PermissionError:
        print(f"codecoder decision server: {directory} is not private", file=sys.stderr)
        return 1
    if listening is None:
        return 0  # another server of this installation is already listening
    listener = listening.listen(64, [(socket.SOL_SOCKET, _SO_PASSPIDFD, 1)])
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
    inherited = (
        listening.lock,
        listening.dir_fd,
        wake_read,
        wake_write,
        devnull,
        code.fd or -1,
    )
    children = _Children(listener, context, inherited, poller)
    last = time.monotonic()
    try:
        while True:
            if stopping or not listening.still_ours():
                children.no_spare()
                if not children.running:
                    return 0
                with contextlib.suppress(KeyError):
                    poller.unregister(listener)  # no new requests; the running ones end
            elif not children.running and time.monotonic() - last > idle:
                return 0
            else:
                children.keep_a_spare()
            events = poller.poll(min(_TICK, idle) * 1000)
            # Hang-ups first: a connection closed below may free its number for one accepted
            # below, whose child must not be taken for the one whose client went away.
            for fd, _ in sorted(events, key=lambda event: not children.watches(event[0])):
                if children.watches(fd):
                    children.client_gone(fd)
                elif fd == wake_read:
                    with contextlib.suppress(OSError):
                        os.read(wake_read, 512)
                    children.reap()
                elif fd == code.fd:
                    if code.changed():
                        stopping = True
                        poller.unregister(fd)
                elif fd == listener.fileno():
                    last = time.monotonic()
                    if not _accept(listener, code, children):
                        stopping = True  # the code changed: no more requests
            children.reap()
    finally:
        children.no_spare()
        listening.close()
        code.close()


def _accept(listener: socket.socket, code: codewatch.CodeWatch, children: _Children) -> bool:
    """Take every waiting connection and give each to a child; False when the installed code
    changed (the server then takes no more requests)."""
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return True
        if localserver.peer_uid(conn) != os.geteuid():
            conn.close()
            continue
        if code.changed():
            _refuse(conn, "the installed code changed; start a new server")
            conn.close()
            return False
        conn.setblocking(True)
        children.give(conn)


class _Children:
    """The server's children: those running a request, each with its client's connection
    (whose hang-up kills it, and to which its end is reported), and one forked ahead of the
    next request (the spare), so that forking, the bulk of a request's start, happens between
    requests. A spare is a copy of the server as it is between requests, the same as one forked
    when the request arrives; it waits on a socket pair for the connection it is given."""

    def __init__(
        self, listener: socket.socket, context: str, inherited: tuple[int, ...], poller: Any
    ) -> None:
        self.running: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self._watched: dict[int, int] = {}  # connection fd -> child pid
        self._spare: tuple[int, socket.socket] | None = None
        self._listener = listener
        self._context = context
        self._inherited = inherited
        self._poller = poller

    def watches(self, fd: int) -> bool:
        return fd in self._watched

    def give(self, conn: socket.socket) -> None:
        """Run the request on `conn` in the spare, or in a child forked for it."""
        spare, self._spare = self._spare, None
        pid = None
        if spare is not None:
            pid, handle = spare
            try:
                socket.send_fds(handle, [b"."], [conn.fileno()])
            except OSError:
                pid = None  # it died meanwhile; reap() collects it
            handle.close()
        if pid is None:
            pid = self._fork(conn)
        self.running[pid] = conn
        self._watched[conn.fileno()] = pid
        self._poller.register(conn, 0)  # only its hang-up is of interest

    def keep_a_spare(self) -> None:
        if self._spare is None:
            handle, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            pid = self._fork(None, theirs, handle)
            theirs.close()
            self._spare = (pid, handle)

    def no_spare(self) -> None:
        """End the spare (it reads the end of its socket pair and exits)."""
        if self._spare is not None:
            self._spare[1].close()
            self._spare = None

    def client_gone(self, fd: int) -> None:
        """The client is gone (killed, or its host closed it): so is its command, as it would
        be in the client's own process."""
        self._poller.unregister(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._watched.pop(fd), signal.SIGKILL)

    def reap(self) -> None:
        """Tell the clients of children that ended how they ended (the child said so itself
        when it could; this covers a child that died of a signal)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self._spare is not None and self._spare[0] == pid:
                self._spare[1].close()
                self._spare = None
            conn = self.running.pop(pid, None)
            if conn is None:
                continue
            if self._watched.get(conn.fileno()) == pid:
                del self._watched[conn.fileno()]
                with contextlib.suppress(KeyError):
                    self._poller.unregister(conn)
            if os.WIFSIGNALED(status):
                protocol.reply(conn, {"signal": os.WTERMSIG(status)})
            else:
                protocol.reply(conn, {"exit": os.waitstatus_to_exitcode(status)})
            conn.close()

    def _fork(
        self,
        conn: socket.socket | None,
        waiting: socket.socket | None = None,
        handle: socket.socket | None = None,
    ) -> int:
        """A child that runs the request on `conn`, or (a spare) on the connection it is
        given on `waiting`."""
        pid = os.fork()
        if pid != 0:
            return pid
        # The child keeps nothing of the server's but what its request needs.
        self._listener.close()
        for other in self.running.values():
            other.close()
        for fd in self._inherited:
            if fd >= 0:
                os.close(fd)
        if self._spare is not None:
            self._spare[1].close()
        if handle is not None:
            handle.close()
        if conn is None:
            assert waiting is not None
            try:
                _, fds, _, _ = socket.recv_fds(waiting, 16, 1)
            except BaseException:
                os._exit(0)
            if len(fds) != 1:
                os._exit(0)  # the server ended, or wants no spare any more
            waiting.close()
            conn = socket.socket(fileno=fds[0])
            conn.setblocking(True)
        child.run(conn, self._context)  # never returns


def _warm_up() -> None:
    """Import what the served commands use (lazily, in a fresh process): importing is all the
    server does before it forks; no call is evaluated here, so no cache holds an answer, and
    no thread is started (a forked child has only the thread that forked)."""
    import bashlex  # noqa: F401  (builds its parser tables on import: ~0.1 s)
    import pydantic.type_adapter  # noqa: F401

    import codecoder.config.discovery
    import codecoder.environments.docker.environment
    import codecoder.environments.docker.image
    import codecoder.environments.docker.pool.client
    import codecoder.environments.landlock
    import codecoder.evaluation
    import codecoder.interfaces.hooks
    import codecoder.interfaces.livegrants
    import codecoder.interfaces.liveview  # compiles its patterns on import: ~5 ms
    import codecoder.session  # noqa: F401
    from codecoder.foundation.display import renders_blank
    from codecoder.interfaces import cli

    cli._parser()  # the grammar only: it reads no configuration
    renders_blank("\u00e9")  # maps the Unicode database a child would fault in: ~2 ms
    # What contains commands here (bubblewrap tried once): a fact of the machine, not an answer.
    from codecoder.environments.bwrap.probe import command_sandbox

    command_sandbox()


def _package_folders() -> list[str]:
    """The folders of codecoder's packages, whose modules a command may import after the server
    started: a change to any of them is an upgrade too."""
    import codecoder
    import codecoder.environments
    import codecoder.sandboxes

    return [
        *codecoder.__path__,
        *codecoder.environments.__path__,
        *codecoder.sandboxes.__path__,
    ]


def _refuse(conn: socket.socket, problem: str) -> None:
    """Refuse a request without running it. The request is taken first (its descriptors
    closed): closing a Unix socket with unread data resets it, and the client would read that
    as a call that was accepted and ended without an answer, instead of running it itself."""
    with contextlib.suppress(OSError):
        conn.settimeout(2.0)
        _, fds, _, _ = socket.recv_fds(conn, protocol.MAX_REQUEST + 1, protocol.DESCRIPTORS + 1)
        for fd in fds:
            os.close(fd)
    protocol.reply(conn, {"refused": problem})


if __name__ == "__main__":
    sys.exit(serve(float(sys.argv[1]) if len(sys.argv) > 1 else protocol.IDLE))
