"""Faults injected into real processes, for the tests of what survives them (docs/reliability.md).

* `killed_at`: run a program under strace, killed (SIGKILL) as it enters its N-th call of a
  system call (`rename`: between the writes of a multi-file change);
* `small_filesystem`: a tmpfs of a few hundred kilobytes, mounted for the test and unmounted after
  (root only), to fill up;
* `python_program`: the argv that runs a snippet of Python in this interpreter, codecoder
  importable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

__all__ = [
    "fill",
    "killed_at",
    "python_program",
    "require_root",
    "require_strace",
    "small_filesystem",
]


def require_strace() -> str:
    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("CI"):
            pytest.fail("strace is needed for the fault-injection tests (apt-get install strace)")
        pytest.skip("strace is not installed")
    return strace


def require_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("mounting a small tmpfs needs root")
        pytest.skip("mounting a small tmpfs needs root")


def python_program(source: str) -> list[str]:
    return [sys.executable, "-c", source]


def killed_at(
    syscall: str,
    when: int,
    argv: Sequence[str],
    *,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `argv`, killed as any of its processes enters its `when`-th `syscall` (the call is not
    made). Its status is -9 (or 137 through a shell) when it was killed; 0 when it made fewer
    such calls and ended on its own."""
    strace = require_strace()
    command = [
        strace,
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        f"trace={syscall}",
        "-e",
        f"inject={syscall}:signal=KILL:when={when}",
        "--",
        *argv,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=cwd
    )


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (`400k`) mounted at `where` (created) for the block."""
    require_root()
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)], check=True
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path, leave: int = 0) -> None:
    """Fill the filesystem of `directory` up, but for about `leave` bytes."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    with contextlib.suppress(OSError), open(directory / ".filler", "wb") as filler:
        filler.write(b"\0" * max(free - leave, 0))
