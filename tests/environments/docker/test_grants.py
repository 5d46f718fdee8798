"""Project grants for commands bound to @docker, end to end with a real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codecoder.foundation.decision import Answer, Source
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config

pytestmark = pytest.mark.docker


def codecoder(*args: str, project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_run_command_bound_to_docker_is_granted_for_the_project_and_runs_contained(
    workspace: Path,
) -> None:
    write_config(workspace, {"environments": {"run_command": "@docker"}})
    asker = RecordingAsker(Answer.PROJECT)
    with Runtime(workspace, asker=asker) as runtime:
        outcome = runtime.session().call("run_command", {"command": "id -u"})
        assert (outcome.ok, outcome.decision.source) == (True, Source.PROJECT)
        assert outcome.result.data["stdout"].strip() != "0"
    assert json.loads((workspace / "codecoder.json").read_text())["allowlist"] == {
        "run_command:id": "AlwaysThisProject"
    }
    proc = codecoder(
        "call",
        "run_command",
        '{"command": "id -un"}',
        "--non-interactive",
        "--json",
        project=workspace,
    )
    result = json.loads(proc.stdout)
    assert (proc.returncode, result["decision"]["source"]) == (0, "project"), proc.stderr
    assert result["decision"]["environment"] == "@docker"


def test_the_same_entry_is_a_ceiling_violation_once_run_command_is_back_on_the_host(
    workspace: Path,
) -> None:
    on_host = {"run_command": "@shell"}  # explicitly: by default it is contained (@bwrap)
    write_config(
        workspace, {"environments": on_host, "allowlist": {"run_command:id": "AlwaysThisProject"}}
    )
    proc = codecoder("check", "--json", project=workspace)
    [diagnostic] = json.loads(proc.stdout)["diagnostics"]
    assert (proc.returncode, diagnostic["code"], diagnostic["key"]) == (
        1,
        "ceiling_violation",
        "run_command:id",
    )


def test_a_granted_container_command_cannot_grant_itself_more(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # where plants are moved
    write_config(workspace, {"allowlist": {"run_container:sh": "AlwaysThisProject"}})
    before = (workspace / "codecoder.json").read_text()
    attack = (
        'sh -c \'echo {\\"allowlist\\": {\\"run_command:*\\": 1}} > codecoder.json; '
        "mkdir -p .codecoder/capabilities/x && echo x > .codecoder/capabilities/x/m'"
    )
    with Runtime(workspace, asker=RecordingAsker(Answer.ONCE)) as runtime:
        outcome = runtime.session().call("run_container", {"command": attack})
    # codecoder.json is mounted read-only, and .codecoder/ (missing) is the runtime's read-only
    # placeholder: both writes fail in the sandbox, and nothing needs quarantining.
    assert outcome.result.output.count("Read-only file system") == 2, outcome
    assert (workspace / "codecoder.json").read_text() == before
    assert not (workspace / ".codecoder" / "capabilities").exists()
    assert not (tmp_path / "state" / "codecoder" / "quarantine").exists()
