"""Finding and freeing the threads of this process blocked on a FIFO inside a call's preopened
directories: the epoch cannot stop a module inside a host call, so `epoch.EpochTicker` frees
the calls stuck there past their deadline (its docstring says how and why).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import stat
from pathlib import Path

__all__ = ["blocked_fifos", "release"]

log = logging.getLogger(__name__)


# Syscalls a thread can block in on a FIFO, by machine: (the opens, with the index of their
# path argument), (the reads and writes, whose first argument is the descriptor).
_BLOCKING_SYSCALLS: dict[str, tuple[dict[int, int], frozenset[int]]] = {
    "x86_64": ({2: 0, 257: 1, 437: 1}, frozenset({0, 1, 17, 18, 19, 20, 295, 296})),
    "aarch64": ({56: 1, 437: 1}, frozenset({63, 64, 65, 66, 67, 68, 69, 70})),
}
_AT_FDCWD = -100


def blocked_fifos(hosts: list[Path]) -> set[str]:
    """FIFOs under `hosts` that a thread of this process is blocked on now."""
    table = _BLOCKING_SYSCALLS.get(platform.machine())
    if table is None:
        return set()
    opens, transfers = table
    roots = [os.path.realpath(host) for host in hosts]
    found: set[str] = set()
    tasks: list[str] = []
    with contextlib.suppress(OSError):
        tasks = os.listdir("/proc/self/task")
    for task in tasks:
        try:
            fields = Path(f"/proc/self/task/{task}/syscall").read_text().split()
        except OSError:
            continue
        if not fields or not fields[0].isdigit():
            continue  # running, or not in a syscall
        number, args = int(fields[0]), [int(a, 16) for a in fields[1:7]]
        try:
            if number in opens:
                path = _string_at(args[opens[number]])
                if not path.startswith("/"):
                    dirfd = args[0] - (1 << 64) if args[0] >= 1 << 63 else args[0]
                    base = (
                        os.getcwd()
                        if number == 2 or dirfd == _AT_FDCWD
                        else os.readlink(f"/proc/self/fd/{dirfd}")
                    )
                    path = os.path.join(base, path)
            elif number in transfers:
                path = os.readlink(f"/proc/self/fd/{args[0]}")
            else:
                continue
            real = os.path.realpath(path)
            if stat.S_ISFIFO(os.stat(real).st_mode) and any(
                real.startswith(root + os.sep) for root in roots
            ):
                found.add(real)
        except (OSError, ValueError, IndexError):
            continue
    return found


def _string_at(address: int) -> str:
    with open("/proc/self/mem", "rb", buffering=0) as memory:
        memory.seek(address)
        return memory.read(4096).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def release(fifo: str) -> None:
    """End every wait on `fifo`: an opener gets its other end, a reader a byte, a writer room."""
    try:
        descriptor = os.open(fifo, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            for _ in range(64):
                if not os.read(descriptor, 1 << 16):
                    break
        with contextlib.suppress(OSError):
            os.write(descriptor, b"\0")
    finally:
        os.close(descriptor)
    log.warning("freed a @wasm call blocked past its deadline on the FIFO %s", fifo)
