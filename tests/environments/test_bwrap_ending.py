"""Ending a @bwrap sandbox (environments/bwrap/ending.py): when a call returns, cancelled, timed
out or done, nothing it started is still running, whether or not bubblewrap's init was told of
its parent's death. Real bubblewrap."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.ending import end_sandbox
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.probe import command_sandbox
from codecoder.foundation.errors import Cancelled, ExecutionTimeout
from tests.environments.bwrap_support import need_bwrap, processes_with, repo

__all__ = ["repo"]  # fixtures


def started(marker: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(processes_with(marker)) < count:
        assert time.monotonic() < deadline, processes_with(marker)
        time.sleep(0.02)


def test_a_sandbox_whose_init_outlives_bubblewrap_is_ended_whole() -> None:
    """bubblewrap without --die-with-parent stands for the moment before the init has set its
    parent-death signal (and for a loaded machine where the kernel has not yet delivered it):
    killing bubblewrap's group alone leaves the sandbox running."""
    need_bwrap()
    bwrap = command_sandbox().bwrap
    assert bwrap is not None
    marker = f"5151.{os.getpid()}"
    proc = subprocess.Popen(
        [bwrap, "--unshare-all", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc",
         "--dev", "/dev", "--", "sh", "-c", f"(setsid sleep {marker} &); sleep {marker} & wait"],
        start_new_session=True,
    )  # fmt: skip
    try:
        started(marker, 3)  # bubblewrap, its init and the command's processes
        end_sandbox(proc.pid)
        proc.wait(timeout=10)
        assert processes_with(marker) == []
    finally:
        end_sandbox(proc.pid)


def cancel_when_started(marker: str, cancel: threading.Event) -> None:
    started(marker, 3)
    cancel.set()


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_cancelled_or_timed_out_call_leaves_nothing_running_when_it_returns(
    repo: Path, warm: bool
) -> None:
    need_bwrap()
    env = BwrapEnvironment(repo, warm=warm)
    try:
        for n in range(3):
            marker = f"5152.{os.getpid()}{n}"
            script = f"(setsid sleep {marker} &); sleep {marker} & sleep {marker}; wait"
            cancel = threading.Event()
            threading.Thread(target=cancel_when_started, args=(marker, cancel)).start()
            with pytest.raises(Cancelled):
                env.run(CommandRequest(cwd=repo, script=script, writable=True, cancel=cancel))
            assert processes_with(marker) == []  # at once, not some time later
            with pytest.raises(ExecutionTimeout):
                env.run(CommandRequest(cwd=repo, script=script, writable=False, timeout=1))
            assert processes_with(marker) == []
    finally:
        env.close()
