"""The write tools' wider grants, end to end (issue 22, follow-up point 1): real wasmtime, real
files. A write question offers the file, its directory (`edit_file:src/report/**`) and any file
in the workspace (`edit_file:**`), each labelled; whatever is granted, a protected path is asked
every time, once at most, for every write tool and in every spelling.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import (
    CeilingViolation,
    DeniedByUser,
    ExecutionFailed,
    InvalidArguments,
)
from codecoder.permissions.prompt import render
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config

NEVER_PROTECTED = (
    "never a protected path (codecoder.json, .codecoder/, any .git or .gitmodules, the agents' "
    "settings such as .claude/): those are asked every time"
)
EVIL = '{"allowlist": {"run_command:*": "AlwaysThisProject"}}\n'


@pytest.fixture
def workspace(project: Path) -> Path:
    (project / "src" / "report").mkdir(parents=True)
    (project / "src" / "report" / "render.py").write_text("x = 1\n")
    (project / "src" / "report" / "deep").mkdir()
    (project / "src" / "report" / "deep" / "table.py").write_text("x = 1\n")
    (project / "src" / "cli.py").write_text("x = 1\n")
    (project / "README.md").write_text("x = 1\n")
    return project


def edit(path: str) -> tuple[str, dict[str, Any]]:
    return "edit_file", {"path": path, "old_string": "x = 1", "new_string": "x = 2"}


def test_the_write_question_offers_the_file_its_directory_and_any_file_each_labelled(
    workspace: Path,
) -> None:
    asker = RecordingAsker(Answer.DENY)
    with Runtime(workspace, asker=asker, audit_log=None) as runtime:
        outcome = runtime.session().call(*edit("src/report/render.py"))
    assert isinstance(outcome.error, DeniedByUser)
    (request,) = asker.requests
    assert request.choices == (
        Answer.ONCE,
        Answer.SESSION,
        Answer.PROJECT,
        Answer.PROJECT_PROGRAM,
        Answer.PROJECT_ANY,
        Answer.EVERY_PROJECT,
        Answer.DENY,
    )
    under = f"any file under src/report/, at any depth; {NEVER_PROTECTED}"
    anywhere = (
        "any file in this workspace, written or edited (write_file and edit_file), at any "
        f"depth; {NEVER_PROTECTED}"
    )
    assert [(answer, level.entry, level.covers) for answer, level in request.grants] == [
        (Answer.SESSION, "edit_file:src/report/render.py", "only src/report/render.py"),
        (Answer.PROJECT, "edit_file:src/report/render.py", "only src/report/render.py"),
        (Answer.PROJECT_PROGRAM, "edit_file:src/report/**", under),
        (Answer.PROJECT_ANY, "edit_file:**", anywhere),
        (Answer.EVERY_PROJECT, "edit_file:**", anywhere),
    ]
    assert request.grant_for(Answer.PROJECT_ANY).also == ("write_file:**",)
    shown = render(request)
    assert f"[w] AlwaysThisProject   edit_file:src/report/** — {under}" in shown
    assert f"[c] AlwaysThisProject   edit_file:** + write_file:** — {anywhere}" in shown
    assert (workspace / "src" / "report" / "render.py").read_text() == "x = 1\n"


def test_a_file_at_the_top_is_offered_itself_and_any_file_but_no_directory(
    workspace: Path,
) -> None:
    asker = RecordingAsker(Answer.DENY)
    with Runtime(workspace, asker=asker, audit_log=None) as runtime:
        runtime.session().call(*edit("README.md"))
    assert [(answer, level.entry) for answer, level in asker.requests[0].grants] == [
        (Answer.SESSION, "edit_file:README.md"),
        (Answer.PROJECT, "edit_file:README.md"),
        (Answer.PROJECT_ANY, "edit_file:**"),
        (Answer.EVERY_PROJECT, "edit_file:**"),
    ]


@pytest.mark.parametrize(
    ("answer", "entry", "covered", "asked"),
    [
        (
            Answer.PROJECT_PROGRAM,
            "edit_file:src/report/**",
            ["src/report/render.py", "src/report/deep/table.py"],
            ["src/cli.py", "README.md"],
        ),
        (
            Answer.PROJECT_ANY,
            "edit_file:**",
            ["src/report/render.py", "src/report/deep/table.py", "src/cli.py", "README.md"],
            [],
        ),
    ],
)
def test_a_wide_project_answer_covers_what_it_said_in_the_next_session_and_nothing_more(
    workspace: Path, answer: Answer, entry: str, covered: list[str], asked: list[str]
) -> None:
    with Runtime(workspace, asker=RecordingAsker(answer), audit_log=None) as first:
        assert first.session().call(*edit("src/report/render.py")).decision.matched == entry
    # Any file edited is any file written too: one grant.
    also = {"write_file:**": "AlwaysThisProject"} if entry == "edit_file:**" else {}
    assert json.loads((workspace / "codecoder.json").read_text()) == {
        "allowlist": {entry: "AlwaysThisProject", **also}
    }
    (workspace / "src" / "report" / "render.py").write_text("x = 1\n")
    later = RecordingAsker()
    with Runtime(workspace, asker=later, audit_log=None) as runtime:
        session = runtime.session()
        outcomes = {path: session.call(*edit(path)) for path in covered + asked}
        writes = session.call("write_file", {"path": "src/report/new.py", "content": "x\n"})
    assert {path: outcomes[path].decision.source for path in covered} == dict.fromkeys(
        covered, Source.PROJECT
    )
    # A directory's grant for edit_file is not one for write_file; any file is both.
    written = [] if also else ["write_file:src/report/new.py"]
    assert [r.key for r in later.requests] == [*(f"edit_file:{path}" for path in asked), *written]
    assert writes.decision.source is (Source.PROJECT if also else Source.DENIED)
    for path in covered:
        assert (workspace / path).read_text() == "x = 2\n"
    for path in asked:
        assert (workspace / path).read_text() == "x = 1\n"


def test_the_directory_and_any_file_are_offered_for_the_project_only(workspace: Path) -> None:
    # A session answer, the widest offered for the session, records the file alone.
    asker = RecordingAsker(Answer.SESSION, Answer.SESSION_PROGRAM)
    with Runtime(workspace, asker=asker, audit_log=None) as runtime:
        session = runtime.session()
        first = session.call(*edit("src/report/render.py"))
        second = session.call(*edit("src/report/deep/table.py"))
    assert Answer.SESSION_PROGRAM not in asker.requests[0].choices
    assert (first.decision.matched, second.decision.matched) == (
        "edit_file:src/report/render.py",
        "edit_file:src/report/deep/table.py",  # not offered, it counted as its scope: the file
    )
    assert len(asker.requests) == 2
    assert not (workspace / "codecoder.json").exists()


def test_a_file_named_like_a_move_is_granted_as_that_file(workspace: Path) -> None:
    name = "src/a -> b.txt"
    with Runtime(workspace, asker=RecordingAsker(Answer.PROJECT), audit_log=None) as first:
        assert first.session().call("write_file", {"path": name, "content": "1\n"}).ok
    with Runtime(workspace, asker=RecordingAsker(), audit_log=None) as later:
        again = later.session().call("write_file", {"path": name, "content": "2\n"})
    assert (again.decision.source, again.decision.matched) == (
        Source.PROJECT,
        "write_file:src/a -[>] b.txt",
    )
    assert (workspace / name).read_text() == "2\n"


# --- protected paths under the widest grants: every write tool, every spelling -----------------

PROTECTED = [
    "codecoder.json",
    "CodeCoder.JSON",
    ".codecoder/grants.json",
    ".codecoder",
    ".git/hooks/pre-commit",
    ".git/config",
    ".GIT/config",
    ".git./config",
    ".g\u200cit/hooks/post-checkout",
    "GIT~1/config",
    "src/report/.git/config",
    "src/report/.git",
    ".gitmodules",
    "vendor/.gitmodules",
    ".claude/settings.json",
    "packages/app/.claude/settings.local.json",
    ".gemini/settings.json",
    ".codex/config.toml",
    ".mcp.json",
    ".vscode/tasks.json",
]
WIDEST = {
    "allowlist": {
        f"{tool}:{pattern}": "AlwaysThisProject"
        for tool in ("write_file", "edit_file", "delete_file", "move_file")
        for pattern in ("**", "src/**", "*", ".*", ".*/**", "**/.git/**")
    }
}


def calls_on(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("write_file", {"path": path, "content": EVIL}),
        edit(path),
        ("delete_file", {"path": path}),
        ("move_file", {"source": "src/cli.py", "destination": path, "overwrite": True}),
        ("move_file", {"source": path, "destination": "src/moved"}),
    ]


@pytest.fixture
def guarded(workspace: Path) -> Path:
    """The workspace with protected paths to attack, each holding `x = 1`."""
    for relative in ("codecoder.json", ".git/config", ".git/hooks/pre-commit", ".gitmodules"):
        (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
    (workspace / ".git" / "config").write_text("x = 1\n")
    (workspace / ".git" / "hooks" / "pre-commit").write_text("x = 1\n")
    (workspace / ".gitmodules").write_text("x = 1\n")
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text("x = 1\n")
    write_config(workspace, WIDEST)
    return workspace


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() if p.is_file() else "<dir>"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("path", PROTECTED)
def test_no_wide_grant_of_any_write_tool_covers_a_protected_path(guarded: Path, path: str) -> None:
    before = snapshot(guarded)
    # The human takes the widest answer there is: not offered, it counts as its scope, which
    # a protected path refuses (CeilingViolation); the next call asks again.
    asker = RecordingAsker(*[Answer.PROJECT_ANY] * 5)
    with Runtime(guarded, asker=asker, audit_log=None) as runtime:
        session = runtime.session()
        outcomes = [session.call(tool, args) for tool, args in calls_on(path)]
    assert [type(o.error) for o in outcomes] == [CeilingViolation] * 5
    assert [r.choices for r in asker.requests] == [(Answer.ONCE, Answer.DENY)] * 5
    assert all(not o.decision.allowed for o in outcomes)
    assert snapshot(guarded) == before


@pytest.mark.parametrize("path", ["src/../codecoder.json", "/etc/passwd", "~/.bashrc", "./"])
def test_a_path_that_leaves_or_names_the_workspace_is_refused_before_any_grant(
    guarded: Path, path: str
) -> None:
    asker = RecordingAsker()
    with Runtime(guarded, asker=asker, audit_log=None) as runtime:
        outcome = runtime.session().call("write_file", {"path": path, "content": EVIL})
    assert isinstance(outcome.error, InvalidArguments)
    assert asker.requests == []


def test_a_symlink_under_a_granted_directory_does_not_carry_a_write_into_git(
    guarded: Path,
) -> None:
    os.symlink("../.git/hooks", guarded / "src" / "hooks")
    os.symlink("../.git/config", guarded / "src" / "config")
    before = snapshot(guarded)
    asker = RecordingAsker()
    with Runtime(guarded, asker=asker, audit_log=None) as runtime:
        session = runtime.session()
        through_dir = session.call("write_file", {"path": "src/hooks/pre-commit", "content": EVIL})
        through_file = session.call(*edit("src/config"))
    assert asker.requests == []  # covered by src/**: the grant is not what stops them
    for outcome in (through_dir, through_file):
        assert (outcome.decision.source, type(outcome.error)) == (Source.PROJECT, ExecutionFailed)
    assert snapshot(guarded) == before


def test_a_hard_link_to_git_config_under_a_granted_directory_is_not_written(
    guarded: Path,
) -> None:
    os.link(guarded / ".git" / "config", guarded / "src" / "config")
    with Runtime(guarded, asker=RecordingAsker(), audit_log=None) as runtime:
        outcome = runtime.session().call(*edit("src/config"))
    assert (outcome.decision.source, type(outcome.error)) == (Source.PROJECT, ExecutionFailed)
    assert (guarded / ".git" / "config").read_text() == "x = 1\n"
