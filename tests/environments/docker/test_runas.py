"""runas, the static helper the sandbox agent starts every command through: it must leave the
command nothing (no capability, no bounding set, no group but its own) or not run it at all.

Run on the host, as root (what the agent is in its container); skipped where that is not so.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

RUNAS = Path(__file__).resolve().parents[3] / "sandboxes" / "image" / f"runas-{platform.machine()}"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not RUNAS.exists(), reason="needs root and a runas for this machine"
)


def runas(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUNAS), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
    )


def test_the_command_runs_as_the_user_alone_with_no_capability() -> None:
    done = runas(
        "10001", "10002", "/", "grep", "-E", "^(Uid|Gid|Groups|Cap|NoNewPrivs)", "/proc/self/status"
    )

    zero = "0000000000000000"
    assert done.returncode == 0, done.stderr
    assert [" ".join(line.split()) for line in done.stdout.splitlines()[:3]] == [
        "Uid: 10001 10001 10001 10001",
        "Gid: 10002 10002 10002 10002",
        "Groups:",
    ]
    assert [
        line.split(":\t")[1] for line in done.stdout.splitlines() if line.startswith("Cap")
    ] == [zero] * 5


@pytest.mark.parametrize(
    "args",
    [
        ("0", "10001", "/", "true"),
        ("10001", "0", "/", "true"),
        ("x", "1", "/", "true"),
        ("1", "1", "true"),
        ("1", "1"),
    ],
)
def test_root_and_malformed_arguments_run_nothing(args: tuple[str, ...]) -> None:
    done = runas(*args)

    assert (done.returncode, done.stdout) == (125, "")
    assert done.stderr.startswith("usage: runas UID GID DIR PROGRAM")


@pytest.fixture
def bin_dir() -> Iterator[Path]:
    """A directory of programs the unprivileged user can reach (pytest's tmp_path is 0700)."""
    directory = Path(tempfile.mkdtemp(prefix="codecoder-runas-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


def test_programs_are_found_in_path_and_failures_say_why(bin_dir: Path) -> None:
    (bin_dir / "codecoder-hello").write_text("#!/bin/sh\necho from path\n")
    (bin_dir / "codecoder-hello").chmod(0o755)
    (bin_dir / "locked").write_text("#!/bin/sh\n")
    (bin_dir / "locked").chmod(0o700)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}

    found = runas("10001", "10001", "/", "codecoder-hello", env=env)
    missing = runas("10001", "10001", "/", "no-such-program", env=env)
    locked = runas("10001", "10001", "/", str(bin_dir / "locked"), env=env)

    assert (found.returncode, found.stdout) == (0, "from path\n")
    assert (missing.returncode, missing.stderr) == (127, "no-such-program: command not found\n")
    assert (locked.returncode, locked.stderr) == (126, f"{bin_dir}/locked: permission denied\n")


def test_the_directory_is_entered_as_the_user(bin_dir: Path) -> None:
    """A directory only its owner may enter (a workspace of mode 0700) is entered by the user,
    after the identity changed; one the user may not enter runs nothing."""
    own = bin_dir / "own"
    own.mkdir(mode=0o700)
    os.chown(own, 10001, 10001)
    other = bin_dir / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 10002, 10002)

    entered = runas("10001", "10001", str(own), "pwd")
    refused = runas("10001", "10001", str(other), "touch", "ran")
    missing = runas("10001", "10001", str(bin_dir / "none"), "true")

    assert (entered.returncode, entered.stdout) == (0, f"{own}\n")
    assert (refused.returncode, refused.stdout) == (126, "")
    assert refused.stderr == (
        f"{other}: the working directory cannot be entered (permission denied)\n"
    )
    assert not (other / "ran").exists()
    assert missing.returncode == 126
