"""PATH hijack: a program a sandbox could have written is keyed by its path, and what runs is the
program found when the call was keyed. Real processes on @shell."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.host.path import host_path, locate, sandbox_writable
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.permissions.keys import CallSite
from codecoder.permissions.prompt import AskRequest, render
from codecoder.session import Runtime
from codecoder.tools.execute import RunCommand, RunCommandParameters
from tests.conftest import RecordingAsker

REAL_GIT = shutil.which("git")
ON_HOST = {
    "run_command": EnvironmentTag.SHELL
}  # these are host processes (not @bwrap, the default)
pytestmark = pytest.mark.skipif(REAL_GIT is None, reason="git is not installed")


def plant(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho planted >> {marker}\necho planted-git-ran\n")
    path.chmod(0o755)


def key(command: str, workspace: Path, tag: EnvironmentTag = EnvironmentTag.SHELL) -> Any:
    tool = RunCommand()
    return tool.permission_in(RunCommandParameters(command=command), CallSite(workspace, tag)).key


def question_for(command: str, workspace: Path) -> AskRequest:
    """The question a call of `command` asks on @shell (denied: nothing runs)."""
    asker = RecordingAsker()
    with (
        Runtime(workspace, asker=asker, audit_log=None, bindings=ON_HOST) as runtime,
        runtime.session() as session,
    ):
        session.call("run_command", {"command": command})
    return asker.requests[0]


@pytest.fixture
def hijacked(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace `.venv/bin` first on PATH, holding a `git` a sandbox wrote."""
    marker = tmp_path / "ran"
    plant(project / ".venv" / "bin" / "git", marker)
    monkeypatch.setenv("PATH", f"{project / '.venv' / 'bin'}:{os.environ['PATH']}")
    return marker


def test_a_program_found_in_the_workspace_is_keyed_by_its_path(
    project: Path, hijacked: Path
) -> None:
    found = key("git status", project)

    assert found.raw == "run_command:./.venv/bin/git:status"
    assert found.argv == (str(project / ".venv" / "bin" / "git"), "status")
    assert (found.subject, found.notes) == (
        "git status",
        ("git is ./.venv/bin/git, inside the workspace, which sandboxes can write",),
    )


def test_a_session_grant_for_the_program_name_does_not_run_the_planted_one(
    project: Path, hijacked: Path
) -> None:
    asker = RecordingAsker()  # denies
    with (
        Runtime(project, asker=asker, audit_log=None, bindings=ON_HOST) as runtime,
        runtime.session() as session,
    ):
        git = key("git status", project)
        session.allowlist.grant(
            RunCommand().permission(RunCommandParameters(command="git status")).key,  # type: ignore[arg-type]
            EnvironmentTag.SHELL,
        )
        outcome = session.call("run_command", {"command": "git status"})

    assert outcome.decision is not None and outcome.decision.source is Source.DENIED
    assert asker.requests[0].key == git.raw == "run_command:./.venv/bin/git:status"
    assert "inside the workspace, which sandboxes can write" in render(asker.requests[0])
    assert not hijacked.exists()


def test_decide_and_the_hooks_see_the_key_the_call_would_get(project: Path, hijacked: Path) -> None:
    # `codecoder decide` and the hooks for other agents answer from `evaluate`: a host agent
    # that runs `git status` through its own shell would find the planted git too.
    from codecoder.evaluation import evaluate

    with (
        Runtime(project, audit_log=None, bindings=ON_HOST) as runtime,
        runtime.session() as session,
    ):
        session.grant("run_command:git:status")
        verdict = evaluate(session, "run_command", {"command": "git status"})
    assert (verdict.decision, verdict.key) == ("ask", "run_command:./.venv/bin/git:status")
    assert verdict.question is not None
    assert "inside the workspace" in render(verdict.question)


def test_approved_with_its_path_shown_the_planted_program_is_what_runs(
    project: Path, hijacked: Path
) -> None:
    with Runtime(
        project, asker=RecordingAsker(Answer.ONCE), audit_log=None, bindings=ON_HOST
    ) as runtime:
        outcome = runtime.session().call("run_command", {"command": "git status"})

    assert outcome.result is not None and "planted-git-ran" in outcome.result.output
    assert hijacked.read_text() == "planted\n"


def test_what_runs_is_what_was_found_at_key_time_not_a_second_lookup(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setenv("PATH", f"{project / '.venv' / 'bin'}:{os.environ['PATH']}")

    def plant_while_asking(request: AskRequest) -> Answer:
        # The key said run_command:git (the system git); a sandbox plants its own meanwhile.
        assert request.key == "run_command:git"
        plant(project / ".venv" / "bin" / "git", marker)
        return Answer.ONCE

    with Runtime(project, asker=plant_while_asking, audit_log=None, bindings=ON_HOST) as runtime:
        outcome = runtime.session().call("run_command", {"command": "git --version"})

    assert outcome.result is not None and outcome.result.output.startswith("git version")
    assert not marker.exists()


@pytest.mark.parametrize("entry", [".", "", "bin"])
def test_relative_path_entries_are_places_a_sandbox_can_write(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    plant(project / (entry or ".") / "git", tmp_path / "ran")
    monkeypatch.setenv("PATH", f"{entry}:{os.environ['PATH']}")

    found = key("git status", project)

    assert found.raw == f"run_command:./{entry + '/' if entry not in ('', '.') else ''}git:status"


def test_a_world_writable_directory_and_a_symlink_into_the_workspace_are_writable(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    plant(shared / "git", tmp_path / "ran")
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    plant(project / "tools" / "ls", tmp_path / "ran")
    (trusted / "ls").symlink_to(project / "tools" / "ls")
    monkeypatch.setenv("PATH", f"{shared}:{trusted}:{os.environ['PATH']}")

    assert key("git status", project).raw == f"run_command:{shared / 'git'}:status"
    linked = key("ls -l", project)
    assert linked.raw == f"run_command:{trusted / 'ls'}"
    (note,) = linked.notes
    assert "a symlink to" in note and "inside the workspace" in note


def test_a_program_in_a_directory_no_sandbox_writes_keeps_its_name(project: Path) -> None:
    found = key("git status", project)

    assert found.raw == "run_command:git:status"
    assert found.argv == (REAL_GIT, "status")
    assert not sandbox_writable(Path(str(REAL_GIT)), project)


def test_in_a_sandbox_the_host_path_means_nothing(project: Path, hijacked: Path) -> None:
    found = key("git status", project, EnvironmentTag.DOCKER)

    assert (found.raw, found.argv) == ("run_command:git:status", ("git", "status"))


def test_compound_commands_find_no_program_a_sandbox_wrote(project: Path, hijacked: Path) -> None:
    with Runtime(
        project, asker=RecordingAsker(Answer.ONCE), audit_log=None, bindings=ON_HOST
    ) as runtime:
        outcome = runtime.session().call("run_command", {"command": "git --version && echo ok"})

    assert outcome.result is not None
    assert outcome.result.output.startswith("git version") and "ok" in outcome.result.output
    assert not hijacked.exists()
    assert str(project) not in host_path(project)


def test_a_program_named_nowhere_on_path_keeps_its_name(project: Path) -> None:
    assert locate("no-such-program-here", project).path is None
    assert key("no-such-program-here x", project).raw == "run_command:no-such-program-here:x"


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("npm test", "package.json's scripts"),
        ("make -j4", "the recipes of the makefile in the workspace"),
        ("pytest -q tests/test_x.py", "conftest.py, the tests"),
        ("cargo build --release", "build.rs"),
        ("python3 tool.py", "the script it is given"),
        ("mytool build", "whatever mytool reads there (the table does not know it)"),
    ],
)
def test_on_the_host_the_question_says_what_workspace_code_a_grant_runs(
    project: Path, command: str, said: str
) -> None:
    # A sandboxed tool may have written package.json, the Makefile or conftest.py: a grant for
    # `npm test` on the host is a grant for whatever they hold when it runs.
    found = key(command, project)
    assert found.subject == command
    (note,) = found.notes
    assert note.startswith(f"runs code from the workspace: {said}")
    assert note.endswith(
        "whatever may write the workspace, sandboxed tools included, can change it"
    )
    assert f"  note         {note}" in render(question_for(command, project))
    for sandbox in (EnvironmentTag.DOCKER, EnvironmentTag.BWRAP):
        contained = key(command, project, sandbox)
        assert contained.subject == command
        # contained, the workspace's code runs where it can reach nothing of the host's (a
        # note may still say what the command reaches through the egress proxy)
        assert not [n for n in contained.notes if n.startswith("runs code from the workspace")]


@pytest.mark.parametrize("command", ["ls -la src", "git log --oneline -n 5", "grep -rn foo src"])
def test_programs_that_run_no_workspace_code_say_nothing_more(project: Path, command: str) -> None:
    assert (key(command, project).subject, key(command, project).notes) == (command, ())
