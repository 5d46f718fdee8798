"""Ctrl-C and SIGTERM reach the main thread whichever thread the kernel hands them to
(`runtime.interfaces.interruption`): Linux may deliver a signal sent to the process to any
thread that does not block it, and Python runs handlers only in the main thread. Each test
sends the signal to a helper thread alone (tgkill), the case the kernel may pick at random."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pexpect
import pytest

from tests.runtime.interfaces.test_interactive import run, start

_TGKILL = {"x86_64": 234, "aarch64": 131}[platform.machine()]


def tgkill(pid: int, tid: int, number: int) -> None:
    """Send `number` to thread `tid` of process `pid` only."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_TGKILL, pid, tid, number) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def helper_threads(pid: int) -> list[int]:
    """The threads of `pid` besides the main one that a signal can be handed to (not blocking
    every signal, as the relay does)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        blocked = next(line for line in status.splitlines() if line.startswith("SigBlk:"))
        if int(task.name) != pid and int(blocked.split()[1], 16) & (1 << (signal.SIGTERM - 1)) == 0:
            found.append(int(task.name))
    return found


BLOCKED_MAIN = textwrap.dedent(
    """
    import os, sys, threading, time
    from codecoder.interfaces.interruption import Terminated, interruptible
    started = threading.Event()
    def helper():
        started.set()
        time.sleep(120)
    threading.Thread(target=helper, daemon=True).start()
    started.wait()
    read_end, _ = os.pipe()
    try:
        with interruptible():
            print("waiting", flush=True)
            os.read(read_end, 1)  # nothing ever comes
    except Terminated:
        print("terminated", flush=True)
        sys.exit(143)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


@pytest.mark.parametrize(
    ("number", "said", "status"),
    [(signal.SIGTERM, "terminated", 143), (signal.SIGINT, "interrupted", 130)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_a_helper_thread_takes_still_ends_the_main_threads_wait(
    number: int, said: str, status: int
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED_MAIN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "waiting\n"
        (helper,) = helper_threads(proc.pid)
        tgkill(proc.pid, helper, number)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    assert out == f"{said}\n"
    assert proc.returncode == status


def test_a_session_waiting_for_a_line_ends_on_a_sigterm_a_helper_thread_takes(
    project: Path,
) -> None:
    """After a contained command the session has helper threads (its warm sandbox's builder);
    SIGTERM handed to one of them ends the session waiting at its prompt."""
    child, _ = start(project, contained=True)
    run(child, "run_command ls")
    # The builder starts once the call's answer is out: the prompt may come back first.
    deadline = time.monotonic() + 20
    while not (helpers := helper_threads(child.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert helpers
    tgkill(child.pid, helpers[0], signal.SIGTERM)
    child.expect_exact("codecoder: terminated", timeout=20)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 143
