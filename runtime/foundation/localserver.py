"""A long-lived server of one user's, reached on a private Unix socket: what the decision server
(`interfaces.forkserver`) and the warm pool's server (`environments.docker.pool`) share.

    where    `<directory>/<prefix>-<crc32 of the server's identity>.sock`; the directory is
             0700 and the user's (one that is not is never used), the socket 0600; a path
             longer than an AF_UNIX address may be is reached through the directory's
             descriptor (`/proc/self/fd/N/NAME.sock`)
    who      each side checks the other's uid (SO_PEERCRED): only the same user's processes,
             which could do what the server does themselves, are served
    framing  SOCK_SEQPACKET: one datagram is one message, descriptors travel with it
    one      a server holds `<name>.lock` (flock) while it listens, with its pid in it; a
             second server of the same identity finds the lock taken and exits
    its own  a server whose socket was removed or replaced stops (`Listening.still_ours`)
    started  on demand, by the first client that finds none (`start`): detached (a shell puts
             it in the background, so it is nobody's child to reap), its standard error
             appended to a log beside the socket, waited for until it prints `ready` or not

Each server decides what its identity holds (which code, which engine, which process context)
and what its messages mean. This module imports only the standard library, and no more of it
than a client needs (`subprocess` and `select` only when a server is started): the decision
server's client is a new process on every command, and its start-up is its cost.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import zlib

TYPE_CHECKING = False  # typing itself is not imported: a client's start-up is its cost
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Final

__all__ = [
    "Listening",
    "address",
    "connect",
    "interpreter",
    "peer_uid",
    "private_directory",
    "socket_name",
    "start",
]

_UNIX_PATH_MAX: Final = 100  # bytes of an AF_UNIX path kept well below the kernel's 108


def interpreter() -> str:
    """The interpreter a server runs on, whatever name started it: its environment (a venv's
    prefix) and the file it really is. `.venv/bin/python` and `.venv/bin/python3` (the
    `codecoder` script's) are one interpreter, and their processes share one server."""
    return f"{sys.prefix}:{os.path.realpath(sys.executable)}"


def socket_name(prefix: str, identity: str) -> str:
    """`<prefix>-<crc32 of identity>`: one name per identity, short enough for any directory."""
    return f"{prefix}-{zlib.crc32(identity.encode('utf-8', 'surrogateescape')):08x}"


def address(directory: str, name: str, directory_fd: int) -> str:
    """The socket's address; through the directory's descriptor when the path is longer than
    an AF_UNIX address may be."""
    path = os.path.join(directory, f"{name}.sock")
    if len(os.fsencode(path)) < _UNIX_PATH_MAX:
        return path
    return f"/proc/self/fd/{directory_fd}/{name}.sock"


def private_directory(fd: int) -> bool:
    """A directory only this user can enter and change."""
    info = os.fstat(fd)
    return info.st_uid == os.geteuid() and info.st_mode & 0o077 == 0


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (struct ucred: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def connect(directory: str, name: str) -> socket.socket | None:
    """A connection to the server `name` in `directory`; None when nobody listens there (a
    client may then `start` one). PermissionError when the directory is not private or the
    listener is another user's: nothing is started then either."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if not private_directory(dir_fd):
            raise PermissionError(f"{directory} is not private to this user")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(address(directory, name, dir_fd))
        except OSError:
            sock.close()
            return None
        if peer_uid(sock) != os.geteuid():
            sock.close()
            raise PermissionError(f"the server listening at {name} is another user's")
        return sock
    finally:
        os.close(dir_fd)


class Listening:
    """A server's hold on its name: the directory (by descriptor) and the lock with the
    server's pid (`claim`), then the listening socket (`listen`); `close` gives it all up (the
    socket is removed only while it is still this server's)."""

    def __init__(self, directory: str, name: str, dir_fd: int, lock: int) -> None:
        self.directory = directory
        self.name = name
        self.dir_fd = dir_fd
        self.lock = lock
        self.socket: socket.socket | None = None
        self._inode = -1

    @classmethod
    def claim(cls, directory: str, name: str) -> Listening | None:
        """Hold the name `name` in `directory` (made 0700 if missing); None when another
        server holds it. PermissionError when the directory is not private to this user."""
        import fcntl

        os.makedirs(directory, mode=0o700, exist_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        lock = -1
        try:
            if not private_directory(dir_fd):
                raise PermissionError(f"{directory} is not private to this user")
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            lock = os.open(f"{name}.lock", flags, 0o600, dir_fd=dir_fd)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                os.close(dir_fd)
                return None
            os.ftruncate(lock, 0)
            os.write(lock, f"{os.getpid()}\n".encode())
        except BaseException:
            for fd in (lock, dir_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        return cls(directory, name, dir_fd, lock)

    def listen(self, backlog: int, options: Iterable[tuple[int, int, int]] = ()) -> socket.socket:
        """Bind the name's socket (0600, replacing a dead server's) and listen; `options` are
        set before it listens (ones the kernel does not know are left out)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.name}.sock", dir_fd=self.dir_fd)
            old = os.umask(0o177)
            try:
                sock.bind(address(self.directory, self.name, self.dir_fd))
            finally:
                os.umask(old)
            found = os.stat(f"{self.name}.sock", dir_fd=self.dir_fd, follow_symlinks=False)
            self._inode = found.st_ino
            for level, option, value in options:
                with contextlib.suppress(OSError):
                    sock.setsockopt(level, option, value)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        self.socket = sock
        return sock

    def still_ours(self) -> bool:
        """Whether the socket at our name is still the one this server bound (not removed,
        not replaced by another server's)."""
        try:
            found = os.stat(f"{self.name}.sock", dir_fd=self.dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return found.st_ino == self._inode

    def stop_listening(self) -> None:
        """No more connections: the socket removed if it is still ours (a client then starts
        another server, which waits for the lock) and closed."""
        if self.socket is not None:
            if self.still_ours():
                with contextlib.suppress(OSError):
                    os.unlink(f"{self.name}.sock", dir_fd=self.dir_fd)
            self.socket.close()
            self.socket = None

    def close(self) -> None:
        """Stop listening and release the name."""
        self.stop_listening()
        for fd in (self.lock, self.dir_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def start(
    module: str,
    directory: str,
    log_name: str,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: str = "/",
    ready_wait: float | None = None,
) -> bool:
    """Start `python -m module` in the background, detached (a session of its own, nobody's
    child), its standard error appended to `<directory>/<log_name>`. With `ready_wait`, wait
    up to that many seconds for it to print `ready` (False when it did not); without, do not
    wait at all."""
    import subprocess

    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        log = os.open(os.path.join(directory, log_name), flags, 0o600)
    except OSError:
        return False
    try:
        # The shell starts the server in the background and exits at once: the server is
        # reparented to init, and no process of the client's is left to reap it.
        shell = subprocess.Popen(
            ["/bin/sh", "-c", '"$0" -m "$1" &', sys.executable, module],
            cwd=cwd,
            env=dict(environ) if environ is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if ready_wait is not None else subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    except (OSError, ValueError):
        return False
    finally:
        os.close(log)
    with contextlib.suppress(subprocess.TimeoutExpired):
        shell.wait(timeout=10)
    if ready_wait is None:
        return True
    import select

    assert shell.stdout is not None
    with shell.stdout:
        ready, _, _ = select.select([shell.stdout], [], [], ready_wait)
        return bool(ready) and shell.stdout.readline() == b"ready\n"
