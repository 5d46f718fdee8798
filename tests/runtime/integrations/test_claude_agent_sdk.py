"""The Claude Agent SDK driving the real Claude Code CLI (tests/integrations/node_modules),
against the stand-in model on 127.0.0.1 with the network closed (tests/integrations/agents.py),
with codecoder's hooks and `can_use_tool` (examples/claude_agent_sdk_agent.py runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codecoder.foundation.state import project_state_directory
from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap
from tests.integrations.agents import REPO, AgentRun, base_env, cli, run_agent, unavailable
from tests.integrations.standin import Call

pytestmark = pytest.mark.skipif(
    unavailable("claude") is not None, reason=str(unavailable("claude"))
)

EXAMPLE = REPO / "examples" / "claude_agent_sdk_agent.py"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "keep.txt").write_text("precious\n")
    return root


def texts(run: AgentRun) -> list[str]:
    shown = []
    for result in run.tool_results():
        content = result["content"]
        if isinstance(content, list):
            content = "".join(block.get("text", "") for block in content)
        shown.append(content)
    return shown


def test_claudes_bash_is_decided_by_codecoder_and_runs_contained(
    project: Path, tmp_path: Path
) -> None:
    need_bwrap()
    env = base_env(tmp_path, ANTHROPIC_BASE_URL="{URL}", ANTHROPIC_API_KEY="sk-ant-stand-in")
    state = Path(env["XDG_STATE_HOME"])
    write_config(project, {"deny": ["run_command:rm"]}, trusted=False)
    subprocess.run(
        [sys.executable, "-m", "codecoder", "trust", "--yes", "--project", str(project)],
        env=env,
        check=True,
        capture_output=True,
    )
    run = run_agent(
        [sys.executable, str(EXAMPLE), str(project), str(cli("claude"))],
        cwd=project,
        env=env,
        script=[
            Call("Bash", {"command": "echo hello from codecoder", "description": "say hello"}),
            Call("Bash", {"command": "rm keep.txt", "description": "tidy up"}),
            Call("Bash", {"command": "touch done.txt", "description": "mark done"}),
        ],
    )
    assert run.exit_code == 0, run.stderr
    printed = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert {"asked": "run_command:touch", "choices": ["once", "session", "deny"]} in printed
    hello, refused, touched = texts(run)
    assert hello.strip() == "hello from codecoder"
    assert refused == (
        "codecoder: run_command:rm is refused: deny rule 'run_command:rm' of codecoder.json line 3"
    )
    assert (project / "keep.txt").read_text() == "precious\n"
    assert (project / "done.txt").exists()
    assert touched == "(Bash completed with no output)"
    # The commands ran through `codecoder exec`, contained, and were audited there.
    digest = project_state_directory(project.resolve(), {"XDG_STATE_HOME": "/x"}).name
    records = [
        json.loads(line)
        for line in (state / "codecoder" / "projects" / digest / "audit.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [(r["key"], r["environment"], r["outcome"], r["source"]) for r in records] == [
        ("run_command:echo", "@bwrap", "ok", "read-only"),
        ("run_command:rm", "@bwrap", "denied", "deny"),  # the hook's refusal, audited
        ("run_command:touch", "@bwrap", "ok", "once"),
    ]
