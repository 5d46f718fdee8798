"""Grants that fit the sandbox (issue 34): "any command in this sandbox" (`run_command:**`)
covers compound lines whose every part runs contained, narrow grants stay exact, one grant
covers writing and editing any file, and the user's own file holds contained grants for every
project, never a host grant.

@bwrap itself is another test's subject; here it is a mock environment that records what it
was asked to run (tests/runtime/test_contained_commands.py's `contained`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import DeniedByRule, DeniedByUser
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, echo_handler, write_config
from tests.runtime.test_contained_commands import BWRAP, SHELL, contained, never_ask, ran, run

SANDBOX_GRANT = {"allowlist": {"run_command:**": "AlwaysThisProject"}}
COMPOUND = [
    "git add -A && git commit -m 'fix: the parser'",
    "npm test 2>&1 | tee test.log",
    "env | grep -i proxy",
    "cd src && make -j4 > build.log",
    "for f in *.py; do python -m py_compile $f; done",
    "npx eslint . | xargs -n1 echo",
]


def user_file() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"


@pytest.mark.parametrize("command", COMPOUND)
def test_the_sandbox_grant_covers_compound_lines_that_run_contained(
    project: Path, command: str
) -> None:
    write_config(project, SANDBOX_GRANT)
    with contained(project) as runtime:
        outcome = run(runtime, command)
        assert (outcome.decision.source, outcome.decision.matched) == (
            Source.PROJECT,
            "run_command:**",
        )
        assert ran(runtime, BWRAP)[-1].script == command
        assert not ran(runtime, SHELL)


def test_the_sandbox_grant_never_covers_a_line_with_a_part_that_needs_the_host(
    project: Path,
) -> None:
    write_config(project, SANDBOX_GRANT)
    asker = RecordingAsker(Answer.DENY)
    with contained(project, asker) as runtime:
        outcome = run(runtime, "git add -A && git commit -m x && git push origin main")
        assert isinstance(outcome.error, DeniedByUser)
        assert not ran(runtime, BWRAP) and not ran(runtime, SHELL)
    (request,) = asker.requests
    assert Answer.HOST_ONCE in request.choices  # asked so that the host can be chosen
    assert Answer.PROJECT_ANY not in request.choices


def test_deny_rules_refuse_a_compound_line_the_sandbox_grant_would_cover(project: Path) -> None:
    write_config(project, {**SANDBOX_GRANT, "deny": ["run_command:rm", "run_command:git:push"]})
    with contained(project) as runtime:
        for command in ("make && rm -rf build", "echo ok; sudo rm -rf /", "x=$(git push -f)"):
            outcome = run(runtime, command)
            assert isinstance(outcome.error, DeniedByRule), command
        assert not ran(runtime, BWRAP)


def test_the_sandbox_grant_never_covers_a_line_touching_a_protected_path(project: Path) -> None:
    write_config(project, SANDBOX_GRANT)
    asker = RecordingAsker(Answer.DENY)
    with contained(project, asker) as runtime:
        outcome = run(runtime, "echo '[core]' >> .git/config && git status")
    assert isinstance(outcome.error, DeniedByUser)
    assert asker.requests[0].choices == (Answer.ONCE, Answer.DENY)


def test_the_sandbox_grant_holds_nothing_on_the_host(project: Path) -> None:
    write_config(project, {**SANDBOX_GRANT, "environments": {"run_command": "@shell"}})
    asker = RecordingAsker(Answer.DENY)
    runtime = Runtime(
        project,
        asker=asker,
        environments={SHELL: MockEnvironment(echo_handler, SHELL)},
    )
    with runtime:
        for command in ("npm test", "make && make install"):
            outcome = run(runtime, command)
            assert isinstance(outcome.error, DeniedByUser), command
    assert all("CeilingViolation" in r.note for r in asker.requests)


@pytest.mark.parametrize(
    ("granted", "command"),
    [
        ("run_command:git:status", "git status && git push"),
        ("run_command:git", "git status; git push --force"),
        ("run_command:*", "make && rm -rf ~"),
        ('run_command:"git status"', "git status | sh"),
    ],
)
def test_narrow_grants_stay_exact(project: Path, granted: str, command: str) -> None:
    write_config(project, {"allowlist": {granted: "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.DENY)
    with contained(project, asker) as runtime:
        outcome = run(runtime, command)
        assert isinstance(outcome.error, DeniedByUser)
        assert not ran(runtime, BWRAP)


def test_a_project_any_answer_to_a_compound_line_records_the_sandbox_grant(project: Path) -> None:
    asker = RecordingAsker(Answer.PROJECT_ANY)
    with contained(project, asker) as runtime:
        first = run(runtime, "npm ci && npm test")
        later = run(runtime, "npm run build | tail -5")
    assert (first.decision.source, later.decision.source) == (Source.PROJECT, Source.PROJECT)
    assert len(asker.requests) == 1
    assert json.loads((project / "codecoder.json").read_text()) == SANDBOX_GRANT


# --- writes: one grant ---------------------------------------------------------------------------


def test_any_file_answered_for_an_edit_covers_writes_too(project: Path) -> None:
    (project / "notes.md").write_text("one\n")
    asker = RecordingAsker(Answer.PROJECT_ANY)
    with Runtime(project, asker=asker, audit_log=None) as runtime:
        session = runtime.session()
        edited = session.call(
            "edit_file", {"path": "notes.md", "old_string": "one", "new_string": "two"}
        )
        written = session.call("write_file", {"path": "src/new.py", "content": "x = 1\n"})
        protected = session.call("write_file", {"path": ".codecoder/x", "content": "x\n"})
    assert (edited.decision.source, written.decision.source) == (Source.PROJECT, Source.PROJECT)
    assert [r.key for r in asker.requests] == ["edit_file:notes.md", "write_file:.codecoder/x"]
    assert protected.ok is False and not (project / ".codecoder" / "x").exists()


# --- the user's own file: every project ----------------------------------------------------------


def test_every_project_is_written_to_the_users_file_and_holds_in_another_project(
    project: Path, tmp_path: Path
) -> None:
    asker = RecordingAsker(Answer.EVERY_PROJECT)
    with contained(project, asker) as runtime:
        outcome = run(runtime, "make test")
    assert outcome.decision.reason.startswith("allowed for every project")
    assert json.loads(user_file().read_text()) == SANDBOX_GRANT
    assert not (project / "codecoder.json").exists()
    other = tmp_path / "other"
    other.mkdir()
    with contained(other, never_ask) as elsewhere:
        later = run(elsewhere, "cargo build && cargo test")
    assert (later.decision.source, later.decision.matched) == (Source.PROJECT, "run_command:**")


def test_every_project_is_never_offered_for_what_needs_the_host(project: Path) -> None:
    asker = RecordingAsker(Answer.EVERY_PROJECT)
    with contained(project, asker) as runtime:
        outcome = run(runtime, "gh pr list")
        assert not ran(runtime, SHELL)
    assert Answer.EVERY_PROJECT not in asker.requests[0].choices
    assert outcome.decision.environment is BWRAP  # not offered: its plain scope, contained
    assert not user_file().exists()


def test_every_project_is_never_offered_on_the_host(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@shell"}})
    asker = RecordingAsker(Answer.EVERY_PROJECT)
    runtime = Runtime(
        project, asker=asker, environments={SHELL: MockEnvironment(echo_handler, SHELL)}
    )
    with runtime:
        outcome = run(runtime, "npm test")
    assert Answer.EVERY_PROJECT not in asker.requests[0].choices
    assert outcome.decision.source is Source.DENIED  # its scope, a project's: @shell's ceiling
    assert not user_file().exists()


def test_a_users_grant_never_holds_where_the_project_runs_commands_on_the_host(
    project: Path,
) -> None:
    user_file().parent.mkdir(parents=True)
    user_file().write_text(json.dumps(SANDBOX_GRANT))
    write_config(project, {"environments": {"run_command": "@shell"}})
    asker = RecordingAsker(Answer.DENY)
    runtime = Runtime(
        project, asker=asker, environments={SHELL: MockEnvironment(echo_handler, SHELL)}
    )
    with runtime:
        outcome = run(runtime, "make")
    assert isinstance(outcome.error, DeniedByUser)
    assert [d.code for d in runtime.config.diagnostics] == ["user_grant_not_here"]


def test_a_protected_key_is_never_offered_for_every_project(project: Path) -> None:
    asker = RecordingAsker(Answer.DENY)
    with Runtime(project, asker=asker, audit_log=None) as runtime:
        runtime.session().call("write_file", {"path": ".git/hooks/pre-commit", "content": "x"})
    assert Answer.EVERY_PROJECT not in asker.requests[0].choices
