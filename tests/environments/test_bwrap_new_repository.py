"""`git init` and `git clone` in @bwrap (real bubblewrap): the `.git` they create holds a config
and hooks, protected paths no sandbox may create, so the call fails and its repository is
quarantined. The question offers the host beforehand, and the failure says why and what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import ExecutionFailed
from codecoder.session import Runtime
from tests.conftest import RecordingAsker
from tests.environments.bwrap_support import git, need_bwrap

HINT = (
    "A new git repository (`git init`, `git clone`) cannot be made in a sandbox: its "
    ".git/config and .git/hooks are protected paths, which only the host may create. Run the "
    'command on the host: choose an "on the host" answer when its question offers one, or bind '
    'run_command to @shell in codecoder.json ("environments": {"run_command": "@shell"})'
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    return root


@pytest.fixture
def upstream(workspace: Path) -> Path:
    """A repository on this machine to clone (in the workspace: a contained command has a
    private /tmp, where pytest's directories are)."""
    root = workspace / "upstream"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "a")
    return root


def call(project: Path, command: str, asker: Any) -> Any:
    with Runtime(project, asker=asker, audit_log=None) as runtime, runtime.session() as s:
        assert runtime.environment_of("run_command") is EnvironmentTag.BWRAP
        return s.call("run_command", {"command": command})


@pytest.mark.parametrize(
    ("command", "made", "why"),
    [
        ("git init -q sub", "sub", "git init creates a repository"),
        ("git init -q", ".", "git init creates a repository"),
        ("mkdir app && cd app && git init -q", "app", "git init creates a repository"),
        ("git clone -q {upstream} copy", "copy", "git clone creates a repository"),
    ],
)
def test_a_new_repository_made_contained_fails_saying_why_and_what_to_do(
    workspace: Path, upstream: Path, command: str, made: str, why: str
) -> None:
    need_bwrap()
    asker = RecordingAsker(Answer.ONCE)  # the human keeps it contained
    outcome = call(workspace, command.format(upstream=upstream), asker)
    (asked,) = asker.requests
    # The question offered the host, saying why it would fail contained.
    assert asked.host_key and Answer.HOST_ONCE in asked.choices
    assert any(why in note for note in asked.notes) or why in asked.note, (asked.notes, asked.note)
    error = outcome.error
    assert isinstance(error, ExecutionFailed)
    message = str(error)
    assert message.startswith("a writable @bwrap call")
    assert message.endswith(f". {HINT}")
    assert not (workspace / made / ".git").exists()  # quarantined


def test_on_the_host_the_same_git_init_and_clone_work(workspace: Path, upstream: Path) -> None:
    need_bwrap()
    for command, made in (("git init -q sub", "sub"), (f"git clone -q {upstream} copy", "copy")):
        asker = RecordingAsker(Answer.HOST_ONCE)
        outcome = call(workspace, command, asker)
        assert outcome.decision.environment is EnvironmentTag.SHELL
        assert outcome.decision.source is Source.ONCE
        assert outcome.unwrap().output == "[exit code 0]"
        assert (workspace / made / ".git" / "config").is_file()


def test_another_protected_path_is_quarantined_without_the_repository_hint(
    workspace: Path,
) -> None:
    need_bwrap()
    outcome = call(workspace, "touch .gitmodules", RecordingAsker(Answer.ONCE))
    assert isinstance(outcome.error, ExecutionFailed)
    assert "Quarantined:" in str(outcome.error)
    assert "A new git repository" not in str(outcome.error)
