"""@docker against issue 33's classes 4 and 5, through the dispatcher as an agent's call runs:
the git guard's baseline is taken before a first @docker call (a file `.git/config` includes,
edited in the sandbox, does not reach the next host `git fetch`), and a command in @docker gets
none of the host's environment (secrets by any name). Both held before this round: these are
the regression tests, each with the effect observed on the host.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed
from codecoder.permissions.prompt import fixed
from codecoder.session import Runtime
from tests.environments.conftest import SANDBOX_IMAGE
from tests.environments.host.test_gitseen import GIT_ENV, SSH_COMMAND, Runner, git

pytestmark = pytest.mark.docker

MODES = ["bind", "sync"]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in GIT_ENV.items():
        if key.startswith("GIT_"):
            monkeypatch.setenv(key, value)
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("a\n")
    git(project, "add", "a.txt")
    git(project, "commit", "-qm", "first")
    return project


def owned_by_the_sandbox_user(root: Path) -> None:
    for directory, _, files in os.walk(root):
        os.chown(directory, 10001, 10001)
        for name in files:
            os.chown(os.path.join(directory, name), 10001, 10001)


@pytest.fixture
def in_docker(repo: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A session whose run_command runs in @docker (bind or sync mode), the human answering
    `once`."""

    def session(mode: str) -> Any:
        env = DockerEnvironment(repo, DockerSettings(image=SANDBOX_IMAGE, workspace=mode))  # type: ignore[arg-type]
        runtime = Runtime(
            repo,
            asker=fixed(Answer.ONCE),
            audit_log=None,
            bindings={"run_command": EnvironmentTag.DOCKER},
            environments={EnvironmentTag.DOCKER: env},
        )
        opened.append(runtime)
        return runtime.session()

    opened: list[Runtime] = []
    yield session
    for runtime in opened:
        runtime.close()


@pytest.mark.parametrize("mode", MODES)
def test_an_include_edited_by_a_first_docker_call_does_not_reach_host_git(
    repo: Path, in_docker: Any, tmp_path: Path, mode: str
) -> None:
    marker = tmp_path / "PWNED"
    with (repo / ".git" / "config").open("a") as config:
        config.write("[include]\n\tpath = ../shared.gitconfig\n")
    (repo / "shared.gitconfig").write_text("")
    if mode == "bind":
        owned_by_the_sandbox_user(repo)
    session = in_docker(mode)
    edited = session.call(
        "run_command", {"command": SSH_COMMAND.format(marker=marker) + " >> shared.gitconfig"}
    )
    assert edited.decision.environment == "@docker"
    assert edited.ok, edited.error
    assert "sshCommand" in (repo / "shared.gitconfig").read_text()  # it did reach the host
    host = Runner(repo)
    try:
        refused = host.run("git fetch ssh://example.invalid/repo.git")
    finally:
        host.close()
    assert isinstance(refused.error, ExecutionFailed), refused
    assert "codecoder trust --git" in str(refused.error)
    assert not marker.exists()


def test_the_control_the_same_edit_made_before_any_sandbox_is_the_humans(
    repo: Path, tmp_path: Path
) -> None:
    """What the baseline protects against: the planted include does run the program."""
    marker = tmp_path / "PWNED"
    with (repo / ".git" / "config").open("a") as config:
        config.write("[include]\n\tpath = ../shared.gitconfig\n")
    subprocess.run(
        ["sh", "-c", SSH_COMMAND.format(marker=marker) + " > shared.gitconfig"],
        cwd=repo,
        check=True,
    )
    subprocess.run(
        ["git", "fetch", "ssh://example.invalid/repo.git"], cwd=repo, capture_output=True
    )
    assert marker.exists()


SECRETS = {
    "GITHUB_PAT": "ghp_0123456789abcdef0123456789abcdef0123",
    "SSHPASS": "hunter2-ssh",
    "BORG_PASSPHRASE": "borg-secret",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/secret",
    "SONAR_LOGIN": "sonar-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-key",
    "MY_OWN_TOOL_SETTING": "unknown-name-secret",
}


@pytest.mark.parametrize("mode", MODES)
def test_a_docker_command_gets_none_of_the_hosts_environment(
    repo: Path, in_docker: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    if mode == "bind":
        owned_by_the_sandbox_user(repo)
    said = in_docker(mode).call("run_command", {"command": "env; cat /proc/self/environ"})
    assert said.ok, said.error
    assert said.decision.environment == "@docker"
    output = said.result.output
    assert "PATH=" in output  # the image's own environment is there
    leaked = [name for name, value in SECRETS.items() if name in output or value in output]
    assert leaked == []
