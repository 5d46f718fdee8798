"""`codecoder doctor` (issue 31): it exits 0 on a machine where everything used works, and
names the fix when bubblewrap is missing, the sandbox image is missing, or an agent's hook is
missing or names a codecoder that does not exist. Real processes, real bubblewrap and Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.bwrap import probe
from codecoder.interfaces.doctor import diagnose
from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap


def doctor(project: Path, home: Path, **env: str) -> tuple[int, dict[str, Any]]:
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run(
        [sys.executable, "-m", "codecoder", "doctor", "--json"],
        cwd=project,
        env={**environ, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    return done.returncode, json.loads(done.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {check["name"]: check for check in report["checks"]}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    directory = tmp_path / "home"
    directory.mkdir()
    return directory


def test_doctor_exits_0_where_everything_used_works(project: Path, home: Path) -> None:
    need_bwrap()
    installed = subprocess.run(
        [sys.executable, "-m", "codecoder", "hook", "install", "claude-code", "--yes"],
        cwd=project,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    code, report = doctor(project, home)
    assert code == 0, report
    checks = by_name(report)
    assert report["ok"] is True
    for name in ("bubblewrap", "contained", "state", "hook claude-code (user)"):
        assert checks[name]["status"] == "ok", checks[name]
    assert checks["hook gemini (user)"] == {
        "name": "hook gemini (user)",
        "status": "note",
        "detail": f"not installed ({home}/.gemini/settings.json does not exist)",
        "fix": "codecoder hook install gemini",
    }


def test_doctor_names_the_fix_when_bubblewrap_is_missing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap is looked for in the system's directories only (never a PATH entry a sandbox
    could write), so its absence is made here by taking it out of that look-up."""
    monkeypatch.setattr(probe, "bwrap_binary", lambda: None)
    monkeypatch.setattr(probe, "command_sandbox", probe.probe)
    checks = {check.name: check for check in diagnose(project)}
    assert checks["bubblewrap"].status == "FAIL"
    assert checks["bubblewrap"].detail.startswith("not installed: ")
    assert checks["bubblewrap"].fix in (
        "apt-get install bubblewrap",
        "sudo apt-get install bubblewrap",
    )
    assert checks["contained"].status == "FAIL"


def test_doctor_names_the_fix_when_a_hook_names_a_codecoder_that_does_not_exist(
    project: Path, home: Path
) -> None:
    (home / ".claude").mkdir()
    gone = "/nonexistent/venv/bin/codecoder hook claude-code || { echo x >&2; exit 2; }"
    hooks = {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": gone}]}]}
    (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    (project / ".gemini").mkdir()
    (project / ".gemini" / "settings.json").write_text('{"hooks": {"BeforeTool": [')
    code, report = doctor(project, home)
    assert code == 1
    checks = by_name(report)
    assert checks["hook claude-code (user)"] == {
        "name": "hook claude-code (user)",
        "status": "FAIL",
        "detail": f"{home}/.claude/settings.json: the hook runs /nonexistent/venv/bin/codecoder, "
        "which does not exist (or cannot be run)",
        "fix": "codecoder hook install claude-code (names this codecoder)",
    }
    assert checks["hook gemini (project)"]["status"] == "FAIL"
    assert "not valid JSON" in checks["hook gemini (project)"]["detail"]


def test_doctor_names_the_fix_when_the_sandbox_image_is_missing(project: Path, home: Path) -> None:
    write_config(project, {"docker": {"image": "codecoder-sandbox-never-built:1"}})
    code, report = doctor(project, home)
    check = by_name(report)["docker"]
    if "does not answer" in check["detail"] and os.environ.get("CI") != "true":
        pytest.skip("no Docker engine here")
    assert code == 1
    assert check["status"] == "FAIL"
    assert check["detail"].endswith("has no image 'codecoder-sandbox-never-built:1'")
    assert "codecoder image build --from IMAGE" in check["fix"]
