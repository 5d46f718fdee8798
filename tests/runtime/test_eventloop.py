"""The async face: `await session.acall(...)`, askers that are coroutines, cancellation that
stops what a call started (real processes on the host and in bubblewrap), `async with`."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import codecoder
from codecoder import Answer, AskRequest, EnvironmentTag, Runtime
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.state import project_state_directory
from tests.conftest import RecordingAsker, echo_handler
from tests.environments.bwrap_support import need_bwrap, processes_with

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def audit(project: Path) -> list[dict[str, Any]]:
    path = project_state_directory(project.resolve()) / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_acall_gives_the_outcome_call_gives(make_runtime: Callable[..., Runtime]) -> None:
    async with make_runtime(RecordingAsker(Answer.ONCE, Answer.ONCE)) as runtime:
        async with runtime.session() as session:
            awaited = await session.acall("run_command", {"command": "touch a"})
        plain = runtime.session().call("run_command", {"command": "touch a"})
    timings = {"duration_ms": 0, "waited_ms": 0}
    assert awaited.to_json() | timings == plain.to_json() | timings
    assert awaited.unwrap().output.startswith("touch a")


async def test_acall_does_not_block_the_event_loop(project: Path) -> None:
    # The command waits for a coroutine on the caller's loop: a blocked loop never runs it.
    released = threading.Event()

    def waits(request: CommandRequest) -> CommandResult:
        ran = released.wait(30)
        return CommandResult(0, f"released: {ran}\n", "", 0.0)

    env = MockEnvironment(waits, EnvironmentTag.BWRAP)
    runtime = Runtime(project, environments={EnvironmentTag.BWRAP: env})

    async def release() -> None:
        await asyncio.sleep(0)
        released.set()

    with runtime, runtime.session() as session:
        outcome, _ = await asyncio.gather(
            session.acall("run_command", {"command": "ls"}), release()
        )
    assert outcome.unwrap().output.startswith("released: True")


async def test_an_async_asker_is_asked_on_the_callers_loop(
    make_runtime: Callable[..., Runtime],
) -> None:
    loop_thread = threading.get_ident()
    asked: list[tuple[str, bool]] = []

    async def ask(request: AskRequest) -> Answer:
        await asyncio.sleep(0)
        asked.append((request.key, threading.get_ident() == loop_thread))
        return Answer.SESSION

    with make_runtime(ask) as runtime, runtime.session() as session:
        first = await session.acall("run_command", {"command": "touch a"})
        second = await session.acall("run_command", {"command": "touch b"})
    assert asked == [("run_command:touch", True)]
    assert (first.decision.source.value, second.decision.source.value) == ("session", "session")
    assert second.ok


def test_an_async_asker_answers_a_plain_call_on_a_loop_of_its_own(
    make_runtime: Callable[..., Runtime],
) -> None:
    async def ask(request: AskRequest) -> Answer:
        await asyncio.sleep(0)
        return Answer.ONCE

    with make_runtime(ask) as runtime, runtime.session() as session:
        outcome = session.call("run_command", {"command": "touch a"})
    assert outcome.ok and outcome.decision is not None
    assert outcome.decision.answer is Answer.ONCE


async def test_an_async_asker_cannot_answer_a_blocking_call_made_on_the_loop(
    make_runtime: Callable[..., Runtime],
) -> None:
    async def ask(request: AskRequest) -> Answer:
        return Answer.ONCE

    with make_runtime(ask) as runtime, runtime.session() as session:
        outcome = session.call("run_command", {"command": "touch a"})
    assert isinstance(outcome.error, codecoder.UsageError)
    assert "await session.acall" in str(outcome.error)


async def test_a_calls_own_asker_answers_instead_of_the_sessions(
    make_runtime: Callable[..., Runtime],
) -> None:
    sessions = RecordingAsker(Answer.DENY)
    mine = RecordingAsker(Answer.ONCE)
    with make_runtime(sessions) as runtime, runtime.session() as session:
        outcome = await session.acall("run_command", {"command": "touch a"}, asker=mine)
    assert outcome.ok
    assert [r.key for r in mine.requests] == ["run_command:touch"]
    assert sessions.requests == []


def test_without_an_asker_nothing_is_asked_and_what_no_rule_grants_is_denied(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Even where a terminal could be asked: a Python application says who answers.
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(codecoder.session.TerminalPrompt, "available", classmethod(lambda c: True))
    env = MockEnvironment(echo_handler, EnvironmentTag.BWRAP)
    with Runtime(project, environments={EnvironmentTag.BWRAP: env}) as runtime:
        outcome = runtime.session().call("run_command", {"command": "touch a"})
    assert isinstance(outcome.error, codecoder.DeniedByUser)
    assert outcome.decision is not None
    assert outcome.decision.reason == "non-interactive: nothing granted this key"
    assert env.requests == []


# --- cancellation stops what the call started ---------------------------------------------------


async def _cancelled_while_running(session: codecoder.Session, marker: str, processes: int) -> None:
    """Start a command leaving `processes` processes with `marker`, cancel its acall once they
    run, and return when the cancellation has come through."""
    command = f"sleep {marker} & sleep {marker}; wait"
    task = asyncio.ensure_future(session.acall("run_command", {"command": command}))
    deadline = time.monotonic() + 60
    while len(processes_with(marker)) < processes:
        assert time.monotonic() < deadline, "the command never started"
        assert not task.done(), task.result().to_json()
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("where", [EnvironmentTag.SHELL, EnvironmentTag.BWRAP])
async def test_a_cancelled_acall_kills_the_commands_whole_process_tree(
    project: Path, where: EnvironmentTag
) -> None:
    if where is EnvironmentTag.BWRAP:
        need_bwrap()
    marker = f"4242.{os.getpid()}{1 if where is EnvironmentTag.SHELL else 2}"  # a duration
    with (
        Runtime(
            project, asker=codecoder.fixed(Answer.ONCE), bindings={"run_command": where}
        ) as runtime,
        runtime.session() as session,
    ):
        await _cancelled_while_running(session, marker, processes=2)
        # Gone when the cancellation came through, not some time later.
        assert processes_with(marker) == []
    (record,) = audit(project)
    assert (record["tool"], record["environment"], record["outcome"]) == (
        "run_command",
        where.value,
        "cancelled",
    )


async def test_cancelling_an_open_async_question_denies_it_and_runs_nothing(
    make_runtime: Callable[..., Runtime], project: Path
) -> None:
    opened = asyncio.Event()
    cancelled: list[bool] = []

    async def ask(request: AskRequest) -> Answer:
        opened.set()
        try:
            await asyncio.sleep(3600)  # a person who never answers
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return Answer.ONCE

    with make_runtime(ask) as runtime, runtime.session() as session:
        task = asyncio.ensure_future(session.acall("run_command", {"command": "touch a"}))
        await opened.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        shell = runtime.environment(EnvironmentTag.BWRAP)
    assert cancelled == [True]
    assert isinstance(shell, MockEnvironment) and shell.requests == []
    (record,) = audit(project)
    assert (record["outcome"], record["source"]) == ("denied", "denied")
