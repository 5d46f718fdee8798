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


@pytest.mark.parametrize("git", ["directory", "gitdir file", "symlink"])
def test_without_a_codecoder_json_the_repository_top_level_is_the_project(
    project: Path, git: str
) -> None:
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    if git == "directory":
        (project / ".git").mkdir()
    elif git == "gitdir file":
        (project / ".git").write_text("gitdir: ../elsewhere/.git\n")
    else:
        (project / ".git").symlink_to(project / "nowhere")
    assert find_project(deep) == ProjectPlace(project, FoundBy.REPOSITORY)


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
    (alone.parent / ".git").mkdir()
    none = codecoder("check", cwd=alone)
    assert none.returncode == 0
    last = none.stdout.splitlines()[-1]
    assert last == f"no codecoder.json in {alone.parent} ({FoundBy.REPOSITORY.value})"
    assert ": ok" not in none.stdout
