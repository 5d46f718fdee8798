"""Claude Code (the real CLI, from npm) with codecoder, as the recipes of
docs/integrations/agents.md set it up: as its MCP server, and as its permission hook. The model
is the stand-in on 127.0.0.1 playing a script of tool calls; the network is closed
(tests/integrations/agents.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from codecoder.foundation.state import project_state_directory
from tests.integrations.agents import (
    AgentRun,
    base_env,
    cli,
    recipe,
    run_agent,
    shell_lines,
    unavailable,
)
from tests.integrations.standin import Call

pytestmark = pytest.mark.skipif(
    unavailable("claude") is not None, reason=str(unavailable("claude"))
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README.md").write_text("hello\n")
    return root


PLANT = ".codecoder/capabilities/evil/capability.json"  # protected: a capability's code


def claude_env(tmp_path: Path) -> dict[str, str]:
    # MCP_CONNECTION_NONBLOCKING=false: `claude -p` otherwise starts its first turn before its
    # MCP servers have connected (anthropics/claude-code#65094), and on a loaded machine the
    # model is offered no codecoder tool at all (docs/integrations/agents.md says so).
    return base_env(
        tmp_path,
        ANTHROPIC_BASE_URL="{URL}",
        ANTHROPIC_API_KEY="sk-ant-stand-in",
        MCP_CONNECTION_NONBLOCKING="false",
    )


def trusted_config(project: Path, env: dict[str, str], config: dict[str, Any]) -> None:
    """codecoder.json, trusted as its owner would (`codecoder trust --yes`)."""
    (project / "codecoder.json").write_text(json.dumps(config))
    subprocess.run(
        ["codecoder", "trust", "--yes", "--project", str(project)],
        env=env,
        check=True,
        capture_output=True,
    )


def audit(project: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    state = Path(env["XDG_STATE_HOME"]) / "codecoder" / "projects"
    digest = project_state_directory(project.resolve(), {"XDG_STATE_HOME": "/x"}).name
    path = state / digest / "audit.jsonl"
    return [(r["tool"], r["outcome"]) for r in map(json.loads, path.read_text().splitlines())]


def texts(run: AgentRun) -> list[str]:
    """Each tool result as the text the model was shown."""
    shown = []
    for result in run.tool_results():
        content = result["content"]
        if isinstance(content, list):
            content = "".join(block.get("text", "") for block in content)
        shown.append(content)
    return shown


def test_as_its_mcp_server_codecoder_decides_and_claude_codes_own_tools_are_off(
    project: Path, tmp_path: Path
) -> None:
    env = claude_env(tmp_path)
    trusted_config(project, env, {"allowlist": {"write_file:notes/**": "AlwaysThisProject"}})
    claude = str(cli("claude"))
    add, start = shell_lines(recipe("claude-mcp"), PWD=str(project))
    assert add[:3] == ["claude", "mcp", "add"] and start[0] == "claude"
    run = run_agent(
        [
            claude,
            *start[1:],
            "-p",
            "Read the README, take notes, touch a file.",
            "--output-format",
            "json",
        ],
        cwd=project,
        env=env,
        setup=[[claude, *add[1:]]],
        script=[
            Call("mcp__codecoder__read_file", {"path": "README.md"}),
            Call("mcp__codecoder__write_file", {"path": "notes/a.md", "content": "noted\n"}),
            Call("mcp__codecoder__run_command", {"command": "touch made"}),
        ],
    )
    assert run.setup[0]["exit_code"] == 0, run.setup[0]["stderr"]
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["result"] == "All done.", (run.stdout, run.requests)
    offered = run.offered()
    assert {"mcp__codecoder__run_command", "mcp__codecoder__write_file"} <= offered
    assert not offered & {"Bash", "Edit", "Write", "NotebookEdit"}
    read, wrote, touched = texts(run)
    assert read == "     1\thello\n"
    assert wrote == "created notes/a.md (6 bytes)\n"
    assert touched == (
        "permission denied: run_command:touch was not allowed: the MCP client cancelled the "
        "question (no answer was given)"
    )
    assert (project / "notes" / "a.md").read_text() == "noted\n"
    assert not (project / "made").exists()
    assert audit(project, env) == [
        ("read_file", "ok"),
        ("write_file", "ok"),
        ("run_command", "denied"),
    ]


def test_as_its_hook_codecoder_answers_for_claude_codes_own_tools(
    project: Path, tmp_path: Path
) -> None:
    env = claude_env(tmp_path)
    trusted_config(
        project,
        env,
        {
            "allowlist": {"write_file:notes/**": "AlwaysThisProject"},
            "deny": ["run_command:git:push"],
        },
    )
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(recipe("claude-hooks"))
    run = run_agent(
        [str(cli("claude")), "-p", "Work.", "--output-format", "json"],
        cwd=project,
        env=env,
        script=[
            Call("Read", {"file_path": str(project / "README.md")}),
            Call("Write", {"file_path": str(project / "notes" / "b.md"), "content": "b\n"}),
            Call("Bash", {"command": "git push origin main"}),
            Call("Bash", {"command": "touch made"}),
            Call("Read", {"file_path": "/etc/passwd"}),
            Call("Write", {"file_path": str(project / PLANT), "content": "{}"}),
        ],
    )
    assert run.exit_code == 0, run.stderr
    read, wrote, push, touch, passwd, plant = texts(run)
    assert "hello" in read
    assert "notes/b.md" in wrote and (project / "notes" / "b.md").read_text() == "b\n"
    assert push.startswith(
        "codecoder: run_command:git:push is refused: deny rule 'run_command:git:push' of "
        "codecoder.json line "
    )
    # Asked: `claude -p` shows no prompt, so Claude Code refuses it with codecoder's reason.
    # The recipe contains Claude Code's shell in @bwrap (the hook's default).
    assert touch.startswith(
        "codecoder: `touch made` — run_command:touch on @bwrap needs your approval; approving "
        "allows "
        "run_command:touch (every simple `touch …` command, with any arguments) for the rest of "
        "this Claude Code session"
    )
    assert passwd.startswith("codecoder: /etc/passwd is outside the workspace")
    assert plant.startswith(f"codecoder: write_file:{PLANT} on @wasm needs your approval")
    assert "this call only" in plant  # a protected path is never granted for longer
    assert not (project / "made").exists()
    assert not (project / PLANT).exists()
    denials = json.loads(run.stdout)["permission_denials"]
    assert [d["tool_name"] for d in denials] == ["Bash", "Bash", "Read", "Write"]
    # SessionEnd dropped what the host session kept in the state directory.
    state = Path(env["XDG_STATE_HOME"]) / "codecoder" / "projects"
    assert not list(state.rglob("hooks/*.json"))


def test_in_a_terminal_what_the_human_approves_at_claude_codes_prompt_holds_for_the_session(
    project: Path, tmp_path: Path
) -> None:
    """Claude Code run by a person (a pseudo-terminal): the hook asks, Claude Code shows its
    own prompt with codecoder's reason, the person answers Yes once, and the same key is
    allowed for the rest of that session without asking again; a narrower question is not."""
    key = "sk-ant-stand-in-0123456789abcdefghij"
    env = base_env(
        tmp_path, ANTHROPIC_BASE_URL="{URL}", ANTHROPIC_API_KEY=key, TERM="xterm-256color"
    )
    # A person who has used Claude Code before: onboarding done, this key and folder accepted.
    (Path(env["HOME"]) / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "theme": "dark",
                "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
                "projects": {str(project): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(recipe("claude-hooks"))
    run = run_agent(
        [str(cli("claude")), "Make two files, then show the log."],
        cwd=project,
        env=env,
        script=[
            Call("Bash", {"command": "touch one"}),
            Call("Bash", {"command": "touch two"}),
            # Not `git log`: a read-only command runs contained without a question.
            Call("Bash", {"command": "git tag v1"}),
        ],
        terminal=[
            ("Do you want to proceed?", "\r"),  # `touch one`: Yes, this once
            ("Do you want to proceed?", "\x1b"),  # `git tag v1`: Esc
            ("What should Claude do instead?", ""),
        ],
    )
    assert run.exit_code == 0, run.screen[-3000:]
    screen = run.screen
    asked = screen.count("Hook PreToolUse:Bash requires confirmation for this command")
    assert asked == 2, screen[-3000:]  # `touch one` and `git tag v1`; never `touch two`
    assert (
        "codecoder: `touch one` — run_command:touch on @bwrap needs your approval; approving "
        "allows run_command:touch (every simple" in screen
    )
    assert (project / "one").exists() and (project / "two").exists()
    assert (
        "codecoder: `git tag v1` — run_command:git:tag on @bwrap needs your approval; approving "
        "allows run_command:git:tag (only" in screen
    )
    results = [r["content"] for r in run.tool_results()]
    assert results[1] == "(Bash completed with no output)"  # allowed by the recorded grant
    # SessionEnd dropped the host session's grants when Claude Code ended.
    state = Path(env["XDG_STATE_HOME"]) / "codecoder" / "projects"
    assert not list(state.rglob("hooks/*.json"))


def test_in_a_terminal_the_users_own_claude_settings_grant_and_a_refusal_is_on_screen(
    project: Path, tmp_path: Path
) -> None:
    """Claude Code run by a person, codecoder as its hook: `Bash(ls:*)` in the user's own
    ~/.claude/settings.json keeps allowing `ls` without a question (the project's own settings
    grant nothing), and a call codecoder refuses shows its reason in the transcript."""
    key = "sk-ant-stand-in-0123456789abcdefghij"
    env = base_env(
        tmp_path, ANTHROPIC_BASE_URL="{URL}", ANTHROPIC_API_KEY=key, TERM="xterm-256color"
    )
    home = Path(env["HOME"])
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "theme": "dark",
                "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
                "projects": {str(project): {"hasTrustDialogAccepted": True}},
            }
        )
    )
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(ls:*)"]}})
    )
    trusted_config(project, env, {"deny": ["run_command:git:push"]})
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(recipe("claude-hooks"))
    run = run_agent(
        [str(cli("claude")), "List the files, then push."],
        cwd=project,
        env=env,
        script=[
            Call("Bash", {"command": "ls -a"}),
            Call("Bash", {"command": "git push origin main"}),
        ],
        terminal=[("PreToolUse:Bash says: codecoder: run_command:git:push is refused", "")],
    )
    assert run.exit_code == 0, run.screen[-3000:]
    assert "Do you want to proceed?" not in run.screen  # nothing was asked
    refusal = (
        "codecoder: run_command:git:push is refused: deny rule 'run_command:git:push' of "
        "codecoder.json"
    )
    listed, pushed = [r["content"] for r in run.tool_results()]
    assert "README.md" in listed
    assert refusal in pushed
