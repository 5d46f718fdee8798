"""Gemini CLI (the real CLI, from npm) with codecoder, as README.md's recipes set it up: codecoder
as its MCP server, and as its permission hook. The model is the stand-in on 127.0.0.1 playing a
script of tool calls; the network is closed (tests/integrations/agents.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.agents import (
    GEMINI_USER_SETTINGS,
    AgentRun,
    base_env,
    cli,
    recipe,
    run_agent,
    unavailable,
)
from tests.integrations.standin import Call
from tests.integrations.test_claude_code import audit, trusted_config

pytestmark = pytest.mark.skipif(
    unavailable("gemini") is not None, reason=str(unavailable("gemini"))
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".gemini").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README.md").write_text("hello\n")
    return root


def gemini_env(tmp_path: Path, project: Path) -> dict[str, str]:
    """A user of Gemini CLI: telemetry, usage statistics and updates off; this folder trusted."""
    env = base_env(tmp_path, GOOGLE_GEMINI_BASE_URL="{URL}", GEMINI_API_KEY="stand-in")
    settings = Path(env["HOME"]) / ".gemini"
    settings.mkdir(parents=True)
    (settings / "settings.json").write_text(json.dumps(GEMINI_USER_SETTINGS))
    (settings / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    return env


def responses(run: AgentRun) -> list[dict[str, Any]]:
    return [result["response"] for result in run.tool_results()]


def test_as_its_mcp_server_codecoder_decides_and_geminis_own_tools_are_off(
    project: Path, tmp_path: Path
) -> None:
    env = gemini_env(tmp_path, project)
    trusted_config(project, env, {"allowlist": {"write_file:notes/**": "AlwaysThisProject"}})
    (project / ".gemini" / "settings.json").write_text(recipe("gemini-mcp"))
    run = run_agent(
        [str(cli("gemini")), "-p", "Work.", "--output-format", "json", "--approval-mode", "yolo"],
        cwd=project,
        env=env,
        script=[
            Call("mcp_codecoder_read_file", {"path": "README.md"}),
            Call("mcp_codecoder_write_file", {"path": "notes/a.md", "content": "noted\n"}),
            Call("mcp_codecoder_run_command", {"command": "touch made"}),
        ],
    )
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["response"] == "All done."
    offered = run.offered()
    assert {"mcp_codecoder_write_file", "mcp_codecoder_web_fetch", "read_file"} <= offered
    assert not offered & {"run_shell_command", "write_file", "replace", "web_fetch"}
    read, wrote, touched = responses(run)
    assert read == {"output": "<untrusted_context>\n     1\thello\n\n</untrusted_context>"}
    assert "created notes/a.md (6 bytes)" in wrote["output"]
    # No elicitation in Gemini CLI: refused, with the key and how it could be granted.
    assert (
        "permission required: run_command needs approval for run_command:touch"
        in (touched["error"])
    )
    assert "codecoder serve --allow run_command:touch" in touched["error"]
    assert (project / "notes" / "a.md").read_text() == "noted\n"
    assert not (project / "made").exists()
    assert audit(project, env) == [
        ("read_file", "ok"),
        ("write_file", "ok"),
        ("run_command", "denied"),
    ]


def test_headless_gemini_hides_what_it_would_ask_for_and_codecoders_namesakes_with_it(
    project: Path, tmp_path: Path
) -> None:
    """Without --approval-mode yolo, `gemini -p` drops the tools it would have to ask about,
    by bare name, so codecoder's write_file and web_fetch go too (Gemini CLI 0.61): the reason
    README's recipe runs headless Gemini in yolo mode."""
    env = gemini_env(tmp_path, project)
    (project / ".gemini" / "settings.json").write_text(recipe("gemini-mcp"))
    run = run_agent(
        [str(cli("gemini")), "-p", "Work.", "--output-format", "json"],
        cwd=project,
        env=env,
        script=[Call("mcp_codecoder_read_file", {"path": "README.md"})],
    )
    assert run.exit_code == 0, run.stderr
    offered = run.offered()
    assert {"mcp_codecoder_read_file", "mcp_codecoder_run_command"} <= offered
    assert not offered & {"mcp_codecoder_write_file", "mcp_codecoder_web_fetch"}


def test_as_its_hook_codecoder_answers_for_geminis_own_tools(project: Path, tmp_path: Path) -> None:
    env = gemini_env(tmp_path, project)
    trusted_config(
        project,
        env,
        {
            "allowlist": {"write_file:notes/**": "AlwaysThisProject"},
            "deny": ["run_command:git:push"],
        },
    )
    # Headless: nobody answers Gemini's prompt, so the hook runs --non-interactive (README).
    hooks = recipe("gemini-hooks").replace(
        "codecoder hook gemini", "codecoder hook gemini --non-interactive --allow run_command:echo"
    )
    (project / ".gemini" / "settings.json").write_text(hooks)
    run = run_agent(
        [str(cli("gemini")), "-p", "Work.", "--output-format", "json", "--approval-mode", "yolo"],
        cwd=project,
        env=env,
        script=[
            Call("run_shell_command", {"command": "echo hi"}),
            Call("run_shell_command", {"command": "git push origin main"}),
            Call("run_shell_command", {"command": "touch made"}),
            Call("write_file", {"file_path": "notes/b.md", "content": "b\n"}),
            Call("write_file", {"file_path": ".gemini/settings.json", "content": "{}"}),
            Call("read_file", {"file_path": "README.md"}),
        ],
    )
    assert run.exit_code == 0, run.stderr
    echo, push, touch, notes, settings, read = responses(run)
    assert "Output: hi" in echo["output"]
    assert push["error"].startswith(
        "Tool execution blocked: codecoder: run_command:git:push is refused: deny rule "
        "'run_command:git:push' of codecoder.json line "
    )
    assert touch == {
        "error": "Tool execution blocked: codecoder: run_command:touch on @shell needs approval, "
        "and nobody can answer here; to allow it for a run: codecoder hook --allow "
        "run_command:touch"
    }
    assert "error" not in notes and (project / "notes" / "b.md").read_text() == "b\n"
    assert settings["error"].startswith("Tool execution blocked: codecoder: write_file:")
    assert json.loads((project / ".gemini" / "settings.json").read_text())["hooks"]
    assert read == {"output": "hello\n"}
    assert not (project / "made").exists()
