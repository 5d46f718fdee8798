"""@docker per session: each session of a runtime has its own sandboxes, through the whole chain.

Sessions of one runtime share its configuration and its connection to the engine, never a
container: what one session's commands leave is not another's, and one session's long call
does not hold up another's.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from codecoder.dispatcher import CallOutcome
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.permissions.prompt import fixed
from codecoder.session import Runtime, Session
from tests.conftest import write_config
from tests.environments.bwrap_support import processes_with

CONFIG = {
    "environments": {"run_command": "@docker"},
    "allowlist": {"run_command:*": "AlwaysThisProject"},
}


def call(session: Session, command: str) -> CallOutcome:
    outcome = session.call("run_command", {"command": command})
    assert outcome.ok, outcome.to_json()
    return outcome


def output(outcome: CallOutcome) -> Any:
    assert outcome.result is not None
    return outcome.result.data["stdout"]


@pytest.fixture
def runtime(workspace: Path) -> Runtime:
    write_config(workspace, CONFIG)
    return Runtime(workspace)


@pytest.mark.docker
def test_each_session_runs_in_its_own_sandbox(runtime: Runtime, docker_engine: Any) -> None:
    with runtime, runtime.session() as first, runtime.session() as second:
        call(first, "touch /tmp/first-was-here")
        seen_by_first = output(call(first, "ls /tmp"))
        seen_by_second = output(call(second, "ls /tmp"))
        mine = {
            s.id: docker_engine.api.containers(filters={"label": f"codecoder.session={s.id}"})
            for s in (first, second)
        }

    assert seen_by_first == "first-was-here\n"
    assert seen_by_second == ""
    assert [len(found) for found in mine.values()] == [1, 1]
    assert mine[first.id][0]["Id"] != mine[second.id][0]["Id"]


@pytest.mark.docker
def test_one_sessions_long_call_does_not_hold_up_another(runtime: Runtime) -> None:
    with runtime, runtime.session() as slow, runtime.session() as quick:
        call(slow, "true")
        call(quick, "true")
        started = threading.Event()
        done: list[CallOutcome] = []

        def long_call() -> None:
            started.set()
            done.append(slow.call("run_command", {"command": "sleep 20"}))

        thread = threading.Thread(target=long_call)
        thread.start()
        started.wait()
        quick_outcome = call(quick, "echo quick")
        still_running = thread.is_alive()
        thread.join()

    assert output(quick_outcome) == "quick\n"
    assert still_running
    assert [outcome.ok for outcome in done] == [True], [o.to_json() for o in done]


@pytest.mark.docker
def test_closing_a_session_removes_its_sandboxes(runtime: Runtime, docker_engine: Any) -> None:
    with runtime:
        session = runtime.session()
        call(session, "true")
        mine = {"label": f"codecoder.session={session.id}"}
        before = docker_engine.api.containers(all=True, filters=mine)
        session.close()
        after = docker_engine.api.containers(all=True, filters=mine)

    assert len(before) == 1
    assert after == []


def test_an_environment_given_to_the_runtime_is_shared_by_its_sessions(project: Path) -> None:
    def answer(request: CommandRequest) -> CommandResult:
        return CommandResult(0, "", "", 0.0)

    given = MockEnvironment(answer, EnvironmentTag.DOCKER)
    with Runtime(project, environments={EnvironmentTag.DOCKER: given}) as shared:
        first = shared.environment(EnvironmentTag.DOCKER, session="one")
        second = shared.environment(EnvironmentTag.DOCKER, session="two")

    assert first is given and second is given


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_cancelled_acall_stops_the_command_in_the_container(
    workspace: Path, docker_engine: Any, anyio_backend: str
) -> None:
    write_config(workspace, {"environments": {"run_command": "@docker"}})
    marker = f"4243.{os.getpid()}"
    command = f"sleep {marker} & sleep {marker}; wait"
    with Runtime(workspace, asker=fixed(Answer.ONCE)) as runtime, runtime.session() as session:
        task = asyncio.ensure_future(session.acall("run_command", {"command": command}))
        deadline = time.monotonic() + 120
        while len(processes_with(marker)) < 2:
            assert time.monotonic() < deadline, "the command never started"
            assert not task.done(), task.result().to_json()
            await asyncio.sleep(0.05)
        (container,) = docker_engine.api.containers(
            filters={"label": f"codecoder.session={session.id}"}
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Stopped when the cancellation came through (with the sandbox it ran in).
        assert processes_with(marker) == []
        left = docker_engine.api.containers(filters={"id": container["Id"]})
        assert left == [] or not [
            p
            for p in docker_engine.api.top(container["Id"], ps_args="-efww")["Processes"] or []
            if marker in " ".join(p)
        ]
