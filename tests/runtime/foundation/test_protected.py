"""Protected paths as the host meets them: spelled out, reached through a symlink a sandbox or a
clone planted, or naming the runtime's own state, configuration and command line. Each attack
has a session grant that would cover the command if it were not protected; real git, real
@shell (run_command is bound there: in @bwrap, its default, the mounts protect these paths,
tests/environments/test_bwrap.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from codecoder.evaluation import evaluate
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.protected import mentions_runtime_directory, reaches_protected
from codecoder.foundation.state import config_directory, state_directory
from codecoder.permissions.commandkey import key_command
from codecoder.session import Runtime
from tests.conftest import RecordingAsker

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
ON_HOST = {"run_command": EnvironmentTag.SHELL}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace


def test_a_symlink_to_git_does_not_carry_a_granted_write_into_its_config(
    repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "fsmonitor-ran"
    # What a writable sandbox can leave: a link to .git (its name is not protected) and a
    # config to copy in through it.
    (repo / "g").symlink_to(".git")
    planted = (repo / ".git" / "config").read_text()
    planted += f'[core]\n\tfsmonitor = "touch {marker}; false"\n'
    (repo / "notes.txt").write_text(planted)
    asker = RecordingAsker()
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session(asker=asker) as session:
        session.grant("run_command:cp")
        session.grant("run_command:git:status")
        copied = session.call("run_command", {"command": "cp notes.txt g/config"})
        session.call("run_command", {"command": "git status --short"})

    assert copied.error is not None and copied.decision.source == "denied"
    (question,) = asker.requests
    assert question.notes == ("protected: g/config (leads to .git/config) through a symlink",)
    assert "only once" in question.note + question.why_not_project
    assert [choice.value for choice in question.choices] == ["once", "deny"]
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    assert not marker.exists()


@pytest.mark.parametrize(
    "command",
    ["cp notes.txt g/hooks/pre-commit", "cp -t g/hooks notes.txt", "sort -og/config notes.txt"],
)
def test_every_word_of_a_host_command_is_followed_when_it_is_keyed(
    repo: Path, command: str
) -> None:
    (repo / "g").symlink_to(".git")
    (repo / "notes.txt").write_text("x\n")
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session() as session:
        session.grant("run_command:cp")
        session.grant("run_command:sort")
        verdict = evaluate(session, "run_command", {"command": command})
    assert (verdict.decision, verdict.protected) == ("ask", True)


def test_a_compound_command_through_the_link_is_protected_too(repo: Path) -> None:
    (repo / "g").symlink_to(".git/hooks")
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session() as session:
        command = "cat notes.txt > x && cp x g/pre-commit"
        session.grant(key_of(command))
        verdict = evaluate(session, "run_command", {"command": command})
    assert (verdict.decision, verdict.protected) == ("ask", True)


def key_of(command: str) -> str:
    """The key a session grant for exactly this command records."""
    return key_command(command).permission_key().raw


def test_the_runtime_directories_are_protected_by_path_by_name_and_through_links(
    repo: Path,
) -> None:
    state, config = state_directory(), config_directory()
    (repo / "s").symlink_to(state)
    (repo / "c").symlink_to(config)
    commands = [
        f"rm {state}/projects/x/audit.jsonl",  # by its path
        "rm -rf ~/.local/state/codecoder",  # as people spell it
        "cp x ~/.config/codecoder/config.json",
        'cp x "$XDG_CONFIG_HOME/codecoder/config.json"',
        "rm -rf s/projects",  # through a link in the workspace
        "cp x c/config.json",
    ]
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session() as session:
        session.grant("run_command:rm")
        session.grant("run_command:cp")
        for command in commands:
            session.grant(key_of(command))
            verdict = evaluate(session, "run_command", {"command": command})
            assert (verdict.decision, verdict.protected) == ("ask", True), command


@pytest.mark.parametrize(
    "command",
    [
        "codecoder trust --yes",
        'codecoder call run_command \'{"command": "id"}\' --allow run_command:id',
        "/usr/local/bin/codecoder allowlist revoke run_command:git:push",
        "CODECODER=1 codecoder trust --yes",
    ],
)
def test_no_grant_covers_running_the_runtimes_own_command_line(repo: Path, command: str) -> None:
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session() as session:
        session.grant("run_command:codecoder")
        session.grant(key_of(command))
        verdict = evaluate(session, "run_command", {"command": command})
    assert (verdict.decision, verdict.protected) == ("ask", True)


def test_ordinary_commands_are_not_protected(repo: Path) -> None:
    (repo / "src").mkdir()
    (repo / "link").symlink_to("src")
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session() as session:
        for command in ("git status", "ls -la link", "cp a link/b", "grep -rn codecoder-x src"):
            verdict = evaluate(session, "run_command", {"command": command})
            assert not verdict.protected, command


def test_what_reaches_a_protected_path_is_said_precisely(repo: Path) -> None:
    (repo / "g").symlink_to(".git")
    assert reaches_protected(["-n", "--out=g/config"], repo) == ("g/config (leads to .git/config)")
    assert reaches_protected(["missing/.x", "-v"], repo) is None
    assert mentions_runtime_directory("tail ~/.local/state/codecoder/projects/x/audit.jsonl")
    assert not mentions_runtime_directory("pip install codecoder-runtime")
    assert os.path.isabs(str(state_directory()))


def test_a_protected_once_answer_runs_it_once(repo: Path) -> None:
    (repo / "g").symlink_to(".git")
    asker = RecordingAsker(Answer.ONCE)
    with Runtime(repo, bindings=ON_HOST) as runtime, runtime.session(asker=asker) as session:
        outcome = session.call("run_command", {"command": "ls g/hooks"})
    assert outcome.decision.source == "once"
