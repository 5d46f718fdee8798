"""A writable call's disk budget counts what the call wrote, never what its file system grew by:
another process writing beside the workspace while `true` runs does not fail it, in bind mode
or sync mode, while a call that writes past its budget (into a file, a sparse file, or a file it
deleted but keeps open) is still stopped. A real tmpfs shared by the workspace and the other
writer; real containers."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.foundation.errors import ExecutionFailed
from tests.environments.conftest import SANDBOX_IMAGE
from tests.faults import small_filesystem

pytestmark = pytest.mark.docker

BUDGET = "16m"


@pytest.fixture
def shared_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system the workspace shares with another writer: 256 MB of tmpfs."""
    with small_filesystem(tmp_path / "disk", "256m") as disk:
        yield disk


def _workspace(disk: Path) -> Path:
    root = disk / "workspace"
    root.mkdir()
    root.chmod(0o755)
    os.chown(root, 10001, 10001)
    return root


def run(env: DockerEnvironment, script: str, **options: Any) -> CommandResult:
    request = CommandRequest(cwd=env.workspace, script=script, writable=True, **options)
    return env.run(request)


def _meanwhile_another_process_writes(disk: Path, megabytes: int, after: float) -> threading.Thread:
    def write() -> None:
        time.sleep(after)
        with open(disk / "someone-else.bin", "wb") as file:
            file.write(b"\xa5" * megabytes * 1024 * 1024)
            file.flush()
            os.fsync(file.fileno())

    writer = threading.Thread(target=write)
    writer.start()
    return writer


def _beside_the_volume(tmp_path: Path, docker_engine: Any) -> Path:
    """A directory on the file system of the engine's volumes (sync mode's workspace)."""
    root = Path(docker_engine.info()["DockerRootDir"])
    if os.stat(root).st_dev != os.stat(tmp_path).st_dev:
        pytest.skip(f"{tmp_path} is not on the file system of {root}")
    return tmp_path


@pytest.mark.parametrize("mode", ["bind", "sync"])
def test_another_process_writing_beside_the_workspace_is_not_the_calls_doing(
    shared_disk: Path, tmp_path: Path, docker_engine: Any, mode: str
) -> None:
    workspace = _workspace(shared_disk)
    # Bind mode: the workspace's own file system; sync mode: the one its volume is on.
    other = shared_disk if mode == "bind" else _beside_the_volume(tmp_path, docker_engine)
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace=mode, disk_budget=BUDGET)
    with DockerEnvironment(workspace, settings) as env:
        run(env, "true")  # the container (and its watch) before the call
        writer = _meanwhile_another_process_writes(other, 96, after=0.5)
        try:
            # A small sparse file too: what it hides is counted on top of what the call wrote,
            # never on top of the file system's growth.
            result = run(env, "sleep 3; truncate -s 1M sparse.img; echo done", timeout=60)
        finally:
            writer.join()
            (other / "someone-else.bin").unlink()

    assert result.exit_code == 0 and result.stdout == "done\n", result


@pytest.mark.parametrize(
    "script",
    [
        "head -c 200M /dev/zero > big",
        # Deleted at once but kept open: no walk finds it, its space is still the call's.
        "exec 3> hidden && rm hidden && head -c 200M /dev/zero >&3 && sleep 5",
    ],
)
def test_a_call_writing_past_its_budget_is_still_stopped(shared_disk: Path, script: str) -> None:
    workspace = _workspace(shared_disk)
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace="bind", disk_budget=BUDGET)
    with (
        DockerEnvironment(workspace, settings) as env,
        pytest.raises(ExecutionFailed, match=f"disk budget of {BUDGET}"),
    ):
        run(env, f"{script}; echo done", timeout=60)
