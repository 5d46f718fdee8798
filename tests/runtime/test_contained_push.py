"""A contained `git push` (issue 22): where the user's own file routes the remote's host through
the credential broker and the egress allowlist admits it, `git push` is an ordinary contained
command (its question offers AlwaysThisProject); every other push still needs the host.

@bwrap and the broker are tests/environments/test_bwrap_broker.py's subject; here run_command
runs in a recorder, and the permission layer is the real one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.broker import CredentialRoute
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.session import Runtime
from codecoder.tools.containedpush import contained_push
from tests.conftest import RecordingAsker, echo_handler, write_config

BWRAP = EnvironmentTag.BWRAP
SHELL = EnvironmentTag.SHELL
HOST = "git.example.test"
ROUTES = ((HOST, 443),)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def user_file(text: str | dict[str, Any]) -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if isinstance(text, str) else json.dumps(text, indent=2) + "\n")
    return path


@pytest.fixture
def repo(project: Path) -> Path:
    git(project, "init", "-q", "-b", "main")
    git(project, "remote", "add", "origin", f"https://{HOST}/team/app.git")
    return project


@pytest.fixture
def routed(repo: Path) -> Path:
    """The user routes HOST's credential; the project's trusted file admits HOST."""
    user_file({"credentials": {HOST: {"from": "git"}}})
    write_config(repo, {"docker": {"network": {"allow": [HOST]}}})
    return repo


def contained(project: Path, asker: Any) -> Runtime:
    environments = {
        BWRAP: MockEnvironment(echo_handler, BWRAP),
        SHELL: MockEnvironment(echo_handler, SHELL),
    }
    return Runtime(project, asker=asker, environments=environments, bindings={"run_command": BWRAP})


# --- configuration -------------------------------------------------------------------------------


def test_the_users_file_routes_a_host_and_the_allowlist_admits_it(routed: Path) -> None:
    with contained(routed, RecordingAsker()) as runtime:
        assert runtime.config.credentials == (CredentialRoute(HOST, 443, "git"),)
        assert runtime.config.credential_hosts == ROUTES


def test_a_route_the_egress_allowlist_does_not_admit_routes_nothing(repo: Path) -> None:
    user_file({"credentials": {HOST: {"from": "git"}}})
    with contained(repo, RecordingAsker()) as runtime:
        assert runtime.config.credential_hosts == ()


def test_a_projects_codecoder_json_never_routes_credentials_even_trusted(repo: Path) -> None:
    write_config(
        repo,
        (
            '{\n  "docker": {"network": {"allow": ["@H@"]}},\n'
            '  "credentials": {"@H@": {"from": "git"}}\n}\n'
        ).replace("@H@", HOST),
    )
    with contained(repo, RecordingAsker()) as runtime:
        assert runtime.config.credentials == ()
        assert runtime.config.credential_hosts == ()
        (error,) = [d for d in runtime.config.diagnostics if d.code == "credentials_in_project"]
    assert (error.severity, error.line, error.column) == ("error", 3, 18)
    assert "only in your own file" in error.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"@H@": {"from": "git", "token": "x"}}', 'unknown key "token" in credentials'),
        ('{"@H@": {"from": "ssh"}}', "'git'"),
        ('{"@H@": {}}', 'is missing "from"'),
        ('{"*.example.test": {"from": "git"}}', "names one host, not a pattern"),
        ('{"@H@": "git"}', "should be an object"),
    ],
)
def test_a_bad_route_in_the_users_file_is_an_error_with_line_and_column(
    repo: Path, value: str, message: str
) -> None:
    path = user_file('{\n  "credentials": @V@\n}\n'.replace("@V@", value.replace("@H@", HOST)))
    with contained(repo, RecordingAsker()) as runtime:
        assert runtime.config.credentials == ()
        errors = [d for d in runtime.config.diagnostics if d.severity == "error"]
    assert errors and all(d.file == str(path) and d.line == 2 for d in errors), errors
    assert any(message in d.message for d in errors), [d.message for d in errors]


# --- keys and the question -----------------------------------------------------------------------


def test_a_push_to_a_routed_https_remote_runs_contained_and_offers_always_this_project(
    routed: Path,
) -> None:
    asker = RecordingAsker(Answer.PROJECT)
    with contained(routed, asker) as runtime:
        outcome = runtime.session().call("run_command", {"command": "git push origin main"})
        assert outcome.error is None, outcome.to_json()
        assert outcome.decision.environment is BWRAP
        (request,) = asker.requests
        assert Answer.PROJECT in request.choices and Answer.HOST_ONCE not in request.choices
        assert not request.host_key
        assert runtime.environment(BWRAP).requests  # type: ignore[attr-defined]
        assert runtime.environment(SHELL).requests == []  # type: ignore[attr-defined]
    assert json.loads((routed / "codecoder.json").read_text())["allowlist"] == {
        "run_command:git:push": "AlwaysThisProject"
    }
    with contained(routed, RecordingAsker()) as later:
        again = later.session().call("run_command", {"command": "git push origin main"})
    assert (again.decision.source, again.decision.environment) == (Source.PROJECT, BWRAP)


def test_without_a_route_git_push_still_offers_the_host(repo: Path) -> None:
    write_config(repo, {"docker": {"network": {"allow": [HOST]}}})
    asker = RecordingAsker(Answer.DENY)
    with contained(repo, asker) as runtime:
        runtime.session().call("run_command", {"command": "git push origin main"})
    assert asker.requests[0].host_key == "run_command:git:push"


@pytest.mark.parametrize(
    "command",
    [
        "git push",
        "git push origin",
        "git push origin main",
        "git push -u origin feature",
        "git push --force-with-lease origin main",
        "git push -q --tags origin",
        "git push origin -- main",
    ],
)
def test_plain_pushes_to_the_routed_remote_are_contained(routed: Path, command: str) -> None:
    assert contained_push(command.split(), routed, ROUTES) == f"https://{HOST}/team/app.git"


@pytest.mark.parametrize(
    "command",
    [
        f"git push https://{HOST}/team/app.git main",
        f"git push https://{HOST}/other.git",
        "git push ../elsewhere main",
        "git push --repo=origin",
        "git push --repo origin",
        "git push --receive-pack=/tmp/x origin",
        "git push --exec=/tmp/x origin",
        "git push -o ci.skip origin",
        "git push -uf origin main",
        "git push --mirror origin",
        "git push nosuchremote main",
        "git -c http.proxy=x push origin main",
        "git -C . push origin main",
        "git --git-dir=.git push origin",
        "git fetch origin",
    ],
)
def test_other_spellings_of_push_stay_needs_host(routed: Path, command: str) -> None:
    assert contained_push(command.split(), routed, ROUTES) is None


@pytest.mark.parametrize(
    "setup",
    [
        ["remote", "set-url", "origin", f"git@{HOST}:team/app.git"],
        ["remote", "set-url", "origin", f"ssh://git@{HOST}/team/app.git"],
        ["remote", "set-url", "origin", f"http://{HOST}/team/app.git"],
        ["remote", "set-url", "origin", "https://github.com/team/app.git"],
        ["remote", "set-url", "origin", f"https://user:pw@{HOST}/team/app.git"],
        ["remote", "set-url", "origin", f"https://user@{HOST}/team/app.git"],
        ["remote", "set-url", "origin", f"https://{HOST.upper()}/team/app.git"],
        ["remote", "set-url", "origin", f"https://{HOST}:8443/team/app.git"],
        ["remote", "set-url", "origin", f"https://{HOST}/team/app.git?x=1"],
        ["remote", "set-url", "--add", "origin", "https://evil.example/app.git"],
        ["remote", "set-url", "--push", "origin", "https://evil.example/app.git"],
        ["config", "url.https://evil.example/.insteadOf", f"https://{HOST}/"],
        ["config", "url.https://evil.example/.pushInsteadOf", f"https://{HOST}/"],
        ["config", "URL.https://evil.example/.InsteadOf", "https://other/"],
        ["config", "remote.origin.vcs", "evil"],
        ["config", "remote.origin.receivepack", "/tmp/evil"],
        ["config", "include.path", "evil.inc"],
    ],
)
def test_a_remote_the_repository_config_points_elsewhere_stays_needs_host(
    routed: Path, setup: list[str]
) -> None:
    (routed / ".git" / "evil.inc").write_text(
        f'[url "https://evil.example/"]\n\tinsteadOf = https://{HOST}/\n'
    )
    git(routed, *setup)
    for command in ("git push", "git push origin main"):
        assert contained_push(command.split(), routed, ROUTES) is None, setup


def test_a_legacy_remotes_file_or_a_branch_push_remote_elsewhere_stays_needs_host(
    routed: Path,
) -> None:
    git(routed, "remote", "add", "other", "git@elsewhere:x.git")
    git(routed, "config", "branch.main.pushRemote", "other")
    assert contained_push(["git", "push"], routed, ROUTES) is None
    assert contained_push(["git", "push", "origin"], routed, ROUTES) is not None
    (routed / ".git" / "remotes").mkdir()
    (routed / ".git" / "remotes" / "origin").write_text("URL: git@elsewhere:x.git\n")
    assert contained_push(["git", "push", "origin"], routed, ROUTES) is None


def test_no_routes_means_nothing_is_contained(routed: Path) -> None:
    assert contained_push(["git", "push", "origin"], routed, ()) is None
    assert contained_push(["git", "push", "origin"], routed, (("github.com", 443),)) is None


def test_the_network_question_for_a_routed_host_says_pushes_carry_the_users_credential(
    routed: Path,
) -> None:
    """The grant of network:<host> is what lets the credential out of the broker: its question
    names it, for a routed host only (an unrouted host's question is unchanged)."""
    from codecoder.environments.base import CommandRequest, CommandResult
    from codecoder.permissions.prompt import render

    write_config(routed, {"docker": {"network": {"allow": [HOST, "pypi.org"]}}})
    refused: list[str | None] = []

    def connects(request: CommandRequest) -> CommandResult:
        assert request.network is not None
        refused.extend(request.network.admit(host, 443) for host in (HOST, "pypi.org"))
        return echo_handler(request)

    asker = RecordingAsker(Answer.PROJECT, Answer.SESSION, Answer.SESSION)
    environments = {
        BWRAP: MockEnvironment(connects, BWRAP),
        SHELL: MockEnvironment(echo_handler, SHELL),
    }
    with Runtime(
        routed, asker=asker, environments=environments, bindings={"run_command": BWRAP}
    ) as runtime:
        outcome = runtime.session().call("run_command", {"command": "git push origin main"})

    assert outcome.error is None, outcome.to_json()
    assert refused == [None, None]
    routed_question, plain_question = (render(r) for r in asker.requests[1:])
    assert f"network:{HOST}" in routed_question and "YOUR git credential" in routed_question
    assert "network:pypi.org" in plain_question and "credential" not in plain_question
