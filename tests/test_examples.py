"""Every example in examples/ runs, offline, and does what its docstring says (the Claude Agent
SDK's, which needs the Claude Code CLI and a model, is run by
tests/runtime/integrations/test_claude_agent_sdk.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    need_bwrap()
    root = tmp_path / "project"
    root.mkdir()
    (root / "keep.txt").write_text("precious\n")
    write_config(root, {"deny": ["run_command:rm"]})
    return root


def example(name: str, project: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(project)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_example_is_run_by_a_test() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == [
        "claude_agent_sdk_agent.py",
        "openai_agents_agent.py",
        "opentelemetry_spans.py",
        "pydantic_ai_agent.py",
        "python_api.py",
    ]


def test_the_python_api_example(project: Path) -> None:
    lines = example("python_api.py", project)
    assert lines == [
        "'echo hello': ok=True source=read-only",
        "asked: run_command:touch (@bwrap), choices: once, session, project, project-any, "
        "every-project, deny",
        "'touch made.txt': ok=True source=session",
        "'touch again.txt': ok=True source=session",
        "asked: run_command:chmod (@bwrap), choices: once, session, project, project-any, "
        "every-project, deny",
        "'chmod 600 made.txt': ok=False source=denied",
        "asked: run_command:chmod (@bwrap), choices: once, session, project, project-any, "
        "every-project, deny",
        "refused: run_command:chmod was not allowed (denied at the prompt)",
        "read made.txt: ok=True",
        "the long command was cancelled and stopped",
    ]


REFUSED = "run_command:rm is refused by deny rule 'run_command:rm' of codecoder.json line 3"


def test_the_pydantic_ai_example(project: Path) -> None:
    asked, told = example("pydantic_ai_agent.py", project)
    assert asked == (
        "asked: run_command:touch in @bwrap: ['once', 'session', 'project', 'project-any', "
        "'every-project', 'deny']"
    )
    assert json.loads(told) == {
        "call-0": "hello\n[exit code 0]",
        "call-1": json.dumps({"error": f"permission denied: {REFUSED}"}, separators=(",", ":")),
        "call-2": "[exit code 0]",
    }
    assert (project / "made.txt").exists()
    assert (project / "keep.txt").exists()


def test_the_openai_agents_example(project: Path) -> None:
    asked, told = example("openai_agents_agent.py", project)
    assert asked == "asked: run_command:touch"
    assert json.loads(told) == {
        "call-0": "hello\n[exit code 0]",
        "call-1": f"permission denied: {REFUSED}",
        "call-2": "[exit code 0]",
    }
    assert (project / "made.txt").exists()
    assert (project / "keep.txt").exists()


def test_the_opentelemetry_example(project: Path) -> None:
    text = "\n".join(example("opentelemetry_spans.py", project))
    spans = json.loads("[" + text.replace("}\n{", "},\n{") + "]")
    assert [span["name"] for span in spans] == [
        "execute_tool run_command",
        "execute_tool run_command",
        "agent turn",
    ]
    echo, touch, _ = spans
    assert echo["attributes"]["gen_ai.tool.call.id"] == "call-1"
    assert echo["attributes"]["codecoder.decision"] == "allow"
    assert touch["attributes"]["codecoder.answer"] == "once"
    assert [event["name"] for event in touch["events"]] == [
        "codecoder.question",
        "codecoder.answer",
    ]
    assert echo["parent_id"] == touch["parent_id"] == spans[2]["context"]["span_id"]
