"""The warm pool: a new session's (and a new process's) first @docker call, against a hardened
`docker run --rm` of the same command measured in turn with it.

The project binds run_command to @docker and grants it, as the docker area does. Subjects:

* a new session's first call with the pool warm: `runtime.session()`, `call(run_command true)`,
  close; the session claims a sandbox the pool made ahead (each sample waits, untimed, until
  one is warm, and counts whether it really came from the pool);
* the same without the pool (`"docker": {"pool": 0}`): the session makes its own container;
* the claimed first call against a warm call in a session that already has its sandbox;
* a new process, `codecoder call run_command '{"command": "true"}'`, with and without the pool:
  the start-up of the process is part of it (how it compares with `python -c pass` is the
  agents area's; routing `call` through the decision server is what brings it down).

The pool's server runs on a state directory of the run's own and is stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codecoder.benchmarks.docker import hardened_run_argv
from codecoder.benchmarks.measure import Measured, SelfTimed, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.runtime.config.trust import record_trust
from codecoder.runtime.kernel.errors import SandboxUnavailable
from codecoder.runtime.session import Runtime

__all__ = ["AREA"]

COMMAND = "true"
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
        "a new process's first @docker call (`codecoder call`), the pool warm",
        "ms",
        COLD_CLI,
        Target("max_ratio", 0.5, "≤ 0.5× docker run --rm"),
    ),
    FigureSpec(
        "pool.process.first_call_unpooled",
        "a new process's first @docker call (`codecoder call`), no pool",
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
        pooled = make_project(ctx.scratch / "pooled", {**grants, "docker": {"pool": 2}})
        unpooled = make_project(ctx.scratch / "unpooled", {**grants, "docker": {"pool": 0}})
        for project in (pooled, unpooled):  # trusted, for the `codecoder call` processes
            record_trust(project.resolve(), (project / "codecoder.json").read_bytes(), ())
        args = {"command": COMMAND}
        with make_runtime(pooled) as runtime, make_runtime(unpooled) as plain:
            try:
                first = runtime.session()
                _check(first.call("run_command", args))  # starts the pool's server
            except SandboxUnavailable as exc:
                raise Skipped(f"no Docker engine or image: {exc}") from exc
            cli = hardened_run_argv(pooled, "codecoder-sandbox", _user_of(pooled), (COMMAND,))
            if subprocess.run(cli, capture_output=True, check=False).returncode != 0:
                raise Skipped("`docker run` of the sandbox image does not work here")
            hits: dict[str, list[bool]] = {"first": [], "vs_warm": []}
            process_hits: list[bool] = []

            def new_session(rt: Runtime, pool: str | None) -> float:
                if pool is not None:
                    _wait_warm()
                served = _served()
                started = time.perf_counter()
                with rt.session() as session:
                    outcome = session.call("run_command", args)
                    took = time.perf_counter() - started
                _check(outcome)
                if pool is not None:
                    hits[pool].append(_served() == served + 1)
                return took

            def new_process(project: Path, pool: bool) -> float:
                if pool:
                    _wait_warm()
                served = _served()
                took = _timed_process(project)
                if pool:
                    process_hits.append(_served() == served + 1)
                return took

            warm = first  # has its sandbox: every call after the first is warm
            measured = compare(
                {
                    "pool.session.first_call": (
                        SelfTimed(lambda: new_session(runtime, "first")),
                        COLD_CLI,
                    ),
                    "pool.session.first_call_unpooled": (
                        SelfTimed(lambda: new_session(plain, None)),
                        COLD_CLI,
                    ),
                    "pool.process.first_call": (
                        SelfTimed(lambda: new_process(pooled, True)),
                        COLD_CLI,
                    ),
                    "pool.process.first_call_unpooled": (
                        SelfTimed(lambda: new_process(unpooled, False)),
                        COLD_CLI,
                    ),
                },
                {COLD_CLI: lambda: subprocess.run(cli, capture_output=True, check=True)},
                rounds=ctx.rounds(9, 2),
                sample_seconds=None,
            )
            versus_warm = compare(
                {
                    "pool.session.first_call_vs_warm": (
                        SelfTimed(lambda: new_session(runtime, "vs_warm")),
                        WARM_CALL,
                    )
                },
                {WARM_CALL: lambda: warm.call("run_command", args)},
                rounds=ctx.rounds(9, 2),
                sample_seconds=None,
            )
            warm.close()
            measured.update(versus_warm)
            for name, which in (
                ("pool.session.first_call", "first"),
                ("pool.session.first_call_vs_warm", "vs_warm"),
            ):
                found = hits[which]
                measured[
                    name
                ].note = f"{sum(found)} of {len(found)} sessions claimed a warm sandbox"
                measured[name].extra["claimed"] = [sum(found), len(found)]
            measured[
                "pool.process.first_call"
            ].note = f"{sum(process_hits)} of {len(process_hits)} processes claimed a warm sandbox"
            measured["pool.process.first_call"].miss_note = (
                "The sandbox's part is a new session's first call (above); the rest is the new "
                "process importing the runtime and reading the project before it, which a "
                "`call` answered by the decision server (already imported, forking a child per "
                "call) does not pay"
            )
            yield measured


def _timed_process(project: Path) -> float:
    """`codecoder call run_command true` in a new process; its wall time."""
    argv = [
        sys.executable,
        "-m",
        "codecoder.runtime",
        "call",
        "run_command",
        json.dumps({"command": COMMAND}),
        "--project",
        str(project),
        "--non-interactive",
    ]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=project)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"`codecoder call` failed: {done.stdout} {done.stderr}")
    return took


def _user_of(workspace: Path) -> str:
    info = workspace.stat()
    return f"{info.st_uid}:{info.st_gid}" if info.st_uid != 0 else "10001:10001"


AREA = Area("pool", "the warm pool: a new session's first @docker call", SPECS, run)
