"""What `check` says of a grant for one tool where another tool runs the commands."""

from __future__ import annotations

from pathlib import Path

from codecoder.config.projectfile import Diagnostic
from codecoder.permissions.prompt import non_interactive
from codecoder.session import Runtime
from tests.conftest import write_config


def test_a_run_container_grant_is_reported_where_run_command_runs_on_docker(
    project: Path,
) -> None:
    path = write_config(
        project,
        '{"environments": {"run_command": "@docker"},\n'
        ' "allowlist": {"run_container:npm:test": "AlwaysThisProject",\n'
        '               "run_container:make": "AlwaysThisProject",\n'
        '               "run_command:make": "AlwaysThisProject"}}\n',
    )
    diagnostics = Runtime(project, asker=non_interactive).diagnostics
    assert list(diagnostics) == [
        Diagnostic(
            "warning",
            "other_tool",
            "run_container:npm:test grants the run_container tool only; commands the agent "
            "runs with run_command, bound to @docker here, are keyed run_command:npm:test, "
            "which nothing grants: add that entry for them to run without asking",
            key="run_container:npm:test",
            line=2,
            column=16,
        )
    ]
    assert path.exists()


def test_a_run_container_grant_is_not_reported_where_run_command_runs_on_the_host(
    project: Path,
) -> None:
    write_config(project, {"allowlist": {"run_container:npm:test": "AlwaysThisProject"}})
    assert list(Runtime(project, asker=non_interactive).diagnostics) == []
