"""Throughput: tool calls per second with 1, 4 and 16 concurrent callers (threads) on each
environment, through the runtime and on the environment alone.

Each figure is the runtime's rate (`Session.call` from every caller, one session shared) against
the environment's own rate with as many callers (`Environment.run`, or `ConfinedFiles.read` for
@wasm), so the ratio is the share of the environment's throughput the runtime keeps. How both
scale from one caller is in the note and in `extra`: where the runtime scales worse than its
environment, the runtime serialises.

The calls: `run_command` of `true` on an environment that answers at once (the dispatcher
alone), on @shell and on @docker; `read_file` of a small file on @wasm. A sample lasts about
0.3 s (0.05 s with --quick).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured, SelfTimed, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped
from codecoder.benchmarks.workspace import (
    SMALL_FILE,
    make_project,
    make_runtime,
    require_tools,
)
from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.permissions.commandkey import key_command
from codecoder.session import Session

__all__ = ["AREA", "calls_per_second"]

CALLERS = (1, 4, 16)
ENVIRONMENTS = ("mock", "shell", "wasm", "docker")
_WHAT = {
    "mock": "run_command `true`, an environment that answers at once",
    "shell": "run_command `true`, @shell",
    "wasm": "read_file, @wasm",
    "docker": "run_command `true`, warm @docker",
}


def _specs() -> tuple[FigureSpec, ...]:
    return tuple(
        FigureSpec(
            f"throughput.{env}.{callers}",
            f"calls/s, {callers} caller{'s' if callers > 1 else ''}: {_WHAT[env]}",
            "calls/s",
            f"the environment alone, {callers} caller{'s' if callers > 1 else ''}",
            better="higher",
        )
        for env in ENVIRONMENTS
        for callers in CALLERS
    )


SPECS = _specs()


def calls_per_second(fn: Callable[[], object], callers: int, calls: int) -> float:
    """Run `fn` `calls` times split over `callers` threads started together; calls per second."""
    each = max(1, calls // callers)
    start = threading.Barrier(callers + 1)
    errors: list[BaseException] = []

    def caller() -> None:
        start.wait()
        try:
            for _ in range(each):
                fn()
        except BaseException as exc:  # reported below, in the measuring thread
            errors.append(exc)

    threads = [threading.Thread(target=caller, daemon=True) for _ in range(callers)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return each * callers / elapsed


def _ok(session: Session, tool: str, args: dict[str, Any]) -> Callable[[], object]:
    def call() -> object:
        outcome = session.call(tool, args)
        if not outcome.ok:
            raise RuntimeError(f"{tool} failed under load: {outcome.to_json()['error']}")
        return outcome

    return call


class _Succeeding(Environment[CommandRequest, CommandResult]):
    """Answers every command with success at once. Unlike MockEnvironment it keeps nothing, so
    thousands of calls do not grow the memory the run reports."""

    tag = EnvironmentTag.SHELL

    def run(self, request: CommandRequest) -> CommandResult:
        return CommandResult(exit_code=0, stdout="", stderr="", duration=0.0)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured | Skipped]]:
    tools = require_tools("run_command")
    with contextlib.ExitStack() as stack:
        pairs: dict[str, tuple[Callable[[], object], Callable[[], object]] | Skipped] = {}
        for env in ENVIRONMENTS:
            try:
                pairs[env] = _set_up(env, ctx.scratch / env, tools, stack)
            except Skipped as skipped:
                pairs[env] = skipped
        results: dict[str, Measured | Skipped] = {}
        for env, pair in pairs.items():
            if isinstance(pair, Skipped):
                results.update({f"throughput.{env}.{n}": pair for n in CALLERS})
                continue
            results.update(_measure(ctx, env, *pair))
        yield results


def _set_up(
    env: str, directory: Path, tools: dict[str, Any], stack: contextlib.ExitStack
) -> tuple[Callable[[], object], Callable[[], object]]:
    """(through the runtime, environment alone) for one environment."""
    if env == "wasm":
        require_tools("read_file")
        from codecoder.environments.wasm.environment import WasmEnvironment
        from codecoder.tools.files import ConfinedFiles

        # read_file runs in @landlock by default; this figure is about @wasm (the fallback).
        project = make_project(directory, {"environments": {"read_file": "@wasm"}})
        wasm = WasmEnvironment(cache_dir=directory / "module-cache")
        stack.callback(wasm.close)
        runtime = stack.enter_context(
            make_runtime(project, environments={EnvironmentTag.WASM: wasm}, tools=tools)
        )
        files = ConfinedFiles(wasm, project)
        return _ok(runtime.session(), "read_file", {"path": SMALL_FILE}), (
            lambda: files.read(SMALL_FILE)
        )
    config: dict[str, Any] = {"environments": {"run_command": "@shell"}}
    if env == "docker":
        config = {
            "environments": {"run_command": "@docker"},
            "allowlist": {"run_command:true": "AlwaysThisProject"},
        }
    project = make_project(directory, config)
    environment: Environment[Any, Any]
    tag = EnvironmentTag.SHELL
    if env == "mock":
        environment = _Succeeding()
    elif env == "shell":
        from codecoder.environments.shell import ShellEnvironment

        environment = ShellEnvironment()
    else:
        from codecoder.environments.docker.environment import DockerEnvironment

        docker = DockerEnvironment(project)
        stack.callback(docker.close)
        try:
            docker.start()
        except SandboxUnavailable as exc:
            raise Skipped(f"no Docker engine or image: {exc}") from exc
        environment, tag = docker, EnvironmentTag.DOCKER
    runtime = stack.enter_context(
        make_runtime(project, environments={tag: environment}, tools=tools)
    )
    session = runtime.session()
    session.allowlist.grant(key_command("true").permission_key("run_command"), tag)
    request = CommandRequest(cwd=project, argv=("true",))
    return _ok(session, "run_command", {"command": "true"}), lambda: environment.run(request)


def _measure(
    ctx: BenchContext, env: str, through: Callable[[], object], alone: Callable[[], object]
) -> dict[str, Measured]:
    through()
    # Calls per sample: about `seconds` of one caller's work, the same for every concurrency.
    seconds = 0.05 if ctx.quick else 0.3
    single = calls_per_second(through, 1, 20)
    calls = max(CALLERS[-1], int(single * seconds) // CALLERS[-1] * CALLERS[-1])
    figures: dict[str, tuple[SelfTimed, str]] = {}
    baselines: dict[str, SelfTimed] = {}
    for callers in CALLERS:
        figures[f"throughput.{env}.{callers}"] = (_rate(through, callers, calls), f"alone{callers}")
        baselines[f"alone{callers}"] = _rate(alone, callers, calls)
    measured = compare(figures, baselines, rounds=ctx.rounds(5, 1), sample_seconds=None)
    one = measured[f"throughput.{env}.1"]
    for callers in CALLERS[1:]:
        figure = measured[f"throughput.{env}.{callers}"]
        assert figure.baseline is not None and one.baseline is not None
        scaling = statistics.median(figure.subject) / statistics.median(one.subject)
        alone_scaling = statistics.median(figure.baseline) / statistics.median(one.baseline)
        figure.extra = {
            "scaling_vs_1": round(scaling, 2),
            "environment_scaling_vs_1": round(alone_scaling, 2),
        }
        figure.note = f"vs 1 caller: runtime {scaling:.2f}×, environment alone {alone_scaling:.2f}×"
    for figure in measured.values():
        figure.subject_calls = figure.baseline_calls = calls
    return measured


def _rate(fn: Callable[[], object], callers: int, calls: int) -> SelfTimed:
    return SelfTimed(lambda: calls_per_second(fn, callers, calls))


AREA = Area("throughput", "Throughput with concurrent callers", SPECS, run)
