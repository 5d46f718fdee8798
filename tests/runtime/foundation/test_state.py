"""What the runtime keeps outside the workspace (the audit log), and its own directory inside it
(`.codecoder/`, ignored by git but for the capabilities and their approvals)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ConfigError
from codecoder.foundation.state import project_state_directory, workspace_directory
from codecoder.session import Runtime
from tests.conftest import RecordingAsker

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def test_the_audit_log_is_outside_the_workspace_and_private(project: Path) -> None:
    with Runtime(project, asker=RecordingAsker(Answer.ONCE)) as runtime:
        runtime.session().call("run_command", {"command": "true"})
        log = runtime.audit.path

    assert log == project_state_directory(project.resolve()) / "audit.jsonl"
    assert project.resolve() not in log.parents
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700


@needs_git
def test_git_clean_in_the_workspace_cannot_remove_the_audit_log(project: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    with Runtime(project, asker=RecordingAsker(Answer.ONCE, Answer.ONCE)) as runtime:
        session = runtime.session()
        session.call("run_command", {"command": "git clean -fdxq"})
        session.call("run_command", {"command": "true"})
        records = runtime.audit.tail()

    assert [r["key"] for r in records] == ["run_command:git:clean", "run_command:true"]


@needs_git
def test_codecoder_directory_shows_in_git_status_only_for_capabilities(project: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    directory = workspace_directory(project)
    for name in ("codecoder.json.lock", "run/serve-1.pid", "capabilities/x/capability.json"):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text("x")

    status = subprocess.run(
        ["git", "status", "--porcelain", "-uall"], cwd=project, capture_output=True, text=True
    ).stdout

    assert status == "?? .codecoder/capabilities/x/capability.json\n"


def test_the_gitignore_an_earlier_version_wrote_is_replaced(project: Path) -> None:
    (project / ".codecoder").mkdir()
    (project / ".codecoder" / ".gitignore").write_text("audit.jsonl\n*.lock\n")
    (project / ".codecoder").joinpath("x").write_text("")

    workspace_directory(project)

    assert (project / ".codecoder" / ".gitignore").read_text().splitlines()[2:] == [
        "*",
        "!capabilities/",
        "!capabilities/**",
        "!approvals/",
        "!approvals/**",
    ]
    assert os.path.exists(project / ".codecoder" / "x")


def test_a_gitignore_the_user_wrote_is_left_alone(project: Path) -> None:
    (project / ".codecoder").mkdir()
    (project / ".codecoder" / ".gitignore").write_text("mine\n")

    workspace_directory(project)

    assert (project / ".codecoder" / ".gitignore").read_text() == "mine\n"


@pytest.mark.parametrize(
    ("variable", "inside"),
    [
        ("XDG_CONFIG_HOME", ".config"),  # a project in the home directory holds both
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_STATE_HOME", "."),  # or the state directory is the project itself
    ],
)
def test_a_project_holding_the_runtimes_own_directories_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, inside: str
) -> None:
    # With the user's configuration in the workspace, a project grant for `write_file:**` (a
    # sandboxed tool) could give the user's file a read root for ~/.ssh, and a writable
    # container could write trust records.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv(variable, str(home / inside))
    with pytest.raises(ConfigError, match=f"set {variable} to a directory outside the project"):
        Runtime(home)
    monkeypatch.setenv(variable, str(home / inside / "codecoder" / "projects" / "x"))
    (home / inside / "codecoder" / "projects" / "x").mkdir(parents=True)
    with pytest.raises(ConfigError, match="overlap"):
        Runtime(home / inside / "codecoder" / "projects" / "x" / "..")
