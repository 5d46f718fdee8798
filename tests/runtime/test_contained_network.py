"""Contained and connected (issue 34), through the public API: a contained command's hosts are
asked as `network:<host>` during the call, a package index is one grant, a refused host fails
at once and the result says how to allow it, and what only needs the network runs contained,
the host offered only after the contained route was.

The sandbox is a mock environment that connects as a command would: it asks the call's
network gate for each host, as the egress proxy does on each CONNECT (the proxy itself is
tests/environments/test_bwrap_network.py's subject).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Decision, Source
from codecoder.foundation.errors import DeniedByUser
from codecoder.permissions.prompt import AskRequest
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, echo_handler, write_config

BWRAP = EnvironmentTag.BWRAP
SHELL = EnvironmentTag.SHELL
# What each command connects to when it runs (the egress proxy asks the gate for each).
CONNECTS = {
    "pip download six": ["pypi.org", "files.pythonhosted.org", "files.pythonhosted.org"],
    "npm view is-number version": ["registry.npmjs.org"],
    "curl https://example.com/x": ["example.com", "example.com", "example.com"],
    "npm install": ["registry.npmjs.org"],
    "git fetch": ["github.com"],
}


def connecting(request: CommandRequest) -> CommandResult:
    command = " ".join(request.argv) if request.argv is not None else request.script or ""
    refused = []
    for host in CONNECTS.get(command, []):
        assert request.network is not None
        why_not = request.network.admit(host, 443)
        if why_not is not None:
            refused.append(why_not)
    if refused:
        return CommandResult(exit_code=1, stdout="", stderr="403\n", duration=0.0)
    return CommandResult(exit_code=0, stdout="ok\n", stderr="", duration=0.0)


def runtime(project: Path, asker: Any) -> Runtime:
    return Runtime(
        project,
        asker=asker,
        environments={
            BWRAP: MockEnvironment(connecting, BWRAP),
            SHELL: MockEnvironment(echo_handler, SHELL),
        },
        bindings={"run_command": BWRAP},
    )


def run(rt: Runtime, command: str, session: Any = None) -> Any:
    return (session or rt.session()).call("run_command", {"command": command})


def network_questions(asker: RecordingAsker) -> list[AskRequest]:
    return [r for r in asker.requests if r.tool == "network"]


def test_a_hosts_question_comes_during_the_call_and_names_the_command_and_the_sandbox(
    project: Path,
) -> None:
    write_config(project, {"allowlist": {"run_command:**": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.ONCE)
    with runtime(project, asker) as rt:
        outcome = run(rt, "curl https://example.com/x")
    assert outcome.ok, outcome.to_json()
    (question,) = asker.requests  # three connections, one question
    assert (question.key, question.environment) == ("network:example.com", BWRAP)
    assert question.subject.startswith("curl https://example.com/x asks to connect to example")
    assert question.choices == (
        Answer.ONCE,
        Answer.SESSION,
        Answer.PROJECT,
        Answer.EVERY_PROJECT,
        Answer.DENY,
    )


@pytest.mark.parametrize(
    ("command", "hosts"),
    [
        ("pip download six", ["pypi.org", "files.pythonhosted.org"]),
        ("npm view is-number version", ["registry.npmjs.org", "registry.yarnpkg.com"]),
    ],
)
def test_a_package_index_is_one_question_for_the_project_and_none_in_the_next_session(
    project: Path, command: str, hosts: Sequence[str]
) -> None:
    asker = RecordingAsker(Answer.PROJECT_ANY, Answer.PROJECT)
    with runtime(project, asker) as first:
        outcome = run(first, command)
    assert outcome.ok, outcome.to_json()
    (question,) = network_questions(asker)
    level = question.grant_for(Answer.PROJECT)
    assert level.entries == tuple(f"network:{h}" for h in hosts)
    assert level.covers.startswith(("the Python package index", "the npm registry"))
    allowlist = json.loads((project / "codecoder.json").read_text())["allowlist"]
    assert allowlist == {
        "run_command:**": "AlwaysThisProject",
        **{f"network:{h}": "AlwaysThisProject" for h in hosts},
    }
    with runtime(project, RecordingAsker()) as later:
        again = run(later, command)
    assert again.ok and again.decision.source is Source.PROJECT


def test_a_refused_host_is_asked_once_refused_at_once_after_and_the_result_says_how_to_allow(
    project: Path,
) -> None:
    write_config(project, {"allowlist": {"run_command:**": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.DENY)
    with runtime(project, asker) as rt:
        outcome = run(rt, "curl https://example.com/x")
    assert len(asker.requests) == 1
    result = outcome.unwrap()
    assert result.is_error
    (why,) = result.data["network_refused"].values()
    assert why.startswith("network:example.com was not allowed (denied at the prompt)")
    assert "--allow network:example.com" in why
    assert '"network:example.com": "AlwaysThisProject"' in why
    assert f"[codecoder: egress refused: {why}]" in result.output


def test_where_nobody_can_be_asked_during_the_call_a_new_host_is_refused_saying_so(
    project: Path,
) -> None:
    write_config(project, {"allowlist": {"run_command:**": "AlwaysThisProject"}})

    def hook(request: AskRequest) -> Answer:
        # A hook's `codecoder exec`: the agent's question was its only one.
        decision = Decision(False, Source.DENIED, request.tool, request.environment, request.key)
        raise DeniedByUser(f"{request.key} was not allowed (the host asked no question)", decision)

    with runtime(project, hook) as rt:
        outcome = run(rt, "npm view is-number version")
    (why,) = outcome.unwrap().data["network_refused"].values()
    assert why.startswith("network:registry.npmjs.org was not allowed (the host asked no")
    assert "--allow network:registry.npmjs.org" in why


def test_allow_on_the_command_line_grants_a_host_to_the_sandbox(project: Path) -> None:
    write_config(project, {"allowlist": {"run_command:**": "AlwaysThisProject"}})
    with runtime(project, RecordingAsker()) as rt:
        session = rt.session()
        session.grant("network:example.com")
        outcome = run(rt, "curl https://example.com/x", session)
    assert outcome.ok, outcome.to_json()


# --- the contained route first ------------------------------------------------------------------


def test_an_install_is_contained_first_and_offered_the_host_only_by_a_later_question(
    project: Path,
) -> None:
    asker = RecordingAsker(Answer.ONCE, Answer.SESSION, Answer.DENY)
    with runtime(project, asker) as rt:
        session = rt.session()
        first = run(rt, "npm install", session)
        second = run(rt, "npm install", session)
        assert not rt.environment(SHELL).requests  # type: ignore[attr-defined]
    command_questions = [r for r in asker.requests if r.tool == "run_command"]
    assert [Answer.HOST_ONCE in r.choices for r in command_questions] == [False, True]
    assert first.decision.environment is BWRAP and "egress proxy" in " ".join(
        command_questions[0].notes
    )
    assert isinstance(second.error, DeniedByUser)


def test_the_sandbox_grant_covers_an_install(project: Path) -> None:
    write_config(
        project,
        {
            "allowlist": {
                "run_command:**": "AlwaysThisProject",
                "network:registry.npmjs.org": "AlwaysThisProject",
            }
        },
    )
    with runtime(project, RecordingAsker()) as rt:
        outcome = run(rt, "npm install")
    assert (outcome.ok, outcome.decision.matched) == (True, "run_command:**")


def _remote(project: Path, url: str) -> None:
    for args in (("init", "-q"), ("remote", "add", "origin", url)):
        subprocess.run(["git", *args], cwd=project, check=True)


def test_a_fetch_of_an_https_remote_runs_contained(project: Path) -> None:
    _remote(project, "https://github.com/team/app.git")
    asker = RecordingAsker(Answer.PROJECT_ANY, Answer.PROJECT)
    with runtime(project, asker) as rt:
        outcome = run(rt, "git fetch")
    assert outcome.ok and outcome.decision.environment is BWRAP
    assert [r.key for r in asker.requests] == ["run_command:git:fetch", "network:github.com"]
    assert Answer.HOST_ONCE not in asker.requests[0].choices


def test_a_fetch_of_an_ssh_remote_still_offers_the_host(project: Path) -> None:
    _remote(project, "git@github.com:team/app.git")
    asker = RecordingAsker(Answer.DENY)
    with runtime(project, asker) as rt:
        run(rt, "git fetch")
    assert Answer.HOST_ONCE in asker.requests[0].choices
