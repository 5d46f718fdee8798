"""Protected paths as a whole, at every depth, before they exist (issue 33, classes 2 and 3), with
real bubblewrap and real git; every check is of the host's files after (or during) the call.

- A git directory is protected as an entry, not only its contents: `mv .git .git-old` left the
  project without a repository, the next call rewrote `.git-old/hooks`, and the human's repair
  (`mv .git-old .git`) made the next host commit run the planted hook.
- The agents' settings below the top (`pkg/.claude/settings.json`, `pkg/.mcp.json`, ...) were
  rewritten by one contained command while the write tools protected them: one definition.
- A protected name that does not exist yet never appears on the host with a sandbox's content,
  not even while the call runs (`.mcp.json` sat there about 3 s before the quarantine).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.placeholders import PLACEHOLDERS, Placeholders, is_placeholder
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.protected import is_protected_path
from tests.environments.bwrap_support import bwrap, git, need_bwrap, repo, run, tree

__all__ = ["bwrap", "repo"]  # fixtures

MOVES = [
    "mv .git .git-old",
    "mv -T .git .git-old",
    "python3 -c \"import os; os.rename('.git', '.git-old')\"",
    "mkdir other && mv -T other .git",  # something else renamed over it
    "mv vendor/lib/.git vendor/lib/.git-old",
    "mv sub/.git sub/.git-old",  # a `gitdir:` file
]


@pytest.fixture
def nested(repo: Path) -> Path:
    """`repo` with a nested repository (vendor/lib) and a `gitdir:` file (sub/.git) whose
    repository lies outside the workspace."""
    (repo / "vendor" / "lib").mkdir(parents=True)
    git(repo / "vendor" / "lib", "init", "-q", "-b", "main")
    outside = repo.parent / "sub-git"
    (repo / "sub").mkdir()
    git(repo.parent, "init", "-q", "--separate-git-dir", str(outside), str(repo / "sub"))
    return repo


@pytest.mark.parametrize("move", MOVES)
def test_a_git_directory_cannot_be_moved_aside_or_replaced(
    bwrap: BwrapEnvironment, nested: Path, move: str
) -> None:
    before = {
        name: os.lstat(nested / name).st_ino for name in (".git", "vendor/lib/.git", "sub/.git")
    }
    hooks = tree(nested / ".git" / "hooks")
    said = run(bwrap, f"{move}; echo 'echo planted' > .git-old/hooks/pre-commit; true")
    after = {name: os.lstat(nested / name).st_ino for name in before}
    assert after == before, said.stderr
    assert not (nested / ".git-old").exists()
    assert not (nested / "vendor" / "lib" / ".git-old").exists()
    assert tree(nested / ".git" / "hooks") == hooks
    assert git(nested, "log", "--format=%s") == "first\n"  # the repository is whole


def test_the_control_the_same_move_on_the_host_works(nested: Path) -> None:
    """What the attack did before: a mount is what stops it, not the file system."""
    os.rename(nested / ".git", nested / ".git-old")
    assert not (nested / ".git").exists()


def test_git_still_commits_branches_stashes_and_gcs_in_a_pinned_git_directory(
    bwrap: BwrapEnvironment, nested: Path
) -> None:
    said = run(
        bwrap,
        """set -e
echo more >> README.md && git commit -qam second
git checkout -qb topic && echo t > t.txt && git add t.txt && git commit -qm third
echo dirty >> README.md && git stash -q && git stash pop -q && git checkout -q README.md
git checkout -q main && git merge -q --no-edit topic && git tag v1 && git gc -q
git -C vendor/lib commit -q --allow-empty -m nested
git -C sub commit -q --allow-empty -m linked
git log --format=%s | head -3""",
    )
    assert said.exit_code == 0, said.stderr
    assert said.stdout == "third\nsecond\nfirst\n"
    assert git(nested, "tag") == "v1\n"


SETTINGS = {
    "pkg/.claude/settings.json": '{"permissions": {}}\n',
    "pkg/.mcp.json": '{"mcpServers": {}}\n',
    "pkg/.vscode/tasks.json": '{"tasks": []}\n',
    "pkg/.gemini/settings.json": "{}\n",
    "pkg/.codex/config.toml": "model = 'x'\n",
    "a/b/c/.claude/settings.local.json": "{}\n",
}
REWRITES = [
    'for f in {files}; do echo \'{{"hooks": "planted"}}\' > $f; done',
    "for f in {files}; do echo planted > /tmp/x; mv -f /tmp/x $f; cp /tmp/x $f; done",
    "for f in {files}; do rm -rf $(dirname $f); mkdir -p $(dirname $f); echo planted > $f; done",
    "for f in {files}; do d=$(dirname $f); mv $d $d-old; mkdir -p $d; echo planted > $f; done",
    "sed -i s/./planted/ {files}",
]


@pytest.mark.parametrize("rewrite", REWRITES)
def test_agent_settings_below_the_top_cannot_be_rewritten(
    bwrap: BwrapEnvironment, repo: Path, rewrite: str
) -> None:
    for name, content in SETTINGS.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    script = rewrite.format(files=" ".join(SETTINGS)) + "; true"
    try:
        run(bwrap, script)
    except ExecutionFailed as exc:
        assert "Quarantined" in str(exc)  # a moved directory is put away, never left planted
    for name, content in SETTINGS.items():
        # Kept, or (its parent renamed and the name made again) the new one quarantined.
        assert not (repo / name).exists() or (repo / name).read_text() == content, name
    assert not [p for p in repo.rglob("*") if p.is_file() and b"planted" in p.read_bytes()]


@pytest.mark.parametrize(
    ("relative", "protected"),
    [
        (".claude/settings.json", True),
        ("pkg/.claude/settings.json", True),
        ("a/b/.vscode/tasks.json", True),
        ("pkg/.mcp.json", True),
        ("pkg/.codex/config.toml", True),
        ("pkg/.gemini/settings.json", True),
        ("node_modules/dep/.vscode/settings.json", False),
        ("pkg/node_modules/dep/.claude/settings.json", False),
        ("docs/claude/settings.json", False),
        ("pkg/mcp.json", False),
    ],
)
def test_the_sandbox_protects_exactly_what_the_write_tools_protect(
    bwrap: BwrapEnvironment, repo: Path, relative: str, protected: bool
) -> None:
    """One definition (`foundation.protected.is_protected_path`) for every environment."""
    assert is_protected_path(relative) is protected
    (repo / relative).parent.mkdir(parents=True, exist_ok=True)
    (repo / relative).write_text("original\n")
    run(bwrap, f"echo changed > {relative}; true")
    assert ((repo / relative).read_text() == "original\n") is protected


def test_rm_rf_node_modules_still_works_with_settings_inside(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    (repo / "node_modules" / "dep" / ".vscode").mkdir(parents=True)
    (repo / "node_modules" / "dep" / ".vscode" / "settings.json").write_text("{}\n")
    said = run(bwrap, "rm -rf node_modules && echo gone")
    assert (said.exit_code, said.stdout) == (0, "gone\n")
    assert not (repo / "node_modules").exists()


def test_a_new_package_with_its_own_settings_is_ordinary_work_and_protected_next_time(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    """A generator's new package (`npm create vite app` makes app/.vscode/) may be made; the
    next call keeps it read-only."""
    made = run(bwrap, "mkdir -p app/.vscode && echo '{}' > app/.vscode/extensions.json")
    assert made.exit_code == 0, made.stderr
    run(bwrap, "echo planted > app/.vscode/extensions.json; true")
    assert (repo / "app" / ".vscode" / "extensions.json").read_text() == "{}\n"


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    """A workspace without any protected path: every name a placeholder is for is missing."""
    root = tmp_path / "plain"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    return root


def test_a_missing_protected_name_never_appears_on_the_host_even_during_the_call(
    bare: Path,
) -> None:
    need_bwrap()
    env = BwrapEnvironment(bare, warm=False)
    seen: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for path in bare.rglob("*"):
                try:
                    if path.is_file() and "planted" in path.read_text():
                        seen.append(str(path.relative_to(bare)))
                except OSError:
                    continue
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    script = """
echo '{"mcpServers": {"x": {"command": "planted"}}}' > .mcp.json
mkdir -p .claude .vscode .gemini .codex .codecoder .git/hooks
echo planted > .claude/settings.json; echo planted > .vscode/tasks.json
echo planted > .gemini/settings.json; echo planted > .codex/config.toml
echo planted > .git/hooks/pre-commit; echo planted > .codecoder/x
git init -q 2>/dev/null; sleep 1; true"""
    try:
        said = env.run(CommandRequest(cwd=bare, script=script, writable=True, timeout=30))
        during = sorted(str(p.relative_to(bare)) for p in bare.iterdir() if p.name != "README.md")
        mcp = os.listdir(bare / ".mcp.json")
    finally:
        stop.set()
        watcher.join()
        env.close()
    assert said.exit_code == 0
    assert seen == []
    assert during == sorted(PLACEHOLDERS)  # inert: empty directories
    assert mcp == []
    assert not [p for p in bare.rglob("*") if p.is_dir() and any(p.iterdir())]
    assert sorted(p.name for p in bare.iterdir()) == ["README.md"]  # gone with the environment


def test_placeholders_stay_while_another_process_uses_them_and_a_filled_one_stays(
    bare: Path,
) -> None:
    first = Placeholders(bare)
    made = first.hold()
    assert sorted(p.name for p in made) == sorted(PLACEHOLDERS)
    assert is_placeholder(bare, ".claude")
    assert os.listdir(bare / ".mcp.json") == []
    data = json.loads(first.record.read_text())
    data["holders"].append(1)  # init: a process that is alive and uses them too
    first.record.write_text(json.dumps(data))
    first.release()
    assert sorted(p.name for p in bare.iterdir() if p.name != "README.md") == sorted(PLACEHOLDERS)
    second = Placeholders(bare)
    second.hold()
    data = json.loads(second.record.read_text())
    data["holders"] = [os.getpid()]
    second.record.write_text(json.dumps(data))
    (bare / ".claude" / "settings.local.json").write_text("{}\n")  # the human's, meanwhile
    second.release()
    assert sorted(p.name for p in bare.iterdir()) == [".claude", "README.md"]
    assert not is_placeholder(bare, ".claude")
