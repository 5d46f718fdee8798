"""Scratch space (foundation.scratch): beneath a directory of the process that made it, in the
state directory; gone at exit, and swept by the next process when the one that made it was
killed. The runs of the main paths leaving /tmp as they found it are tests/test_litter.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from codecoder.foundation.scratch import scratch_directory, scratch_root, sweep_scratch
from codecoder.foundation.state import state_directory

MAKE = (
    "import os, signal, sys; from codecoder.foundation.scratch import scratch_directory; "
    "made = scratch_directory('codecoder-test-'); print(made, flush=True)\n"
    "{then}"
)


def _process(then: str) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-c", MAKE.format(then=then)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    made = Path(proc.stdout.readline().strip())
    return proc, made


def test_a_scratch_directory_is_private_and_beneath_the_process_directory_in_the_state() -> None:
    made = scratch_directory("codecoder-x-")
    root = scratch_root()
    assert made.parent == root
    assert root.parent == state_directory() / "scratch"
    assert root.name.startswith(f"{os.getpid()}-")
    assert root.name.endswith(f"-{socket.gethostname()}")
    assert (made.stat().st_mode & 0o777, root.stat().st_mode & 0o777) == (0o700, 0o700)


def test_a_process_that_exits_takes_its_scratch_with_it() -> None:
    proc, made = _process("sys.exit(0)")
    assert proc.wait() == 0
    assert not made.exists() and not made.parent.exists()


def test_what_a_killed_process_left_goes_when_the_next_one_starts() -> None:
    killed, left = _process("os.kill(os.getpid(), signal.SIGKILL)")
    assert killed.wait() == -signal.SIGKILL
    assert left.is_dir()  # nothing of it ran after the kill
    living, kept = _process("sys.stdin.read()")
    try:
        assert not left.parent.exists()
        assert sweep_scratch() == []  # the living process's directory is its own
        assert kept.is_dir()
    finally:
        living.kill()
        living.wait()


def test_another_hosts_directory_and_names_not_ours_are_left_alone() -> None:
    root = scratch_root().parent
    others = [root / "1-1-another-host", root / "not-a-process"]
    for other in others:
        other.mkdir()
    assert sweep_scratch() == []
    assert all(other.is_dir() for other in others)


def test_a_forked_child_leaves_its_parents_scratch_alone() -> None:
    proc, _ = _process(
        "pid = os.fork()\n"
        "if pid == 0: sys.exit(0)\n"
        "os.waitpid(pid, 0); print(os.path.isdir(made), flush=True); sys.stdin.read()"
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "True"
    finally:
        proc.kill()
        proc.wait()
