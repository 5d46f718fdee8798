"""pydantic-ai with codecoder's toolset, driven for real by a scripted FunctionModel: what runs,
what is refused, what is deferred for a person's approval, and what the answer grants."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, ToolDenied
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from codecoder import Answer, AskRequest, Runtime, Session
from codecoder.foundation.state import project_state_directory
from codecoder.integrations.pydantic_ai import results, toolset
from tests.conftest import write_config
from tests.environments.bwrap_support import need_bwrap

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def session(project: Path) -> Iterator[Session]:
    """A project with a deny rule for rm, commands in real bubblewrap, nobody to ask."""
    need_bwrap()
    write_config(project, {"deny": ["run_command:rm"]})
    (project / "keep.txt").write_text("precious\n")
    with Runtime(project) as runtime, runtime.session() as session:
        yield session


SCRIPT = [
    ("call-echo", {"command": "echo hello from the sandbox"}),
    ("call-rm", {"command": "rm keep.txt"}),
    ("call-touch", {"command": "touch made.txt"}),
]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: the three commands at once, then what it was told of each."""
    returned = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not returned:
        return ModelResponse(
            parts=[
                ToolCallPart("run_command", json.dumps(args), tool_call_id=call_id)
                for call_id, args in SCRIPT
            ]
        )
    told = {part.tool_call_id: [part.outcome, part.model_response_str()] for part in returned}
    return ModelResponse(parts=[TextPart(json.dumps(told))])


def audit(project: Path) -> list[tuple[str, str | None, str | None]]:
    path = project_state_directory(project.resolve()) / "audit.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["key"], r["outcome"], r["answer"]) for r in records]


async def test_echo_runs_the_denied_rm_is_refused_and_touch_waits_for_approval(
    session: Session, project: Path
) -> None:
    agent = Agent(
        FunctionModel(scripted),
        toolsets=[toolset(session)],
        output_type=[str, DeferredToolRequests],
    )
    run = await agent.run("Tidy up.")

    assert isinstance(run.output, DeferredToolRequests)
    (pending,) = run.output.approvals
    assert pending.tool_call_id == "call-touch"
    question = run.output.metadata["call-touch"]["codecoder"]
    assert (question["decision"], question["key"], question["environment"]) == (
        "ask",
        "run_command:touch",
        "@bwrap",
    )
    assert question["choices"] == [
        "once",
        "session",
        "project",
        "project-any",
        "every-project",
        "deny",
    ]
    assert not (project / "made.txt").exists()  # not before approval
    assert (project / "keep.txt").read_text() == "precious\n"  # never
    assert sorted(audit(project)) == [  # the calls ran side by side
        ("run_command:echo", "ok", None),
        ("run_command:rm", "denied", None),
    ]

    resumed = await agent.run(
        message_history=run.all_messages(),
        deferred_tool_results=results(run.output, {"call-touch": Answer.SESSION}),
    )

    told = json.loads(resumed.output)
    assert told["call-echo"] == ["success", "hello from the sandbox\n[exit code 0]"]
    outcome, refusal = told["call-rm"]
    assert outcome == "failed"
    assert json.loads(refusal) == {
        "error": "permission denied: run_command:rm is refused by deny rule 'run_command:rm' "
        "of codecoder.json line 3"
    }
    assert told["call-touch"] == ["success", "[exit code 0]"]
    assert (project / "made.txt").exists()
    assert (project / "keep.txt").read_text() == "precious\n"
    assert audit(project)[2:] == [("run_command:touch", "ok", "session")]
    # The answer's scope holds: touch is now granted for the session, with no question.
    again = await session.acall("run_command", {"command": "touch other.txt"})
    assert again.ok and again.decision is not None
    assert again.decision.source.value == "session"


async def test_a_deny_answer_is_refused_through_codecoder_and_recorded(
    session: Session, project: Path
) -> None:
    agent = Agent(
        FunctionModel(scripted),
        toolsets=[toolset(session)],
        output_type=[str, DeferredToolRequests],
    )
    run = await agent.run("Tidy up.")
    assert isinstance(run.output, DeferredToolRequests)
    resumed = await agent.run(
        message_history=run.all_messages(),
        deferred_tool_results=results(run.output, {"call-touch": "deny"}),
    )
    outcome, refusal = json.loads(resumed.output)["call-touch"]
    assert outcome == "failed"
    assert json.loads(refusal) == {
        "error": "permission denied: run_command:touch was not allowed (denied at the prompt)"
    }
    assert not (project / "made.txt").exists()
    assert audit(project)[2:] == [("run_command:touch", "denied", "deny")]


async def test_a_plain_approval_counts_as_once_and_a_plain_denial_runs_nothing(
    session: Session, project: Path
) -> None:
    agent = Agent(
        FunctionModel(scripted),
        toolsets=[toolset(session)],
        output_type=[str, DeferredToolRequests],
    )
    run = await agent.run("Tidy up.")
    assert isinstance(run.output, DeferredToolRequests)
    once = await agent.run(
        message_history=run.all_messages(),
        deferred_tool_results=run.output.build_results(approvals={"call-touch": True}),
    )
    assert json.loads(once.output)["call-touch"] == ["success", "[exit code 0]"]
    assert audit(project)[2:] == [("run_command:touch", "ok", "once")]

    denied = await agent.run(
        message_history=run.all_messages(),
        deferred_tool_results=run.output.build_results(
            approvals={"call-touch": ToolDenied("not now")}
        ),
    )
    assert json.loads(denied.output)["call-touch"] == ["denied", "not now"]
    assert len(audit(project)) == 3  # nothing reached codecoder


async def test_an_asker_answers_during_the_run_instead_of_deferring(
    session: Session, project: Path
) -> None:
    asked: list[str] = []

    async def ask(request: AskRequest) -> Answer:
        asked.append(request.key)
        return Answer.ONCE

    agent = Agent(FunctionModel(scripted), toolsets=[toolset(session, asker=ask)])
    run = await agent.run("Tidy up.")
    told = json.loads(run.output)
    assert asked == ["run_command:touch"]
    assert told["call-touch"] == ["success", "[exit code 0]"]
    assert told["call-rm"][0] == "failed"
    assert (project / "made.txt").exists()
    assert (project / "keep.txt").exists()


async def test_the_tools_are_offered_with_codecoders_own_schemas(session: Session) -> None:
    seen: list[AgentInfo] = []

    def look(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(look), toolsets=[toolset(session, tools=["run_command", "grep"])])
    await agent.run("Look.")
    offered = {tool.name: tool for tool in seen[0].function_tools}
    assert set(offered) == {"run_command", "grep"}
    from codecoder.interfaces.schemas import input_schema

    runtime = session.runtime
    definition = runtime.tools["run_command"].definition(runtime.environment_of("run_command"))
    assert offered["run_command"].parameters_json_schema == input_schema(definition)
    assert offered["run_command"].description == definition.description


async def test_invalid_arguments_ask_the_model_to_correct_them(session: Session) -> None:
    calls: list[Any] = []

    def wrong_then_right(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(messages[-1])
        if len(calls) == 1:
            return ModelResponse(parts=[ToolCallPart("run_command", {"cmd": "ls"}, "c1")])
        if len(calls) == 2:
            return ModelResponse(parts=[ToolCallPart("run_command", {"command": "ls"}, "c2")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(wrong_then_right), toolsets=[toolset(session)])
    run = await agent.run("List.")
    assert run.output == "done"
    retry = calls[1].parts[0]
    assert "invalid arguments for run_command: command: Field required" in retry.content
