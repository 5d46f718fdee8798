"""A workspace that belongs to root (a set-up done as root, a clone in /root or /srv): commands
run as uid 10001, never as root, so a bind mount of it would refuse their writes (`touch x`:
Permission denied). `"workspace": "auto"` syncs it instead (`environments.docker.workspacemode`):
the volume is the command user's, what a call changed comes back as root's. The attacks: the
command is still uid 10001 without capabilities, the agent is still out of its reach, and what
comes back carries no set-uid or set-gid bit (it would be root's on the host)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.image import sandbox_status
from codecoder.environments.docker.workspacemode import workspace_mode

docker_test = pytest.mark.docker


@pytest.fixture
def root_workspace(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("a workspace that belongs to root needs root to make (CI runs as root)")
    root = tmp_path / "project"
    root.mkdir()
    root.chmod(0o755)
    (root / "README.md").write_text("hello\n")
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


@pytest.fixture
def sandbox(root_workspace: Path) -> Iterator[DockerEnvironment]:
    with DockerEnvironment(root_workspace, DockerSettings(disk_budget="256m")) as env:
        yield env


def run(env: DockerEnvironment, script: str, writable: bool = True) -> CommandResult:
    return env.run(CommandRequest(cwd=env.workspace, script=script, writable=writable, timeout=60))


def test_a_root_owned_workspace_is_synced_and_one_owned_by_a_user_is_bound(
    root_workspace: Path, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.mkdir()
    os.chown(users, 1000, 1000)
    synced = workspace_mode(DockerSettings(), root_workspace)
    assert (synced.mode, synced.warning) == ("sync", None)
    assert "belongs to root" in (synced.reason or "")
    assert workspace_mode(DockerSettings(), users).mode == "bind"
    # One that anyone may write, uid 10001 included, is bound as it is.
    root_workspace.chmod(0o777)
    assert workspace_mode(DockerSettings(), root_workspace).mode == "bind"
    # Commands of an explicit user are that user's business: bound, as configured.
    assert workspace_mode(DockerSettings(user="1000:1000"), root_workspace).mode == "bind"


def test_binding_a_root_owned_workspace_is_obeyed_and_check_says_commands_cannot_write_it(
    root_workspace: Path,
) -> None:
    settings = DockerSettings(workspace="bind")
    assert workspace_mode(settings, root_workspace).mode == "bind"
    status = sandbox_status(settings, workspace=root_workspace)
    assert any(
        "belongs to root" in warning and "cannot write it" in warning for warning in status.warnings
    ), status.warnings


@docker_test
def test_a_command_writes_a_root_owned_workspace_and_what_it_made_is_roots(
    sandbox: DockerEnvironment, root_workspace: Path
) -> None:
    result = run(sandbox, "id -u; touch x && echo more >> README.md && mkdir -p src/a && ls")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == "10001\nREADME.md\nsrc\nx\n"
    made = root_workspace / "x"
    assert made.is_file() and (made.stat().st_uid, made.stat().st_gid) == (0, 0)
    assert (root_workspace / "README.md").read_text() == "hello\nmore\n"
    assert (root_workspace / "src" / "a").stat().st_uid == 0


@docker_test
def test_a_command_in_a_root_owned_workspace_has_no_capability_and_cannot_reach_the_agent(
    sandbox: DockerEnvironment,
) -> None:
    result = run(
        sandbox,
        "grep -E '^(Uid|CapEff|CapPrm|NoNewPrivs)' /proc/self/status | tr -s '\\t' ' '; "
        "kill -STOP $PPID 2>/dev/null && echo stopped-the-agent; "
        "kill -0 1 2>/dev/null && echo reached-init; "
        "cat /proc/$PPID/environ 2>/dev/null && echo read-the-agent; true",
    )
    after = run(sandbox, "echo alive")
    assert result.stdout == (
        "Uid: 10001 10001 10001 10001\n"
        "CapPrm: 0000000000000000\n"
        "CapEff: 0000000000000000\n"
        "NoNewPrivs: 1\n"
    )
    assert after.stdout == "alive\n"


@docker_test
def test_what_comes_back_into_a_root_owned_workspace_carries_no_set_id_bit(
    sandbox: DockerEnvironment, root_workspace: Path
) -> None:
    """On the host the files are root's: a set-uid bit kept would make a set-uid-root program."""
    result = run(
        sandbox,
        "cp /bin/sh ./sh && mkdir shared && chmod 777 shared && "
        "{ chmod 6755 ./sh; chmod 2777 shared; stat -c '%a' sh shared; }",
    )
    # The agent's filter refuses set-id modes (test_setid.py); the copy-back keeps only the
    # permission bits of what does come back besides.
    assert (result.exit_code, result.stdout) == (0, "755\n777\n")
    assert result.stderr.count("Operation not permitted") == 2
    copied, shared = root_workspace / "sh", root_workspace / "shared"
    assert copied.stat().st_uid == 0
    assert stat.S_IMODE(copied.stat().st_mode) == 0o755
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777
