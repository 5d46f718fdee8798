"""What each agent framework's adapter adds to a call: the adapter's own entry point for one
tool call, against `Session.call` of the same call, in the same run.

The call is `run_command` `git status` (a read-only command: no question) on a mock @bwrap
environment: the tool costs next to nothing, so what is measured is the adapter (and the async
face under it), not the command. Each adapter is driven where its framework drives it, once per
tool call:

    acall            `await Session.acall(...)`: the worker thread of the async face
    pydantic_ai      `CodecoderToolset.call_tool(...)`: evaluate (off the loop), then acall
    openai_agents    the FunctionTool's `needs_approval(...)` then `on_invoke_tool(...)`
    claude_agent_sdk the PreToolUse hook (`hooks.handle`, which builds a runtime for each
                     event, as the command-line hook does) for a Bash `git status`

An async subject is timed inside one coroutine on an event loop (`asyncio.run`), a batch of
calls one after another as an agent's loop makes them, after one call not timed (which starts
anyio's worker thread, kept for the rest); each sample is the batch's time per call. A framework
that is not installed is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from codecoder.benchmarks.measure import Measured, SelfTimed, Subject, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.session import Session

__all__ = ["AREA"]

CALL = "Session.call"
ARGS = {"command": "git status"}

SPECS = (
    FigureSpec("frameworks.acall", "await Session.acall (the async face)", "us", CALL),
    FigureSpec("frameworks.pydantic_ai", "pydantic-ai: CodecoderToolset.call_tool", "us", CALL),
    FigureSpec(
        "frameworks.openai_agents",
        "OpenAI Agents SDK: needs_approval + on_invoke_tool",
        "us",
        CALL,
    ),
    FigureSpec(
        "frameworks.claude_agent_sdk",
        "Claude Agent SDK: the PreToolUse hook (a runtime per event)",
        "us",
        CALL,
    ),
)


def _answer(request: CommandRequest) -> CommandResult:
    return CommandResult(exit_code=0, stdout="ok\n", stderr="", duration=0.0)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured | Skipped]]:
    tools = require_tools("run_command")
    project = make_project(ctx.scratch / "frameworks")
    mock = MockEnvironment(_answer, EnvironmentTag.BWRAP)
    with (
        make_runtime(project, environments={EnvironmentTag.BWRAP: mock}, tools=tools) as runtime,
        runtime.session() as session,
    ):
        yield _measure(ctx, session, project)


def _measure(ctx: BenchContext, session: Session, project: Path) -> dict[str, Measured | Skipped]:
    calls = 5 if ctx.quick else 20

    def on_loop(make: Callable[[], Awaitable[object]]) -> SelfTimed:
        async def batch() -> float:
            await make()  # starts the worker thread
            started = time.perf_counter()
            for _ in range(calls):
                await make()
            return (time.perf_counter() - started) / calls

        return SelfTimed(lambda: asyncio.run(batch()))

    figures: dict[str, tuple[Subject, str]] = {
        "frameworks.acall": (on_loop(lambda: session.acall("run_command", ARGS)), CALL),
    }
    skipped: dict[str, Skipped] = {}
    for name, adapter in (
        ("frameworks.pydantic_ai", _pydantic_ai),
        ("frameworks.openai_agents", _openai_agents),
        ("frameworks.claude_agent_sdk", _claude_agent_sdk),
    ):
        module = "codecoder.integrations." + name.split(".")[1]
        framework = {"pydantic_ai": "pydantic_ai", "openai_agents": "agents"}.get(
            name.split(".")[1], "claude_agent_sdk"
        )
        if importlib.util.find_spec(framework) is None:
            skipped[name] = Skipped(f"{framework} is not installed (the extra of {module})")
            continue
        call = adapter(session, project)
        _check(asyncio.run(_awaited(call)))
        figures[name] = (on_loop(call), CALL)
    _check(session.call("run_command", ARGS).text)
    measured: dict[str, Measured | Skipped] = dict(
        compare(
            figures,
            {CALL: lambda: session.call("run_command", ARGS)},
            rounds=ctx.rounds(15, 5),
            sample_seconds=ctx.sample_seconds,
        )
    )
    for name, note in NOTES.items():
        found = measured.get(name)
        if isinstance(found, Measured):
            found.note = note
    measured.update(skipped)
    return {spec.name: measured[spec.name] for spec in SPECS}


NOTES = {
    "frameworks.acall": "one more round trip, loop → worker thread → loop: the call runs off "
    "the loop",
    "frameworks.pydantic_ai": "two round trips to a worker thread: evaluate (a question ends "
    "the run before anything runs), then acall",
    "frameworks.openai_agents": "two round trips to a worker thread: needs_approval's evaluate, "
    "then on_invoke_tool's acall (the SDK calls them separately)",
    "frameworks.claude_agent_sdk": "one round trip; the hook reads codecoder.json and the trust "
    "record into a new runtime for each event, as `codecoder hook` does",
}


async def _awaited(make: Callable[[], Awaitable[object]]) -> object:
    return await make()


def _pydantic_ai(session: Session, project: Path) -> Callable[[], Awaitable[object]]:
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    from codecoder.integrations.pydantic_ai import toolset

    tools = toolset(session, ["run_command"])
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="bench")
    tool = asyncio.run(tools.get_tools(ctx))["run_command"]
    return lambda: tools.call_tool("run_command", dict(ARGS), ctx, tool)


def _openai_agents(session: Session, project: Path) -> Callable[[], Awaitable[object]]:
    from agents.tool_context import ToolContext

    from codecoder.integrations.openai_agents import tools

    (tool,) = tools(session, ["run_command"])
    arguments = json.dumps(ARGS)
    context = ToolContext(
        context=None, tool_name="run_command", tool_call_id="bench", tool_arguments=arguments
    )
    check = tool.needs_approval
    assert callable(check)

    async def one() -> object:
        if await check(context, dict(ARGS), "bench"):
            raise RuntimeError("benchmark set-up went wrong: the call needs approval")
        return await tool.on_invoke_tool(context, arguments)

    return one


def _claude_agent_sdk(session: Session, project: Path) -> Callable[[], Awaitable[object]]:
    from codecoder.integrations.claude_agent_sdk import ClaudeCodePermissions

    permissions = ClaudeCodePermissions(project)
    event = {
        "session_id": "bench",
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "git status"},
        "tool_use_id": "bench",
    }

    async def one() -> object:
        answer = await permissions.pre_tool_use(event, "bench", {"signal": None})
        if answer["hookSpecificOutput"]["permissionDecision"] != "allow":
            raise RuntimeError(f"benchmark set-up went wrong: {answer}")
        return answer

    return one


def _check(value: object) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    if "permission denied" in text or "invalid call" in text:
        raise RuntimeError(f"benchmark set-up went wrong: {text}")


AREA = Area("frameworks", "Agent framework adapters over Session.call", SPECS, run, cheap=True)
