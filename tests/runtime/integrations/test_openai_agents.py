"""The OpenAI Agents SDK with codecoder's tools, driven for real by a scripted model through
the SDK's Model interface: which calls need approval, what is refused, and what approving or
rejecting an interruption records through codecoder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner

from codecoder import Answer, Runtime, Session, aevaluate
from codecoder.foundation.state import project_state_directory
from codecoder.integrations.openai_agents import approve, question, reject, tools
from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap
from tests.runtime.integrations.agents_model import ScriptedModel

pytestmark = pytest.mark.anyio

SCRIPT = [
    ("call-echo", "run_command", {"command": "echo hello"}),
    ("call-rm", "run_command", {"command": "rm keep.txt"}),
    ("call-touch", "run_command", {"command": "touch made.txt"}),
]
QUIET = RunConfig(tracing_disabled=True)  # the SDK's own traces would go to OpenAI


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def session(project: Path) -> Iterator[Session]:
    need_bwrap()
    write_config(project, {"deny": ["run_command:rm"]})
    (project / "keep.txt").write_text("precious\n")
    with Runtime(project) as runtime, runtime.session() as session:
        yield session


def audit(project: Path) -> list[tuple[str, str, str | None]]:
    path = project_state_directory(project.resolve()) / "audit.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["key"], r["outcome"], r["answer"]) for r in records]


def agent_with(session: Session, **options: Any) -> Agent[Any]:
    return Agent(name="coder", model=ScriptedModel(SCRIPT), tools=tools(session, **options))


async def test_touch_needs_approval_echo_does_not_and_the_denied_rm_is_refused(
    session: Session, project: Path
) -> None:
    agent = agent_with(session)
    result = await Runner.run(agent, "Tidy up.", run_config=QUIET)

    (item,) = result.interruptions
    assert item.tool_name == "run_command"
    assert json.loads(item.arguments or "") == {"command": "touch made.txt"}
    asked = question(item)
    assert asked is not None and asked.key == "run_command:touch"
    assert not (project / "made.txt").exists()
    assert sorted(audit(project)) == [
        ("run_command:echo", "ok", None),
        ("run_command:rm", "denied", None),
    ]

    state = result.to_state()
    approve(state, item, Answer.SESSION)
    result = await Runner.run(agent, state, run_config=QUIET)

    told = json.loads(result.final_output)
    assert told["call-echo"] == "hello\n[exit code 0]"
    assert told["call-rm"] == (
        "permission denied: run_command:rm is refused by deny rule 'run_command:rm' of "
        "codecoder.json line 3"
    )
    assert told["call-touch"] == "[exit code 0]"
    assert (project / "made.txt").exists()
    assert (project / "keep.txt").read_text() == "precious\n"
    assert audit(project)[2:] == [("run_command:touch", "ok", "session")]
    again = await session.acall("run_command", {"command": "touch other.txt"})
    assert again.decision is not None and again.decision.source.value == "session"


async def test_rejecting_records_the_persons_deny_and_tells_the_model(
    session: Session, project: Path
) -> None:
    agent = agent_with(session)
    result = await Runner.run(agent, "Tidy up.", run_config=QUIET)
    (item,) = result.interruptions
    state = result.to_state()
    reject(state, item)
    result = await Runner.run(agent, state, run_config=QUIET)

    told = json.loads(result.final_output)
    assert told["call-touch"] == (
        "permission denied: run_command:touch was not allowed (denied at the prompt)"
    )
    assert not (project / "made.txt").exists()
    assert audit(project)[2:] == [("run_command:touch", "denied", "deny")]


async def test_the_sdks_own_approval_counts_as_once(session: Session, project: Path) -> None:
    agent = agent_with(session)
    result = await Runner.run(agent, "Tidy up.", run_config=QUIET)
    (item,) = result.interruptions
    state = result.to_state()
    state.approve(item)
    result = await Runner.run(agent, state, run_config=QUIET)
    assert json.loads(result.final_output)["call-touch"] == "[exit code 0]"
    assert audit(project)[2:] == [("run_command:touch", "ok", "once")]
    later = await aevaluate(session, "run_command", {"command": "touch other.txt"})
    assert later.decision == "ask"  # nothing was kept


async def test_always_approve_grants_the_key_for_the_session_and_no_more(
    session: Session, project: Path
) -> None:
    model = ScriptedModel(
        [("c1", "run_command", {"command": "touch made.txt"})],
        [("c2", "run_command", {"command": "chmod 600 keep.txt"})],
        [("c3", "run_command", {"command": "touch other.txt"})],
    )
    agent = Agent(name="coder", model=model, tools=tools(session))
    result = await Runner.run(agent, "Tidy up.", run_config=QUIET)
    (item,) = result.interruptions
    state = result.to_state()
    state.approve(item, always_approve=True)
    # From here the SDK approves every run_command call on its own: codecoder still decides.
    result = await Runner.run(agent, state, run_config=QUIET)

    assert result.interruptions == []
    told = json.loads(result.final_output)
    assert told["c1"] == "[exit code 0]"
    assert told["c2"] == (
        "permission denied: run_command:chmod was not allowed (non-interactive: nothing "
        "granted this key)"
    )
    assert told["c3"] == "[exit code 0]"
    assert (project / "keep.txt").stat().st_mode & 0o777 != 0o600
    assert audit(project) == [
        ("run_command:touch", "ok", "session"),
        ("run_command:chmod", "denied", None),  # nobody answered: non-interactive
        ("run_command:touch", "ok", None),
    ]


async def test_the_tools_carry_codecoders_strict_schemas(session: Session) -> None:
    (run_command,) = tools(session, ["run_command"])
    from codecoder.interfaces.schemas import openai_responses_tool

    runtime = session.runtime
    definition = runtime.tools["run_command"].definition(runtime.environment_of("run_command"))
    exported = openai_responses_tool(definition, strict=True)
    assert run_command.params_json_schema == exported["parameters"]
    assert run_command.strict_json_schema is exported["strict"]
    assert run_command.description == definition.description
