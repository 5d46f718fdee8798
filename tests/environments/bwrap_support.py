"""What the @bwrap tests share: a workspace with a real git repository, the environment on it (real
bubblewrap: in CI a missing bubblewrap fails the tests instead of skipping them), and helpers to
run a script in it and to look for processes on the host."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.probe import command_sandbox
from codecoder.environments.placeholders import is_placeholder
from codecoder.foundation.ceiling import EnvironmentTag


def need_bwrap() -> None:
    """Skip (or, with CI=true, fail) where this machine cannot run @bwrap."""
    found = command_sandbox()
    if found.tag is not EnvironmentTag.BWRAP:
        reason = f"@bwrap cannot run here: {found.reason} (apt-get install bubblewrap)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the @bwrap tests must run, but {reason}", pytrace=False)
        pytest.skip(reason)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A workspace holding a git repository with one commit, its protected paths and agent
    settings in place."""
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("hello\n")
    (root / "codecoder.json").write_text("{}\n")
    (root / ".codecoder").mkdir()
    (root / ".codecoder" / "note").write_text("runtime\n")
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text("{}\n")
    (root / ".mcp.json").write_text("{}\n")
    (root / ".gitmodules").write_text("")
    (root / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (root / ".git" / "hooks" / "pre-commit").chmod(0o755)
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "first")
    return root


@pytest.fixture(params=["cold", "warm"])
def bwrap(repo: Path, request: pytest.FixtureRequest) -> Iterator[BwrapEnvironment]:
    """The environment on `repo`, once with every call cold and once with warm sandboxes
    waiting (a read-only and a writable one, built by a first call of each kind): a test's
    calls whose plan matches then run in a warm sandbox, the others cold."""
    need_bwrap()
    env = BwrapEnvironment(repo, warm=request.param == "warm")
    if env.warm:
        prime(env)
    yield env
    env.close()


def prime(env: BwrapEnvironment) -> None:
    """Leave a read-only and a writable warm sandbox waiting in `env` (for calls with no
    session and no toolchain, as `run` makes them)."""
    run(env, "true", writable=True)
    run(env, "true", writable=False)
    deadline = time.monotonic() + 30
    while len(env.warm_sandboxes.held()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(env.warm_sandboxes.held()) == 2, "the warm sandboxes were not built"


def run(
    env: BwrapEnvironment,
    script: str,
    *,
    writable: bool = True,
    timeout: float = 30.0,
    cwd: Path | None = None,
) -> CommandResult:
    return env.run(
        CommandRequest(cwd=cwd or env.workspace, script=script, writable=writable, timeout=timeout)
    )


def processes_with(marker: str) -> list[str]:
    """The command lines of host processes whose arguments contain `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def survivors(marker: str, within: float = 10.0) -> list[str]:
    """The host processes with `marker` in their arguments that are still there after
    `within` seconds (ending a sandbox's processes takes the kernel a moment on a busy machine:
    nothing here is a timing assertion)."""
    deadline = time.monotonic() + within
    while True:
        found = processes_with(marker)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` (symlinks as their target), for comparing before and after; the
    runtime's own placeholders (`environments.placeholders`) left out."""
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if is_placeholder(root, relative):
            continue
        if path.is_symlink():
            found[relative] = b"-> " + os.readlink(path).encode()
        elif path.is_file():
            found[relative] = path.read_bytes()
        elif path.is_dir():
            found[relative + "/"] = b""
    return found
