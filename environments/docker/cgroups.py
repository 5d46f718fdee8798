"""The limits the kernel enforces on a container, read on the host from its cgroup.

The agent checks its limits from inside the container (sandboxes/image/agent/cgroups.py); under
gVisor (runsc) the inside is gVisor's own kernel, whose cgroup files show no limit at all, while
the host kernel enforces them on the whole sandbox. There the runtime reads them here instead,
from the cgroup of the container's first process (the engine's `State.Pid`), which is only
possible when that process runs on this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

__all__ = ["host_limits"]

ROOT: Final = Path("/sys/fs/cgroup")
UNLIMITED: Final = 1 << 62


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _limit(text: str | None) -> int | None:
    """A limit in bytes or units; None when unlimited ("max", -1, huge) or unreadable."""
    if text is None or text in ("max", "-1"):
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value < 0 or value >= UNLIMITED else value


def _swap_total() -> int:
    for line in (_read(Path("/proc/meminfo")) or "").splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def host_limits(pid: int) -> dict[str, Any] | None:
    """The memory, swap, pids and CPU limits of `pid`'s cgroup, in the shape the agent reports
    them; None when the process is not visible here."""
    text = _read(Path(f"/proc/{pid}/cgroup"))
    if not text:
        return None
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if not controllers:
            v2 = path
        for controller in controllers.split(","):
            v1[controller] = path
    if "memory" in v1:
        cpu = next(
            (
                ROOT / name / v1["cpu"].lstrip("/")
                for name in ("cpu", "cpu,cpuacct")
                if "cpu" in v1 and (ROOT / name / v1["cpu"].lstrip("/")).is_dir()
            ),
            None,
        )
        quota = _limit(_read(cpu / "cpu.cfs_quota_us")) if cpu else None
        period = _limit(_read(cpu / "cpu.cfs_period_us")) if cpu else None
        memory = ROOT / "memory" / v1["memory"].lstrip("/")
        pids = ROOT / "pids" / v1.get("pids", "/").lstrip("/")
        return {
            "cgroup": "v1",
            "memory": _limit(_read(memory / "memory.limit_in_bytes")),
            "memory_swap": _limit(_read(memory / "memory.memsw.limit_in_bytes")),
            "pids": _limit(_read(pids / "pids.max")) if "pids" in v1 else None,
            "cpus": quota / period if quota and period else None,
            "swap_total": _swap_total(),
        }
    if v2 is None:
        return None
    group = ROOT / v2.lstrip("/")
    memory_max = _limit(_read(group / "memory.max"))
    swap_max = _limit(_read(group / "memory.swap.max"))
    cpu_max = (_read(group / "cpu.max") or "max").split()
    quota = _limit(cpu_max[0])
    period = _limit(cpu_max[1] if len(cpu_max) > 1 else None)
    return {
        "cgroup": "v2",
        "memory": memory_max,
        "memory_swap": memory_max + swap_max
        if memory_max is not None and swap_max is not None
        else None,
        "pids": _limit(_read(group / "pids.max")),
        "cpus": quota / period if quota and period else None,
        "swap_total": _swap_total(),
    }
