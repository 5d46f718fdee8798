"""Another agent's own shell runs on the host: however codecoder contains its own run_command
(@bwrap by default), a hook judges the host's shell commands as run_command on @shell, so a
grant made for contained commands never lets the host run one unconfined."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.runtime.interfaces.test_hooks import answer, claude, gemini, state

__all__ = ["state"]  # the fixture


@pytest.mark.usefixtures("state")
def test_a_project_grant_for_a_contained_command_does_not_allow_the_hosts_shell(
    project: Path,
) -> None:
    write_config(project, {"allowlist": {"run_command:npm": "AlwaysThisProject"}})
    claude_said = answer(
        "claude-code", claude("Bash", {"command": "npm test"}), project, "--non-interactive"
    )
    gemini_said = answer(
        "gemini", gemini("run_shell_command", {"command": "npm test"}), project, "--non-interactive"
    )
    verdict = claude_said["hookSpecificOutput"]
    assert verdict["permissionDecision"] == "deny"
    assert "run_command:npm:test on @shell needs approval" in verdict["permissionDecisionReason"]
    assert gemini_said["decision"] == "deny"
    assert "on @shell" in gemini_said["reason"]


@pytest.mark.usefixtures("state")
def test_a_session_grant_for_the_host_still_allows_the_hosts_shell(project: Path) -> None:
    said = answer(
        "claude-code",
        claude("Bash", {"command": "npm test"}),
        project,
        "--non-interactive",
        "--allow",
        "run_command:npm",
    )
    verdict = said["hookSpecificOutput"]
    assert verdict["permissionDecision"] == "allow"
    assert "(@shell)" in verdict["permissionDecisionReason"]
