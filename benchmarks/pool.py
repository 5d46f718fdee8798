"""The warm pool: a new session's (and a new process's) first @docker call, against a hardened
`docker run --rm` of the same command measured in turn with it.

The project binds run_command to @docker and grants it, as the docker area does. Subjects:

* a new session's first call with the pool warm: `runtime.session()`, `call(run_command true)`,
  close; the session claims a sandbox the pool made ahead (each sample waits, untimed, until
  one is warm, and counts whether it really came from the pool);
* the same without the pool (`"docker": {"pool": 0}`): the session makes its own container;
* the claimed first call against a warm call in a session that already has its sandbox;
* a new process, `codecoder call run_command '{"command": "true"}'`, with and without the pool,
  as an agent runs it: answered by the decision server (`interfaces.forkserver.protocol`, started
  before the samples), so the client's start-up and the server's fork are part of it;
* the same command line in its own process (`CODECODER_DAEMON=0`), the pool warm: the runtime
  imported and the project read before the call;
* `BURST` such processes one after another, as a script or a CI loop makes them, the pool warm
  only at first: per call, and how many of them claimed a warm sandbox.

The pool's server and the decision server run on a state directory of the run's own and are
stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from codecoder.benchmarks.agents import codecoder_command, decision_server
from codecoder.benchmarks.docker import hardened_run_argv
from codecoder.benchmarks.measure import Measured, SelfTimed, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import (
    make_project,
    make_runtime,
    owned_by_a_user,
    require_tools,
)
from codecoder.config.trust import record_trust
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.session import Runtime

__all__ = ["AREA"]

COMMAND = "true"
BURST = 8  # back-to-back calls of a script or a CI loop
COLD_CLI = "docker run --rm (CLI, hardened flags)"
WARM_CALL = "a warm call in a session that has its sandbox"

SPECS = (
    FigureSpec(
        "pool.session.first_call",
        "a new session's first @docker call, the pool warm",
        "ms",
        COLD_CLI,
        Target("max_ratio", 0.5, "≤ 0.5× docker run --rm"),
    ),
    FigureSpec(
        "pool.session.first_call_unpooled",
        "a new session's first @docker call, no pool (docker.pool 0)",
        "ms",
        COLD_CLI,
    ),
    FigureSpec(
        "pool.session.first_call_vs_warm",
        "a new session's first @docker call, the pool warm, against a warm call",
        "ms",
        WARM_CALL,
    ),
    FigureSpec(
        "pool.process.first_call",
        "a new process's first @docker call (`codecoder call`, the decision server), the pool warm",
        "ms",
        COLD_CLI,
        Target("max_ratio", 0.5, "≤ 0.5× docker run --rm"),
    ),
    FigureSpec(
        "pool.process.first_call_in_process",
        "the same `codecoder call` in its own process (CODECODER_DAEMON=0), the pool warm",
        "ms",
        COLD_CLI,
    ),
    FigureSpec(
        "pool.process.back_to_back",
        f"{BURST} new processes calling @docker one after another (`codecoder call`, the "
        "decision server), the pool warm at first: per call",
        "ms",
        COLD_CLI,
    ),
    FigureSpec(
        "pool.process.first_call_unpooled",
        "a new process's first @docker call (`codecoder call`, the decision server), no pool",
        "ms",
        COLD_CLI,
    ),
)


@contextlib.contextmanager
def _pool_state(scratch: Path) -> Iterator[Path]:
    """A state directory of the run's own, the pool turned on; its server stopped after."""
    from codecoder.environments.docker.pool.client import PoolClient

    state = scratch / "state"
    state.mkdir(mode=0o700)
    saved = {name: os.environ.get(name) for name in ("XDG_STATE_HOME", "CODECODER_POOL")}
    os.environ["XDG_STATE_HOME"] = str(state)
    os.environ["CODECODER_POOL"] = "1"
    try:
        yield state
    finally:
        PoolClient().stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _wait_warm(timeout: float = 120.0) -> None:
    from codecoder.environments.docker.pool.client import PoolClient

    client = PoolClient(start=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status()
        if status and any(t["ready"] for t in status["templates"]):
            return
        time.sleep(0.05)
    raise RuntimeError("the pool made no warm sandbox within two minutes")


def _served() -> int:
    """How many sandboxes the pool has handed out so far."""
    from codecoder.environments.docker.pool.client import PoolClient

    status = PoolClient(start=False).status()
    return int(status["served"]) if status else 0


def _check(outcome: Any) -> None:
    if not outcome.ok:
        raise RuntimeError(f"the @docker call failed: {outcome.to_json()}")


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    require_tools("run_command")
    grants = {
        "environments": {"run_command": "@docker"},
        "allowlist": {f"run_command:{COMMAND}": "AlwaysThisProject"},
    }
    with _pool_state(ctx.scratch):
        pooled = owned_by_a_user(
            make_project(ctx.scratch / "pooled", {**grants, "docker": {"pool": 2}})
        )
        unpooled = owned_by_a_user(
            make_project(ctx.scratch / "unpooled", {**grants, "docker": {"pool": 0}})
        )
        for project in (pooled, unpooled):  # trusted, for the `codecoder call` processes
            record_trust(project.resolve(), (project / "codecoder.json").read_bytes(), ())
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "CODECODER_DAEMON")}
        with (
            make_runtime(pooled) as runtime,
            make_runtime(unpooled) as plain,
            decision_server(env),
        ):
            yield _measure(ctx, runtime, plain, env, pooled, unpooled)


def _measure(
    ctx: BenchContext,
    runtime: Runtime,
    plain: Runtime,
    env: dict[str, str],
    pooled: Path,
    unpooled: Path,
) -> dict[str, Measured]:
    args = {"command": COMMAND}
    try:
        warm = runtime.session()  # has its sandbox after this call: every later call is warm
        _check(warm.call("run_command", args))  # and starts the pool's server
    except SandboxUnavailable as exc:
        raise Skipped(f"no Docker engine or image: {exc}") from exc
    cli = hardened_run_argv(pooled, "codecoder-sandbox", _user_of(pooled), (COMMAND,))
    if subprocess.run(cli, capture_output=True, check=False).returncode != 0:
        raise Skipped("`docker run` of the sandbox image does not work here")
    in_process = {**env, "CODECODER_DAEMON": "0"}
    _timed_process(unpooled, env)  # starts the decision server: the first call waits for it
    claimed: dict[str, list[bool]] = {}

    def pooled_sample(figure: str, sample: Callable[[], float]) -> SelfTimed:
        """A sample taken with a sandbox warm, counting whether it claimed it."""

        def probe() -> float:
            _wait_warm()
            served = _served()
            took = sample()
            claimed.setdefault(figure, []).append(_served() == served + 1)
            return took

        return SelfTimed(probe)

    def back_to_back() -> float:
        """`BURST` calls, each in a new process, one right after the other: per call."""
        _wait_warm()
        served = _served()
        started = time.perf_counter()
        for _ in range(BURST):
            _timed_process(pooled, env)
        took = (time.perf_counter() - started) / BURST
        found = claimed.setdefault("pool.process.back_to_back", [])
        found += [True] * (_served() - served) + [False] * (BURST - (_served() - served))
        return took

    def new_session(rt: Runtime) -> float:
        started = time.perf_counter()
        with rt.session() as session:
            outcome = session.call("run_command", args)
            took = time.perf_counter() - started
        _check(outcome)
        return took

    measured = compare(
        {
            "pool.session.first_call": (
                pooled_sample("pool.session.first_call", lambda: new_session(runtime)),
                COLD_CLI,
            ),
            "pool.session.first_call_unpooled": (
                SelfTimed(lambda: new_session(plain)),
                COLD_CLI,
            ),
            "pool.process.first_call": (
                pooled_sample("pool.process.first_call", lambda: _timed_process(pooled, env)),
                COLD_CLI,
            ),
            "pool.process.first_call_in_process": (
                pooled_sample(
                    "pool.process.first_call_in_process",
                    lambda: _timed_process(pooled, in_process),
                ),
                COLD_CLI,
            ),
            "pool.process.first_call_unpooled": (
                SelfTimed(lambda: _timed_process(unpooled, env)),
                COLD_CLI,
            ),
            "pool.process.back_to_back": (SelfTimed(back_to_back), COLD_CLI),
        },
        {COLD_CLI: lambda: subprocess.run(cli, capture_output=True, check=True)},
        rounds=ctx.rounds(9, 2),
        sample_seconds=None,
    )
    measured.update(
        compare(
            {
                "pool.session.first_call_vs_warm": (
                    pooled_sample("pool.session.first_call_vs_warm", lambda: new_session(runtime)),
                    WARM_CALL,
                )
            },
            {WARM_CALL: lambda: warm.call("run_command", args)},
            rounds=ctx.rounds(9, 2),
            sample_seconds=None,
        )
    )
    warm.close()
    for figure, found in claimed.items():
        measured[figure].note = f"{sum(found)} of {len(found)} samples claimed a warm sandbox"
        measured[figure].extra["claimed"] = [sum(found), len(found)]
    measured["pool.process.first_call"].miss_note = (
        "The sandbox's part is a new session's first call (above); the rest is the client's "
        "start-up and the decision server's fork and fresh read of the project (the agents "
        "area's figures)"
    )
    return measured


def _call_argv(project: Path) -> list[str]:
    return [
        "call",
        "run_command",
        json.dumps({"command": COMMAND}),
        "--project",
        str(project),
        "--non-interactive",
    ]


def _timed_process(project: Path, env: dict[str, str]) -> float:
    """`codecoder call run_command true` in a new process with `env`; its wall time."""
    argv = [*codecoder_command(), *_call_argv(project)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=project, env=env)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"`codecoder call` failed: {done.stdout} {done.stderr}")
    return took


def _user_of(workspace: Path) -> str:
    info = workspace.stat()
    return f"{info.st_uid}:{info.st_gid}" if info.st_uid != 0 else "10001:10001"


AREA = Area("pool", "the warm pool: a new session's first @docker call", SPECS, run)
