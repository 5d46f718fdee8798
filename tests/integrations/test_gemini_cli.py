"""Gemini CLI (the real CLI, from npm) with codecoder, as the recipes of
docs/integrations/agents.md set it up: codecoder as its MCP server, and as its permission hook.
The model is the stand-in on 127.0.0.1 playing a script of tool calls; the network is closed
(tests/integrations/agents.py)."""

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


def mcp_recipe(project: Path) -> None:
    """The docs' recipe: the settings and the Policy Engine rules they name."""
    (project / ".gemini" / "settings.json").write_text(recipe("gemini-mcp"))
    (project / ".gemini" / "codecoder.toml").write_text(recipe("gemini-mcp-policy"))


@pytest.mark.parametrize("mode", ["default", "yolo"])
def test_as_its_mcp_server_codecoder_decides_and_geminis_own_tools_are_off(
    project: Path, tmp_path: Path, mode: str
) -> None:
    """Headless in either approval mode: codecoder's tools offered (its namesakes of Gemini's
    write_file and web_fetch too), Gemini's shell and replace never offered, its write_file
    refused when called; no deprecation warning (the Policy Engine, not tools.exclude)."""
    env = gemini_env(tmp_path, project)
    trusted_config(project, env, {"allowlist": {"write_file:notes/**": "AlwaysThisProject"}})
    mcp_recipe(project)
    run = run_agent(
        [str(cli("gemini")), "-p", "Work.", "--output-format", "json", "--approval-mode", mode],
        cwd=project,
        env=env,
        script=[
            Call("mcp_codecoder_read_file", {"path": "README.md"}),
            Call("mcp_codecoder_write_file", {"path": "notes/a.md", "content": "noted\n"}),
            Call("mcp_codecoder_run_command", {"command": "touch made"}),
            Call("write_file", {"file_path": "own.md", "content": "x\n"}),
        ],
    )
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["response"] == "All done."
    assert "deprecated" not in run.stderr.lower() and "policy file error" not in run.stderr.lower()
    offered = run.offered()
    assert {"mcp_codecoder_write_file", "mcp_codecoder_web_fetch", "read_file"} <= offered
    assert not offered & {"run_shell_command", "replace"}
    read, wrote, touched, own = responses(run)
    assert read == {"output": "<untrusted_context>\n     1\thello\n\n</untrusted_context>"}
    assert "created notes/a.md (6 bytes)" in wrote["output"]
    # No elicitation in Gemini CLI: refused, with the key and how it could be granted.
    assert (
        "permission required: run_command needs approval for run_command:touch"
        in (touched["error"])
    )
    assert "codecoder serve --allow run_command:touch" in touched["error"]
    assert own == {
        "error": "Tool execution denied by policy. codecoder does this here: use "
        "mcp_codecoder_write_file or mcp_codecoder_web_fetch"
    }
    assert (project / "notes" / "a.md").read_text() == "noted\n"
    assert not (project / "made").exists() and not (project / "own.md").exists()
    assert audit(project, env) == [
        ("read_file", "ok"),
        ("write_file", "ok"),
        ("run_command", "denied"),
    ]


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
    # Headless: nobody answers Gemini's prompt, so the hook runs --non-interactive
    # (docs/integrations/agents.md).
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
        "error": "Tool execution blocked: codecoder: run_command:touch on @bwrap needs approval, "
        "and nobody can answer here; to allow it for a run: codecoder hook --allow "
        "run_command:touch"
    }
    assert "error" not in notes and (project / "notes" / "b.md").read_text() == "b\n"
    assert settings["error"].startswith("Tool execution blocked: codecoder: write_file:")
    assert json.loads((project / ".gemini" / "settings.json").read_text())["hooks"]
    assert read == {"output": "hello\n"}
    assert not (project / "made").exists()


def test_in_a_terminal_allow_once_at_geminis_prompt_is_once_and_the_users_own_rule_holds(
    project: Path, tmp_path: Path
) -> None:
    """Gemini CLI run by a person (a pseudo-terminal), codecoder as its hook: the hook asks,
    Gemini shows its prompt with codecoder's reason, "Allow once" runs that call only (the same
    key is asked again), a rule of the user's own ~/.gemini/policies allows `ls` without a
    question, and a refused call's reason is shown to the person."""
    env = gemini_env(tmp_path, project)
    env["TERM"] = "xterm-256color"
    trusted_config(project, env, {"deny": ["run_command:git:push"]})
    policies = Path(env["HOME"]) / ".gemini" / "policies"
    policies.mkdir(parents=True)
    (policies / "mine.toml").write_text(
        '[[rule]]\ntoolName = "run_shell_command"\ncommandPrefix = "ls"\n'
        'decision = "allow"\npriority = 100\n'
    )
    # The host's shell on the host (`--host-shell`): Gemini's prompt shows a rewritten command
    # cut at its width, wrapper first, so the contained default's questions would not show
    # which command is asked about (an open item); this test is about Gemini's "Allow once".
    hooks = recipe("gemini-hooks").replace(
        "codecoder hook gemini", "codecoder hook gemini --host-shell"
    )
    (project / ".gemini" / "settings.json").write_text(hooks)
    run = run_agent(
        [str(cli("gemini")), "-i", "Make two files."],
        cwd=project,
        env=env,
        script=[
            Call("run_shell_command", {"command": "touch one"}),
            Call("run_shell_command", {"command": "touch two"}),
            Call("run_shell_command", {"command": "ls"}),
            Call("run_shell_command", {"command": "git push origin main"}),
        ],
        terminal=[
            ("Allow once", "\r"),  # `touch one`
            ("? Shell touch two", ""),  # the same key, asked again
            ("Allow once", "\r"),
            ("All done", ""),
        ],
    )
    assert run.exit_code == 0, run.screen[-3000:]
    screen = run.screen
    assert (project / "one").exists() and (project / "two").exists()
    assert (
        "codecoder: run_command:touch on @shell needs your approval; approving allows this "
        "call only: codecoder asks again next time" in screen
    )
    assert "? Shell ls" not in screen  # the user's own policy allowed it: no question
    assert (
        "codecoder: run_command:git:push is refused: deny rule 'run_command:git:push' of "
        "codecoder.json" in screen
    )
    ls, push = responses(run)[2:]
    assert "README.md" in ls["output"]
    assert push["error"].startswith("Tool execution blocked: codecoder: run_command:git:push")
    # Nothing was recorded for the session, and SessionEnd removed the host session's file.
    state = Path(env["XDG_STATE_HOME"]) / "codecoder" / "projects"
    assert not list(state.rglob("hooks/*.json"))
