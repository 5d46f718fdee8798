"""`codecoder audit`'s bwrap layer: every attempt blocked by the real @bwrap, a weakened @bwrap
reported as escaped (the suite can fail), and what it says where commands are not contained.

With CI=true the layer must run (bubblewrap is installed by scripts/install.sh)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap import probe as probe_module
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.plan import SandboxPlan
from codecoder.environments.bwrap.probe import CommandSandbox
from codecoder.environments.bwrap.protection import CallProtection
from codecoder.environments.privatefiles import PrivateView
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.interfaces.escapes.corpus import load_corpus
from codecoder.interfaces.escapes.options import AuditOptions
from codecoder.interfaces.escapes.outcomes import Status
from codecoder.interfaces.escapes.runner import run_audit
from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap

BWRAP_IDS = [attempt.id for attempt in load_corpus(["bwrap"])]
ROOT = os.geteuid() == 0


def test_the_bwrap_layer_has_its_attempts() -> None:
    assert len(BWRAP_IDS) == 49
    assert {"bwrap.write-git-hooks", "bwrap.read-ssh-key", "bwrap.outlive-call"} <= set(BWRAP_IDS)
    assert {"bwrap.private-files-by-rule", "bwrap.private-files-search"} <= set(BWRAP_IDS)
    assert {"bwrap.warm-leftovers", "bwrap.warm-request-channel"} <= set(BWRAP_IDS)


def test_every_bwrap_attempt_is_blocked(project: Path) -> None:
    need_bwrap()
    report = run_audit(project, ["bwrap"])
    outcomes = {r.attempt.id: (r.status, r.how) for r in report.results}
    expected = dict.fromkeys(BWRAP_IDS, Status.BLOCKED)
    if not ROOT:  # only root plants what the host keeps private
        expected.update(
            dict.fromkeys([i for i in BWRAP_IDS if "private-files" in i], Status.NOT_APPLICABLE)
        )
    assert {i: s for i, (s, _) in outcomes.items()} == expected, {
        i: how for i, (s, how) in outcomes.items() if s is not Status.BLOCKED
    }


class _Weakened(BwrapEnvironment):
    """@bwrap without its protected-path mounts, its hidden directories (the home, /run), what
    the host keeps private and its checks after a call: still namespaces, Landlock (writes only
    beneath the workspace, /tmp and /dev) and seccomp, so no attempt can reach the real host."""

    def plan(self, request: CommandRequest, call: CallProtection | None = None) -> SandboxPlan:
        plan = super().plan(request, None)
        plan.homes, plan.hidden, plan.private = (), [], PrivateView()
        return plan

    def _guard(self, call: CallProtection, request: CommandRequest) -> None:
        return None


def test_a_weakened_bwrap_is_reported_as_escaped(project: Path) -> None:
    need_bwrap()

    def weakened(workspace: Path, environ: Mapping[str, str]) -> BwrapEnvironment:
        return _Weakened(workspace, environ=environ)

    report = run_audit(project, ["bwrap"], options=AuditOptions(bwrap_environment=weakened))
    escaped = {r.attempt.id for r in report.results if r.status is Status.ESCAPED}
    assert escaped == {
        "bwrap.write-git-hooks",
        "bwrap.write-git-config",
        "bwrap.create-git-info",
        "bwrap.nested-repository-config",
        "bwrap.new-nested-repository",
        "bwrap.write-codecoder-json",
        "bwrap.write-claude-settings",
        "bwrap.docker-socket",
        "bwrap.read-ssh-key",
        "bwrap.proc-1-root",
        "bwrap.warm-nested-repository-hooks",
        "bwrap.move-git-directory",
        "bwrap.agent-settings-below-top",
        "bwrap.agent-settings-parent-renamed",
        "bwrap.missing-agent-settings-during-call",
        # Planted by root only (elsewhere not applicable).
        *(("bwrap.private-files-by-rule", "bwrap.private-files-search") if ROOT else ()),
    }, {r.attempt.id: r.how for r in report.results}
    assert not report.ok


def test_where_commands_are_not_contained_the_layer_says_so(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = CommandSandbox(EnvironmentTag.CONFINED, "bubblewrap cannot create namespaces here")
    monkeypatch.setattr(probe_module, "command_sandbox", lambda: found)
    monkeypatch.setattr("codecoder.interfaces.escapes.bwrap.command_sandbox", lambda: found)
    report = run_audit(project, ["bwrap"])
    assert {r.status for r in report.results} == {Status.NOT_APPLICABLE}
    assert report.results[0].how == (
        "commands run in @confined on this machine: bubblewrap cannot create namespaces here"
    )

    write_config(project, {"environments": {"run_command": "@bwrap"}})
    bound = run_audit(project, ["bwrap"])
    assert {r.status for r in bound.results} == {Status.NOT_RUN}
    assert not bound.ok


def test_the_audit_command_runs_the_bwrap_layer(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    need_bwrap()
    from codecoder.interfaces.cli import main

    code = main(["audit", "--project", str(project), "--layer", "bwrap", "--json"])
    import json

    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["layers"]["bwrap"] == {
        "blocked": len(BWRAP_IDS),
        "escaped": 0,
        "not-run": 0,
        "not-applicable": 0,
        "total": len(BWRAP_IDS),
    }
    assert dataclasses.is_dataclass(AuditOptions)
