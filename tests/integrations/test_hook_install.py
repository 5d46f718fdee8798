"""`codecoder hook install` with the real agent CLIs (issues 31 and 32.5): the hook it writes
contains the agent's shell by default (Claude Code's `git status` runs in @bwrap with no
question), and a hook whose codecoder is gone blocks every call instead of letting it run
unjudged (the model is the stand-in on 127.0.0.1; the network is closed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codecoder.interfaces.hookinstall import hook_command
from tests.environments.bwrap_support import need_bwrap
from tests.integrations.agents import base_env, cli, run_agent, unavailable
from tests.integrations.standin import Call
from tests.integrations.test_claude_code import audit, texts, trusted_config
from tests.integrations.test_gemini_cli import gemini_env, responses

INSTALL = [sys.executable, "-m", "codecoder", "hook", "install"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README.md").write_text("hello\n")
    return root


@pytest.mark.skipif(unavailable("claude") is not None, reason=str(unavailable("claude")))
def test_the_installed_claude_code_hook_contains_git_status_without_a_question(
    project: Path, tmp_path: Path
) -> None:
    need_bwrap()
    env = base_env(tmp_path, ANTHROPIC_BASE_URL="{URL}", ANTHROPIC_API_KEY="sk-ant-stand-in")
    trusted_config(project, env, {"deny": ["run_command:git:push"]})
    run = run_agent(
        [str(cli("claude")), "-p", "Look, then push.", "--output-format", "json"],
        cwd=project,
        env=env,
        setup=[[*INSTALL, "claude-code", "--yes"]],
        script=[
            Call("Bash", {"command": "git status"}),
            Call("Bash", {"command": "touch made"}),
            Call("Bash", {"command": "git push origin main"}),
        ],
    )
    assert run.setup[0]["exit_code"] == 0, run.setup[0]["stderr"]
    settings = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())
    assert set(settings["hooks"]) == {"PreToolUse", "PostToolUse", "SessionStart", "SessionEnd"}
    assert run.exit_code == 0, run.stderr
    status, touch, push = texts(run)
    assert "No commits yet" in status or "On branch" in status, status
    assert touch.startswith("codecoder: `touch made` — run_command:touch on @bwrap needs your")
    assert push.startswith("codecoder: run_command:git:push is refused: deny rule")
    denials = json.loads(run.stdout)["permission_denials"]
    assert [d["tool_input"]["command"] for d in denials][-1] == "git push origin main"
    assert not (project / "made").exists()
    # `git status` ran contained, and its record says so (codecoder exec audited it).
    assert ("run_command", "ok") in audit(project, env)


@pytest.mark.skipif(unavailable("claude") is not None, reason=str(unavailable("claude")))
def test_claude_code_blocks_every_call_when_the_hooks_codecoder_is_gone(
    project: Path, tmp_path: Path
) -> None:
    env = base_env(tmp_path, ANTHROPIC_BASE_URL="{URL}", ANTHROPIC_API_KEY="sk-ant-stand-in")
    gone = hook_command("claude-code", ("/nonexistent/venv/bin/codecoder",))
    group = {"matcher": "*", "hooks": [{"type": "command", "command": gone}]}
    (Path(env["HOME"]) / ".claude").mkdir()
    (Path(env["HOME"]) / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(touch:*)"]}, "hooks": {"PreToolUse": [group]}})
    )
    run = run_agent(
        [str(cli("claude")), "-p", "Touch a file.", "--output-format", "json"],
        cwd=project,
        env=env,
        script=[Call("Bash", {"command": "touch made"}), Call("Read", {"file_path": "README.md"})],
    )
    assert run.exit_code == 0, run.stderr
    touch, read = texts(run)
    blocked = (
        "the permission hook of codecoder (/nonexistent/venv/bin/codecoder) did not run: the "
        "call is blocked"
    )
    assert blocked in touch and blocked in read, (touch, read)
    assert not (project / "made").exists()  # though the user's own rule allows `touch`


@pytest.mark.skipif(unavailable("gemini") is not None, reason=str(unavailable("gemini")))
def test_gemini_cli_blocks_every_call_when_the_hooks_codecoder_is_gone(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / ".gemini").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = gemini_env(tmp_path, project)
    gone = hook_command("gemini", ("/nonexistent/venv/bin/codecoder",))
    group = {"matcher": "*", "hooks": [{"type": "command", "command": gone}]}
    (project / ".gemini" / "settings.json").write_text(
        json.dumps({"hooks": {"BeforeTool": [group]}})
    )
    run = run_agent(
        [str(cli("gemini")), "-p", "Work.", "--output-format", "json", "--approval-mode", "yolo"],
        cwd=project,
        env=env,
        script=[Call("run_shell_command", {"command": "touch made"})],
    )
    assert run.exit_code == 0, run.stderr
    (touch,) = responses(run)
    assert "did not run: the call is blocked" in json.dumps(touch), touch
    assert not (project / "made").exists()
