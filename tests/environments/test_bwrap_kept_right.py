"""What Anthropic's sandbox-runtime and Codex's Linux sandbox get wrong, which @bwrap keeps right
(issue 33, class 7), each by its effect on the host: a nested repository's hooks at any depth,
`commondir` and `modules/` plants, the session keyring, processes and litter surviving a runner
killed mid-call, and a /tmp shared between calls. (The keyring's system calls are refused in
test_bwrap_attacks.py::test_the_kernel_interfaces_seccomp_refuses_are_refused; here the host's
own session keyring is checked from inside.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.foundation.errors import ExecutionFailed
from tests.environments.bwrap_support import bwrap, git, need_bwrap, repo, run, survivors, tree

__all__ = ["bwrap", "repo"]  # fixtures


def test_a_nested_repositorys_hooks_are_protected_at_any_depth(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    deep = repo / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    git(deep, "init", "-q", "-b", "main")
    inner = deep / "vendor" / "x"
    inner.mkdir(parents=True)
    git(inner, "init", "-q", "-b", "main")  # a repository inside a nested one
    before = {p: tree(p / ".git" / "hooks") for p in (deep, inner)}
    for where in ("a/b/c/d", "a/b/c/d/vendor/x"):
        run(
            bwrap,
            f"printf '#!/bin/sh\\necho planted\\n' > {where}/.git/hooks/pre-commit; "
            f"git -C {where} config core.fsmonitor 'echo planted'; true",
        )
    assert {p: tree(p / ".git" / "hooks") for p in (deep, inner)} == before
    assert "planted" not in (deep / ".git" / "config").read_text()
    assert "planted" not in (inner / ".git" / "config").read_text()


@pytest.mark.parametrize(
    "plant",
    [
        "echo /tmp/elsewhere > .git/commondir",
        "mkdir -p .git/modules/sub/hooks && echo planted > .git/modules/sub/hooks/pre-commit",
        "mkdir -p .git/worktrees/w && echo /tmp > .git/worktrees/w/gitdir",
    ],
)
def test_commondir_modules_and_worktrees_cannot_be_planted(
    bwrap: BwrapEnvironment, repo: Path, plant: str
) -> None:
    with pytest.raises(ExecutionFailed, match=r"created in a git directory|Quarantined"):
        run(bwrap, plant)
    for name in ("commondir", "modules", "worktrees"):
        assert not (repo / ".git" / name).exists()


def test_an_existing_submodules_git_directory_is_protected(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    modules = repo / ".git" / "modules" / "sub"
    (modules / "hooks").mkdir(parents=True)
    (modules / "config").write_text("[core]\n\tbare = false\n")
    run(
        bwrap,
        "echo planted > .git/modules/sub/hooks/post-checkout; "
        "echo x >> .git/modules/sub/config; true",
    )
    assert not (modules / "hooks" / "post-checkout").exists()
    assert (modules / "config").read_text() == "[core]\n\tbare = false\n"


def test_the_hosts_session_keyring_is_out_of_reach(bwrap: BwrapEnvironment) -> None:
    host = subprocess.run(
        [sys.executable, "-c", KEYRING], capture_output=True, text=True, check=False
    ).stdout
    request = CommandRequest(cwd=bwrap.workspace, argv=("/usr/bin/python3", "-c", KEYRING))
    inside = bwrap.run(request).stdout
    assert "session keyring" in host  # the control: the host has one it can read
    assert inside == "refused\n"


KEYRING = (
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "n = libc.syscall(250, 0, -3, 0); "  # KEYCTL_GET_KEYRING_ID of the session keyring
    "print('session keyring' if n >= 0 else 'refused')"
)


def test_nothing_outlives_a_runner_killed_mid_call_and_its_litter_goes_with_the_next(
    tmp_path: Path,
) -> None:
    need_bwrap()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = f"4242.{os.getpid()}"
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path[:0] = {sys.path!r}
        from codecoder.environments.base import CommandRequest
        from codecoder.environments.bwrap.environment import BwrapEnvironment
        env = BwrapEnvironment(Path({str(workspace)!r}), warm=False)
        print("started", flush=True)
        env.run(CommandRequest(cwd=env.workspace, writable=True, timeout=600,
            script="(setsid sleep {marker} &); nohup sleep {marker} >/dev/null 2>&1 & "
                   "echo litter > litter.txt; sleep {marker}"))
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "started\n"
    deadline = time.monotonic() + 30
    while not (workspace / "litter.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert survivors(marker) == []
    # The killed runner's placeholders are taken over and removed by the next environment.
    assert (workspace / ".claude").is_dir()
    env = BwrapEnvironment(workspace, warm=False)
    try:
        run(env, "true")
    finally:
        env.close()
    assert sorted(p.name for p in workspace.iterdir()) == ["litter.txt"]


def test_tmp_is_never_shared_between_calls_or_with_the_host(
    bwrap: BwrapEnvironment, tmp_path: Path
) -> None:
    mark = f"codecoder-tmp-{os.getpid()}"
    first = run(bwrap, f"echo secret > /tmp/{mark} && ls /tmp")
    second = run(bwrap, f"cat /tmp/{mark} 2>&1; ls -A /tmp", writable=False)
    third = run(bwrap, f"cat /tmp/{mark} 2>&1; true")
    assert mark in first.stdout.split()  # (the workspace's own path shows there too)
    assert "No such file" in second.stdout and mark not in second.stdout.split("\n", 1)[1]
    assert "No such file" in third.stdout
    assert not Path("/tmp", mark).exists()
