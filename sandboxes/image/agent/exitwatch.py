"""Knowing when a command's main process exits, as a descriptor the call's loop can select on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


class ExitWatch:
    """Readable when a child exits: a pidfd, or (where pidfd_open is missing, e.g. gVisor) the
    wake-up pipe of a SIGCHLD handler."""

    def __init__(self) -> None:
        self.pidfd_works = True
        try:
            os.close(os.pidfd_open(os.getpid()))
        except (AttributeError, OSError):
            self.pidfd_works = False
            self._read, write = os.pipe()
            os.set_blocking(self._read, False)
            os.set_blocking(write, False)
            signal.signal(signal.SIGCHLD, lambda *_: None)
            signal.set_wakeup_fd(write)

    def open(self, pid: int) -> int:
        return os.pidfd_open(pid) if self.pidfd_works else self._read

    def exited(self, fd: int, proc: subprocess.Popen[bytes]) -> bool:
        if self.pidfd_works:
            return True
        with contextlib.suppress(BlockingIOError):
            os.read(fd, 4096)
        return proc.poll() is not None

    def close(self, fd: int) -> None:
        if self.pidfd_works:
            os.close(fd)
