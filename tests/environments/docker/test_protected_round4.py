"""@docker against issue 33's classes 2 and 3, as @bwrap holds them
(tests/environments/test_bwrap_protected_paths.py): the repository moved aside, an agent's
settings below the top replaced by moving their package aside, and a protected name that does
not exist yet created at the top while the call runs. Each is checked by what the host's
workspace holds, during and after the call, in bind and sync mode, with a control where it
matters (the same thing done by the host works).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.placeholders import PLACEHOLDERS
from codecoder.foundation.errors import ExecutionFailed
from tests.environments.conftest import SANDBOX_IMAGE

pytestmark = pytest.mark.docker

MODES = ["bind", "sync"]


def chown_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        os.chown(directory, 10001, 10001)
        for name in files:
            os.chown(os.path.join(directory, name), 10001, 10001)


@pytest.fixture
def project(workspace: Path) -> Path:
    """A repository with a package whose agents have settings of their own."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "pkg" / ".claude").mkdir(parents=True)
    (workspace / "pkg" / ".claude" / "settings.json").write_text('{"human": true}\n')
    (workspace / "pkg" / ".mcp.json").write_text("{}\n")
    (workspace / "pkg" / "index.js").write_text("1\n")
    chown_tree(workspace)
    return workspace


@pytest.fixture(params=MODES)
def sandbox(project: Path, request: pytest.FixtureRequest) -> Iterator[DockerEnvironment]:
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace=request.param)
    with DockerEnvironment(project, settings) as env:
        yield env


def run(env: DockerEnvironment, script: str) -> CommandResult | ExecutionFailed:
    try:
        return env.run(CommandRequest(cwd=env.workspace, script=script, writable=True, timeout=60))
    except ExecutionFailed as failed:
        return failed


# --- 2. the repository moved aside --------------------------------------------------------------

MOVES = {
    "mv": "mv .git .git-old",
    "mv-into": "mkdir -p old && mv .git old/",
    "python-rename": "/usr/bin/python3 -c \"import os; os.rename('.git', '.git-old')\"",
    "rename-exchange": 'mkdir -p x && /usr/bin/python3 -c "import ctypes; '
    "print(ctypes.CDLL(None).renameat2(-100, b'.git', -100, b'x', 2))\"",
    "copy-and-remove": "cp -a .git .git-old && rm -rf .git",
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_git_directory_cannot_be_moved_aside(
    sandbox: DockerEnvironment, project: Path, move: str
) -> None:
    """Held before this round (a regression test): in bind mode `.git` is a mount point (EBUSY),
    in sync mode the copy-back refuses a call that moved it."""
    git = project / ".git"
    before = git.stat().st_ino
    run(sandbox, MOVES[move] + "; true")
    assert git.is_dir() and git.stat().st_ino == before
    assert (git / "HEAD").is_file() and (git / "config").is_file()
    if move != "copy-and-remove":  # a copy is a copy; the repository itself stays
        assert not (project / ".git-old").exists()
    assert not (project / "old" / ".git").exists()


def test_the_control_the_same_move_on_the_host_works(project: Path) -> None:
    (project / ".git").rename(project / ".git-old")
    assert (project / ".git-old" / "HEAD").is_file()


# --- 3. agent settings below the top, names that do not exist yet -------------------------------

REPLACEMENTS = {
    "mv-and-remake": "mv pkg pkg2 && mkdir -p pkg/.claude && "
    "echo planted > pkg/.claude/settings.json",
    "remove-and-remake": "cp -a pkg /tmp/p && rm -rf pkg 2>/dev/null; mkdir -p pkg/.claude && "
    "echo planted > pkg/.claude/settings.json",
    "mcp-json": "mv pkg pkg2 && mkdir pkg && echo planted > pkg/.mcp.json",
}


@pytest.mark.parametrize("how", sorted(REPLACEMENTS))
def test_a_packages_agent_settings_cannot_be_replaced(
    sandbox: DockerEnvironment, project: Path, how: str
) -> None:
    said = run(sandbox, REPLACEMENTS[how])
    for path in ("pkg/.claude/settings.json", "pkg/.mcp.json"):
        target = project / path
        if target.is_file():
            assert "planted" not in target.read_text(), path
    if how != "remove-and-remake" and not sandbox.sync:
        # Bind mode: the call fails and says what it replaced (in sync mode, the copy-back
        # leaves protected paths in the sandbox and says so; `rm -rf` cannot remove a mount).
        assert isinstance(said, ExecutionFailed)
        assert "moved aside or replaced pkg/" in str(said)


def test_the_control_the_same_replacement_on_the_host_plants(project: Path) -> None:
    subprocess.run(["sh", "-c", REPLACEMENTS["mv-and-remake"]], cwd=project, check=True)
    assert (project / "pkg/.claude/settings.json").read_text() == "planted\n"


def test_a_new_package_with_settings_is_ordinary_work_in_bind_mode(project: Path) -> None:
    """A generator's new package (`app/.vscode/`) is not a plant: the next call keeps it
    read-only (foundation.protected.is_protected_entry). In sync mode no protected path comes
    back from the sandbox at all (environments.docker.copyback)."""
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace="bind")
    with DockerEnvironment(project, settings) as env:
        said = run(env, "mkdir -p app/.vscode && echo '{}' > app/.vscode/settings.json")
        assert isinstance(said, CommandResult) and said.exit_code == 0
        again = run(env, "echo planted > app/.vscode/settings.json")
        assert isinstance(again, CommandResult) and again.exit_code != 0
    assert (project / "app/.vscode/settings.json").read_text() == "{}\n"


CREATE_AT_TOP = (
    "mkdir -p .claude 2>/dev/null; echo planted > .claude/settings.json 2>/dev/null; "
    "echo planted > .mcp.json 2>/dev/null; mkdir -p .vscode 2>/dev/null; "
    "echo planted > .vscode/tasks.json 2>/dev/null; sleep 3; true"
)


def _planted_at_top(root: Path) -> list[str]:
    found = []
    for path in (".mcp.json", ".claude/settings.json", ".vscode/tasks.json"):
        try:
            if "planted" in (root / path).read_text():
                found.append(path)
        except OSError:
            continue
    return found


def test_a_missing_agent_setting_never_appears_on_the_host_even_during_the_call(
    sandbox: DockerEnvironment, project: Path
) -> None:
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.extend(_planted_at_top(project))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run(sandbox, CREATE_AT_TOP)
    finally:
        stop.set()
        watcher.join()
    assert seen == []
    assert _planted_at_top(project) == []


def test_the_placeholders_go_with_the_environment_and_a_humans_file_stays(project: Path) -> None:
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace="bind")
    with DockerEnvironment(project, settings) as env:
        run(env, "true")
        made = [name for name in PLACEHOLDERS if (project / name).is_dir()]
        assert ".mcp.json" in made and ".claude" in made
        assert not any(os.listdir(project / name) for name in made if name != ".git")
        shutil.rmtree(project / ".vscode")  # the human's own, made while the sandbox lives
        (project / ".vscode").mkdir()
        (project / ".vscode" / "tasks.json").write_text("{}\n")
    assert not (project / ".mcp.json").exists()
    assert not (project / ".claude").exists()
    assert (project / ".vscode" / "tasks.json").read_text() == "{}\n"


def test_git_init_in_a_workspace_without_a_repository_says_what_to_do(workspace: Path) -> None:
    """Its `.git` is the runtime's read-only placeholder: the call fails saying why, with the
    way to do it (on the host), and the placeholder stays inert."""
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace="bind")
    with DockerEnvironment(workspace, settings) as env:
        said = run(env, "git init -q .")
        assert isinstance(said, ExecutionFailed)
        assert "a sandbox may not create its .git" in str(said)
        assert "cannot be made in a sandbox" in str(said)
        assert os.listdir(workspace / ".git") == []
    assert not (workspace / ".git").exists()
