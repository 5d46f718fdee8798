"""The limits the kernel enforces on this container and its counters, read from inside.

The host compares the limits with what it asked the engine for (an engine may drop some), and
reads the OOM and pids counters before and after each call, to say whether the call was killed
for memory or hit the process limit.
"""

from __future__ import annotations

import os
from typing import Any

from procfs import read_text

# cgroup v1 and v2 spell the counters differently; the first readable file wins.
OOM_COUNTER_FILES = (
    ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
)
PIDS_COUNTER_FILES = (
    ("/sys/fs/cgroup/pids.events", "max"),
    ("/sys/fs/cgroup/pids/pids.events", "max"),
)
UNLIMITED = 1 << 62


def read_counter(candidates: tuple[tuple[str, str], ...]) -> int | None:
    for path, key in candidates:
        try:
            with open(path) as counters:
                for line in counters:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _limit(text: str | None) -> int | None:
    """A cgroup limit in bytes or units; None when unlimited ("max", -1, huge) or unreadable."""
    if text is None or text in ("max", "-1"):
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value < 0 or value >= UNLIMITED else value


def limits() -> dict[str, Any]:
    """The memory, swap, pids and CPU limits as the kernel enforces them on this container."""
    swap_total = 0
    for line in (read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("SwapTotal:"):
            swap_total = int(line.split()[1]) * 1024
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):  # v2
        memory = _limit(read_text("/sys/fs/cgroup/memory.max"))
        swap = _limit(read_text("/sys/fs/cgroup/memory.swap.max"))
        cpu = (read_text("/sys/fs/cgroup/cpu.max") or "max").split()
        quota, period = _limit(cpu[0]), _limit(cpu[1] if len(cpu) > 1 else None)
        return {
            "cgroup": "v2",
            "memory": memory,
            "memory_swap": memory + swap if memory is not None and swap is not None else None,
            "pids": _limit(read_text("/sys/fs/cgroup/pids.max")),
            "cpus": quota / period if quota and period else None,
            "swap_total": swap_total,
        }
    cpu_dir = next(
        (d for d in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct") if os.path.isdir(d)),
        "/sys/fs/cgroup/cpu",
    )
    quota = _limit(read_text(f"{cpu_dir}/cpu.cfs_quota_us"))
    period = _limit(read_text(f"{cpu_dir}/cpu.cfs_period_us"))
    return {
        "cgroup": "v1",
        "memory": _limit(read_text("/sys/fs/cgroup/memory/memory.limit_in_bytes")),
        "memory_swap": _limit(read_text("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")),
        "pids": _limit(read_text("/sys/fs/cgroup/pids/pids.max")),
        "cpus": quota / period if quota and period else None,
        "swap_total": swap_total,
    }
