"""The credential broker (`environments.broker`) with real bubblewrap and a real HTTPS git server
on loopback: a contained `git push` gets the user's credential, the sandbox never does."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest, CommandResult, Connection
from codecoder.environments.broker import CredentialRoute
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.egress import Egress
from tests.environments.bwrap_support import git, need_bwrap, repo  # noqa: F401
from tests.environments.gitserver import HOST, TOKEN, USER, GitServer, git_server, user_home  # noqa: F401

EXPECTED = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()


@dataclass
class Gate:
    admitted: list[tuple[str, int]] = field(default_factory=list)
    recorded: list[Connection] = field(default_factory=list)

    def admit(self, host: str, port: int) -> str | None:
        self.admitted.append((host, port))
        return None

    def record(self, connection: Connection) -> None:
        self.recorded.append(connection)


@dataclass
class Routed:
    env: BwrapEnvironment
    server: GitServer
    home: Path
    workspace: Path

    def run(self, script: str, *, writable: bool = True, gate: Gate | None = None) -> CommandResult:
        return self.env.run(
            CommandRequest(
                cwd=self.workspace, script=script, writable=writable, network=gate or Gate()
            )
        )


@pytest.fixture
def routed(repo: Path, git_server: GitServer, tmp_path: Path) -> Iterator[Routed]:  # noqa: F811
    need_bwrap()
    home = user_home(tmp_path, git_server)
    git_server.bare("project.git")
    git(repo, "remote", "add", "origin", git_server.url("project.git"))
    environ = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}
    env = BwrapEnvironment(
        repo,
        egress=Egress((HOST,)),
        environ=environ,
        resolver=git_server.resolver,
        credentials=(CredentialRoute.parse(HOST),),
        upstream_ca=git_server.ca,
        upstream_address=("127.0.0.1", git_server.port),
    )
    yield Routed(env, git_server, home, repo)
    env.close()


def test_a_contained_git_push_to_a_routed_host_succeeds_with_the_users_credential(
    routed: Routed,
) -> None:
    gate = Gate()
    result = routed.run("git push -q origin main 2>&1", gate=gate)
    assert result.exit_code == 0, result.stdout + result.stderr
    head = git(routed.workspace, "rev-parse", "HEAD").strip()
    pushed = subprocess.run(
        ["git", "--git-dir", str(routed.server.root / "project.git"), "rev-parse", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert pushed == head
    assert ("POST", "/project.git/git-receive-pack", EXPECTED) in routed.server.seen
    assert gate.admitted and all(c.allowed for c in gate.recorded)
