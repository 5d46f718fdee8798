"""What a @wasm call may take: the defaults of each limit, the ceilings of its store, and the
disk budget of a call with writable preopens.

Each call gets a fresh `Store` and everything it can take is bounded: fuel (instructions,
roughly), time, memory (one limiter over the whole store, one linear memory, at most
`MAX_TABLES` tables whose elements take at most an eighth of the memory limit more, one
instance), output, the module's size and, for a call with writable preopens, the growth of
their filesystems (`DiskBudget`). What a module that exhausts one of them gets is in `traps`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = [
    "DEFAULT_DISK_BUDGET",
    "DEFAULT_FUEL",
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT",
    "MAX_MODULE_BYTES",
    "MAX_TABLES",
    "WASM_PAGE",
    "DiskBudget",
    "table_elements",
]

DEFAULT_FUEL = 2_000_000_000
DEFAULT_DISK_BUDGET = 1024**3
MAX_MODULE_BYTES = 64 * 1024 * 1024
MAX_TABLES = 4
DEFAULT_TIMEOUT = 30.0
DEFAULT_MEMORY_LIMIT = 256 * 1024 * 1024
DEFAULT_MAX_OUTPUT = 1024 * 1024
WASM_PAGE = 64 * 1024


def table_elements(memory_limit: int) -> int:
    """Elements allowed per table: all MAX_TABLES full take an eighth of the memory limit."""
    return max(10_000, memory_limit // 8 // 8 // MAX_TABLES)


class DiskBudget:
    """How much a writable call may grow the filesystems of its writable preopens.

    Measured as the growth of each filesystem's used space (statvfs), which catches every way
    of writing (files, fallocate, directories) at the cost of counting what other processes
    write there at the same time. For a module the runtime did not write, what it wrote also
    counts at apparent size when it ends (`environments.apparent`: holes and more names of one
    file occupy nothing, and a copy of them costs their size).
    """

    def __init__(self, hosts: list[Path], limit: int) -> None:
        self.limit = limit
        self._devices: dict[int, str] = {}
        for host in hosts:
            with contextlib.suppress(OSError):
                self._devices.setdefault(os.stat(host).st_dev, os.fspath(host))
        self._before = self._used()

    def _used(self) -> int:
        used = 0
        for path in self._devices.values():
            with contextlib.suppress(OSError):
                st = os.statvfs(path)
                used += (st.f_blocks - st.f_bfree) * st.f_frsize
        return used

    def grown(self) -> int:
        return self._used() - self._before

    def spent(self) -> bool:
        return self.grown() > self.limit
