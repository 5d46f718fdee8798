"""What a killed pool server leaves in `<state>/pool/egress` (environments/docker/pool/warm.py,
`sweep_egress`): removed by the next server, except what is still in use, a live server's warm
sandbox's (empty) or a live session's (its proxy listening there). No engine needed."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from codecoder.environments.docker.labels import _process_start
from codecoder.environments.docker.pool.warm import WarmPool, sweep_egress
from codecoder.environments.egress import SOCKET_NAME


def made_by(root: Path, pid: int, start: str, name: str) -> Path:
    directory = root / f"egress-{pid}.{start}-{name}"
    directory.mkdir(parents=True)
    return directory


def bind(sock: socket.socket, directory: Path) -> None:
    """Bind `sock` as the proxy's socket in `directory` (whose path may be too long for one)."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.bind(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
    finally:
        os.close(fd)


def test_a_dead_servers_directories_go_and_what_is_in_use_stays(tmp_path: Path) -> None:
    root = tmp_path / "egress"
    dead = subprocess.Popen(["true"])  # a pid nobody runs under now (or with another start)
    dead.wait()
    me = os.getpid()
    mine = made_by(root, me, _process_start(me) or "0", "warm")
    reused = made_by(root, me, "1", "pid-reused")  # this pid, another start time: not me
    orphan = made_by(root, dead.pid, "1", "orphan")
    stale = made_by(root, dead.pid, "1", "stale-socket")
    live = made_by(root, dead.pid, "1", "live-session")
    with socket.socket(socket.AF_UNIX) as old:
        bind(old, stale)  # bound, then closed: nobody listens
    listener = socket.socket(socket.AF_UNIX)
    bind(listener, live)
    listener.listen()
    unnamed_old = root / "egress-abc123"
    unnamed_old.mkdir()
    os.utime(unnamed_old, (time.time() - 2 * 86400,) * 2)
    unnamed_new = root / "egress-def456"
    unnamed_new.mkdir()
    other = root / "not-egress"
    other.mkdir()
    try:
        removed = sweep_egress(root)
    finally:
        listener.close()

    assert sorted(removed) == sorted([reused, orphan, stale, unnamed_old])
    for path in (mine, live, unnamed_new, other):
        assert path.is_dir(), path
    for path in removed:
        assert not path.exists()


def test_a_pool_sweeps_once_and_names_its_own_after_itself(tmp_path: Path) -> None:
    root = tmp_path / "egress"
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = made_by(root, dead.pid, "1", "orphan")
    pool = WarmPool(engine=None, labels={}, egress_root=root)  # type: ignore[arg-type]
    made = pool._egress_directory()
    assert not orphan.exists()
    me = os.getpid()
    assert made.name.startswith(f"egress-{me}.{_process_start(me)}-")
    again = made_by(root, dead.pid, "1", "after")
    second = pool._egress_directory()
    assert again.exists()  # swept once, when the server first made one
    assert {made, second} <= set(root.iterdir())
