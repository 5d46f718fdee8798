"""The project a command works on is found as git finds its repository: agents `cd`, and the
project's rules must follow them into every subdirectory, on every surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.discovery import FoundBy, ProjectPlace, find_project
from tests.conftest import write_config

REPO = Path(__file__).resolve().parents[3]
DENY_TOUCH = {"deny": ["run_command:touch"]}


def codecoder(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_the_nearest_codecoder_json_upward_is_the_project(project: Path) -> None:
    deep = project / "src" / "pkg" / "deep"
    deep.mkdir(parents=True)
    write_config(project, DENY_TOUCH)
    (project / ".git").mkdir()
    assert find_project(deep) == ProjectPlace(project, FoundBy.PROJECT_FILE)
    # A nested project (a package of a monorepo with its own file) is nearer.
    write_config(project / "src" / "pkg", {})
    assert find_project(deep) == ProjectPlace(project / "src" / "pkg", FoundBy.PROJECT_FILE)
    assert find_project(project) == ProjectPlace(project, FoundBy.PROJECT_FILE)


def test_a_directory_named_codecoder_json_is_not_a_project_file(project: Path) -> None:
    (project / "sub" / "codecoder.json").mkdir(parents=True)
    assert find_project(project / "sub").found_by is FoundBy.WORKING_DIRECTORY


def git_init(directory: Path, *options: str) -> Path:
    """A real repository made by git (its .git directory, or the directory itself if bare)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", *options, str(directory)], check=True)
    return directory if "--bare" in options else directory / ".git"


@pytest.mark.parametrize("git", ["directory", "gitdir file", "symlink"])
def test_without_a_codecoder_json_the_repository_top_level_is_the_project(
    project: Path, git: str
) -> None:
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    if git == "directory":
        git_init(project)
    elif git == "gitdir file":
        elsewhere = git_init(project.parent / "elsewhere")
        (project / ".git").write_text(f"gitdir: {os.path.relpath(elsewhere, project)}\n")
    else:
        (project / ".git").symlink_to(git_init(project.parent / "elsewhere"))
    assert find_project(deep) == ProjectPlace(project, FoundBy.REPOSITORY)


def test_an_empty_git_directory_above_is_no_repository(tmp_path: Path) -> None:
    # 32.9: something had made an empty /tmp/.git, and every project under /tmp resolved to
    # /tmp (a contained command there would have had all of /tmp as its workspace).
    (tmp_path / ".git").mkdir()
    deep = tmp_path / "project" / "src"
    deep.mkdir(parents=True)
    assert find_project(deep) == ProjectPlace(deep, FoundBy.WORKING_DIRECTORY)
    checked = json.loads(codecoder("check", "--json", cwd=deep).stdout)
    assert (checked["project"], checked["found_by"]) == (
        str(deep),
        FoundBy.WORKING_DIRECTORY.value,
    )


def make_layout(top: Path, layout: str) -> None:
    """`top` (inside a real repository `top.parent`) made into one of the shapes a `.git` can
    take, valid or not."""
    top.mkdir()
    dotgit = top / ".git"
    if layout == "git init":
        git_init(top)
    elif layout == "an empty .git directory":
        dotgit.mkdir()
    elif layout.startswith("a .git directory with "):
        dotgit.mkdir()
        for name in layout.removeprefix("a .git directory with ").split(" and "):
            if name in ("objects", "refs"):
                (dotgit / name).mkdir()
            elif name == "a symbolic HEAD":
                (dotgit / "HEAD").write_text("ref: refs/heads/main\n")
            elif name == "a spaced symbolic HEAD":
                (dotgit / "HEAD").write_text("ref:\t refs/heads/main")
            elif name == "a detached HEAD":
                (dotgit / "HEAD").write_text("0123456789abcdef0123456789ABCDEF01234567\n")
            elif name == "a short HEAD":
                (dotgit / "HEAD").write_text("0123456789abcdef\n")
            elif name == "a HEAD outside refs":
                (dotgit / "HEAD").write_text("ref: heads/main\n")
            elif name == "a HEAD link into refs":
                (dotgit / "HEAD").symlink_to("refs/heads/main")
            elif name == "a HEAD link elsewhere":
                (dotgit / "HEAD").symlink_to("/etc/hostname")
            elif name == "a HEAD directory":
                (dotgit / "HEAD").mkdir()
            else:
                raise AssertionError(name)
    elif layout == "a .git file naming a repository":
        named = git_init(top.parent / "named")
        dotgit.write_text(f"gitdir: {os.path.relpath(named, top)}\n")
    elif layout == "a .git file naming an empty directory":
        (top.parent / "empty").mkdir()
        dotgit.write_text("gitdir: ../empty\n")
    elif layout == "a .git file naming nothing":
        dotgit.write_text("gitdir: \n")
    elif layout == "a .git file without gitdir":
        dotgit.write_text("not a gitfile\n")
    elif layout == "a .git link to a repository":
        dotgit.symlink_to(git_init(top.parent / "named"))
    elif layout == "a .git link to nowhere":
        dotgit.symlink_to(top.parent / "nowhere")
    elif layout == "a linked worktree":
        main = git_init(top.parent / "main").parent
        subprocess.run(
            ["git", "-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"],
            check=True,
            env={**os.environ, **COMMITTER},
        )
        top.rmdir()
        subprocess.run(["git", "-C", str(main), "worktree", "add", "-q", str(top)], check=True)
    elif layout == "a bare repository":
        top.rmdir()
        git_init(top, "--bare")
    elif layout == "core.bare set":
        git_init(top)
        subprocess.run(["git", "-C", str(top), "config", "core.bare", "true"], check=True)
    elif layout == "core.worktree elsewhere":
        git_init(top)
        (top.parent / "tree").mkdir()
        worktree = str(top.parent / "tree")
        subprocess.run(["git", "-C", str(top), "config", "core.worktree", worktree], check=True)
    else:
        raise AssertionError(layout)


COMMITTER = {
    "GIT_AUTHOR_NAME": "T",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "T",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
LAYOUTS = [
    "git init",
    "an empty .git directory",
    "a .git directory with objects and refs",
    "a .git directory with a symbolic HEAD",
    "a .git directory with a symbolic HEAD and objects",
    "a .git directory with a symbolic HEAD and objects and refs",
    "a .git directory with a spaced symbolic HEAD and objects and refs",
    "a .git directory with a detached HEAD and objects and refs",
    "a .git directory with a short HEAD and objects and refs",
    "a .git directory with a HEAD outside refs and objects and refs",
    "a .git directory with a HEAD link into refs and objects and refs",
    "a .git directory with a HEAD link elsewhere and objects and refs",
    "a .git directory with a HEAD directory and objects and refs",
    "a .git file naming a repository",
    "a .git file naming an empty directory",
    "a .git file naming nothing",
    "a .git file without gitdir",
    "a .git link to a repository",
    "a .git link to nowhere",
    "a linked worktree",
    "a bare repository",
    "core.bare set",
    "core.worktree elsewhere",
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_repository_is_the_one_git_finds_never_a_wider_one(tmp_path: Path, layout: str) -> None:
    # Inside an outer repository, so that a .git passed over shows by finding the outer one.
    outer = git_init(tmp_path / "outer").parent
    top = outer / "top"
    make_layout(top, layout)
    start = top / "a" / "b"
    start.mkdir(parents=True)
    environ = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"):
        environ.pop(name, None)
    by_git = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=start,
        env=environ,
        capture_output=True,
        text=True,
    )
    found = find_project(start, environ=environ)
    toplevel = Path(by_git.stdout.strip()) if by_git.returncode == 0 else None
    if toplevel is not None and (toplevel == start or toplevel in start.parents):
        assert found == ProjectPlace(toplevel, FoundBy.REPOSITORY), by_git
    else:
        # git finds no repository, stops with an error, or works on a tree elsewhere (which
        # would make the project wider than where the command runs): no repository.
        assert found == ProjectPlace(start, FoundBy.WORKING_DIRECTORY), by_git


def test_discovery_stops_below_a_ceiling_for_codecoder_json_too(tmp_path: Path) -> None:
    outer = git_init(tmp_path / "outer").parent
    write_config(outer, DENY_TOUCH)
    start = outer / "inner" / "src"
    start.mkdir(parents=True)
    ceiling = {"GIT_CEILING_DIRECTORIES": f"/nonexistent:{outer / 'inner'}"}
    assert find_project(start, environ={}) == ProjectPlace(outer, FoundBy.PROJECT_FILE)
    assert find_project(start, environ=ceiling) == ProjectPlace(start, FoundBy.WORKING_DIRECTORY)
    # The ceiling itself is never looked at; what is below it is.
    write_config(outer / "inner", {})
    assert find_project(start, environ=ceiling).found_by is FoundBy.WORKING_DIRECTORY
    assert find_project(outer / "inner", environ=ceiling).found_by is FoundBy.PROJECT_FILE


@pytest.mark.parametrize("variable", ["GIT_DIR", "GIT_WORK_TREE"])
def test_with_git_told_where_the_repository_is_none_is_searched(
    tmp_path: Path, variable: str
) -> None:
    top = git_init(tmp_path / "top").parent
    start = top / "src"
    start.mkdir()
    environ = {variable: "/"}
    assert find_project(start, environ=environ) == ProjectPlace(start, FoundBy.WORKING_DIRECTORY)


def test_without_either_the_working_directory_is_the_project(project: Path) -> None:
    (project / "x").mkdir()
    assert find_project(project / "x") == ProjectPlace(project / "x", FoundBy.WORKING_DIRECTORY)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_codecoder_json_in_a_directory_of_another_user_is_passed_over(project: Path) -> None:
    # /tmp, or a shared parent, whose owner would otherwise choose the rules and the workspace.
    shared = project / "shared"
    mine = shared / "mine"
    mine.mkdir(parents=True)
    write_config(shared, {})
    os.chown(shared, 65534, 65534)
    found = find_project(mine)
    assert found == ProjectPlace(mine, FoundBy.WORKING_DIRECTORY, (shared / "codecoder.json",))
    assert "owned by another user" in found.describe()
    (shared / ".git").mkdir()
    assert find_project(mine).found_by is FoundBy.WORKING_DIRECTORY


# --- every surface, from a subdirectory ----------------------------------------------------------


@pytest.fixture
def deep(project: Path) -> Path:
    write_config(project, DENY_TOUCH)
    directory = project / "src" / "deep"
    directory.mkdir(parents=True)
    return directory


def test_decide_and_call_from_a_subdirectory_meet_the_projects_deny_rule(
    project: Path, deep: Path
) -> None:
    decided = codecoder("decide", "run_command", '{"command": "touch M"}', "--json", cwd=deep)
    assert decided.returncode == 3
    verdict = json.loads(decided.stdout)
    assert (verdict["decision"], verdict["matched"]) == ("deny", "run_command:touch")
    called = codecoder(
        "call",
        "run_command",
        '{"command": "touch M"}',
        "--allow",
        "run_command:touch",
        "--non-interactive",
        cwd=deep,
    )
    assert called.returncode == 3
    assert "deny rule 'run_command:touch'" in called.stderr
    assert not (deep / "M").exists() and not (project / "M").exists()


def test_project_overrides_what_is_found(project: Path, deep: Path) -> None:
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir()
    proc = codecoder(
        "decide", "run_command", '{"command": "touch M"}', "--project", str(elsewhere), cwd=deep
    )
    assert proc.returncode == 4  # asked: that project has no deny rule


def hook_event(host: str, cwd: Path, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "cwd": str(cwd),
        "hook_event_name": "PreToolUse" if host == "claude-code" else "BeforeTool",
        "tool_name": "Bash" if host == "claude-code" else "run_shell_command",
        "tool_input": tool_input,
        "tool_use_id": "t1",
    }


@pytest.mark.parametrize("host", ["claude-code", "gemini"])
def test_hooks_find_the_project_from_the_cwd_the_host_sends(
    project: Path, deep: Path, host: str
) -> None:
    event = hook_event(host, deep, {"command": "touch M"})
    # Run from elsewhere: only the event says where the agent is.
    proc = codecoder(
        "hook", host, "--allow", "run_command:touch", cwd=REPO, stdin=json.dumps(event)
    )
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    verdict = answer["hookSpecificOutput"] if host == "claude-code" else answer
    decision = verdict.get("permissionDecision") or verdict.get("decision")
    reason = verdict.get("permissionDecisionReason") or verdict.get("reason")
    assert decision == "deny"
    assert "deny rule 'run_command:touch'" in reason


@pytest.mark.parametrize("cwd", ["relative/path", "/does/not/exist", 7])
def test_a_hook_with_an_unusable_cwd_starts_from_its_own_directory(
    project: Path, deep: Path, cwd: object
) -> None:
    event = {**hook_event("claude-code", deep, {"command": "touch M"}), "cwd": cwd}
    proc = codecoder("hook", "claude-code", cwd=deep, stdin=json.dumps(event))
    answer = json.loads(proc.stdout)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"


def test_check_says_which_project_and_never_ok_for_a_file_that_is_not_there(
    project: Path, deep: Path
) -> None:
    found = codecoder("check", cwd=deep)
    assert found.returncode == 0
    assert found.stdout.splitlines()[-1] == f"{project / 'codecoder.json'}: ok"
    assert "deny            run_command:touch" in found.stdout
    as_json = json.loads(codecoder("check", "--json", cwd=deep).stdout)
    assert (as_json["project"], as_json["found_by"], as_json["exists"]) == (
        str(project),
        FoundBy.PROJECT_FILE.value,
        True,
    )
    alone = project.parent / "alone" / "sub"
    alone.mkdir(parents=True)
    git_init(alone.parent)
    none = codecoder("check", cwd=alone)
    assert none.returncode == 0
    last = none.stdout.splitlines()[-1]
    assert last == f"no codecoder.json in {alone.parent} ({FoundBy.REPOSITORY.value})"
    assert ": ok" not in none.stdout
