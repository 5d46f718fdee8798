"""Harmless assignments before a command, run for real (`runtime.permissions.assignments`): keyed
as the command alone, they still apply when it runs, in @bwrap (real bubblewrap) and on @shell;
a read-only command after them is still a read; a deny rule for the command still refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import DeniedByUser, PermissionDenied
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config
from tests.environments.bwrap_support import need_bwrap

SHOW = "import os; print('TZ', os.environ.get('TZ'), 'PYTHONPATH', os.environ.get('PYTHONPATH'))\n"


def never_ask(request: Any) -> Any:
    raise AssertionError(f"the runtime asked for {request.key}")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "show.py").write_text(SHOW)
    (root / "notes.txt").write_text("hello\nworld\nhello again\n")
    return root


def call(project: Path, command: str, asker: Any = never_ask) -> Any:
    with Runtime(project, asker=asker, audit_log=None) as runtime, runtime.session() as s:
        return s.call("run_command", {"command": command})


@pytest.mark.parametrize(
    ("command", "key", "output"),
    [
        ("TZ=Asia/Tokyo date +%Z", "run_command:date", "JST\n"),
        ("LANG=C LC_ALL=C ls notes.txt", "run_command:ls", "notes.txt\n"),
        (
            "LC_ALL=C grep -c hello notes.txt | wc -l",
            'run_command:"LC_ALL=C grep -c hello notes.txt | wc -l"',
            "1\n",
        ),
    ],
)
def test_a_read_only_command_after_harmless_assignments_runs_unasked_with_them_in_bwrap(
    workspace: Path, command: str, key: str, output: str
) -> None:
    need_bwrap()
    outcome = call(workspace, command)
    decision = outcome.decision
    assert (decision.source, decision.environment, decision.key) == (
        Source.READ_ONLY,
        EnvironmentTag.BWRAP,
        key,
    )
    assert outcome.unwrap().output == f"{output}[exit code 0]"


def test_a_project_grant_for_the_bare_command_runs_it_with_the_assignment_in_bwrap(
    workspace: Path,
) -> None:
    need_bwrap()
    write_config(workspace, {"allowlist": {"run_command:python3:show.py": "AlwaysThisProject"}})
    for command in ("TZ=Asia/Tokyo python3 show.py", "TZ=Asia/Tokyo python3 show.py | LANG=C cat"):
        outcome = call(workspace, command)
        assert (outcome.decision.source, outcome.decision.key) == (
            Source.PROJECT,
            "run_command:python3:show.py",
        )
        assert outcome.unwrap().output == "TZ Asia/Tokyo PYTHONPATH None\n[exit code 0]"


def test_an_assignment_that_is_not_harmless_is_asked_as_the_whole_line_and_never_runs(
    workspace: Path,
) -> None:
    need_bwrap()
    write_config(workspace, {"allowlist": {"run_command:*": "AlwaysThisProject"}})
    asker = RecordingAsker(Answer.DENY)
    outcome = call(workspace, "PYTHONPATH=/tmp/evil python3 show.py", asker)
    assert isinstance(outcome.error, DeniedByUser)
    (asked,) = asker.requests
    assert (asked.key, asked.compound) == (
        'run_command:"PYTHONPATH=/tmp/evil python3 show.py"',
        True,
    )


def test_the_question_shows_the_whole_line_and_says_what_was_set_aside(workspace: Path) -> None:
    need_bwrap()
    asker = RecordingAsker(Answer.ONCE)
    outcome = call(workspace, "TZ=UTC NO_COLOR=1 python3 show.py", asker)
    (asked,) = asker.requests
    assert (asked.key, asked.subject, asked.compound) == (
        "run_command:python3:show.py",
        "TZ=UTC NO_COLOR=1 python3 show.py",
        False,
    )
    assert "sets TZ=UTC NO_COLOR=1 (harmless: keyed without it)" in asked.notes
    assert outcome.unwrap().output == "TZ UTC PYTHONPATH None\n[exit code 0]"


def test_a_deny_rule_for_the_bare_command_refuses_it_even_as_a_read(workspace: Path) -> None:
    need_bwrap()
    write_config(workspace, {"deny": ["run_command:date", "run_command:python3"]})
    for command in ("TZ=UTC date", "LANG=C TZ=UTC python3 show.py"):
        outcome = call(workspace, command)
        assert isinstance(outcome.error, PermissionDenied)
        assert outcome.decision.source is Source.DENY


def test_on_shell_the_assignment_applies_to_the_program_found_at_key_time(
    workspace: Path,
) -> None:
    write_config(
        workspace,
        {
            "environments": {"run_command": "@shell"},
        },
    )
    asker = RecordingAsker(Answer.ONCE)
    outcome = call(workspace, "TZ=Asia/Tokyo python3 show.py", asker)
    (asked,) = asker.requests
    assert asked.environment is EnvironmentTag.SHELL
    assert asked.subject == "TZ=Asia/Tokyo python3 show.py"
    assert outcome.unwrap().output == "TZ Asia/Tokyo PYTHONPATH None\n[exit code 0]"
