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
  agents area's; routing `call` through the decision server is what brings it down);
* the same command line run as the decision server runs a command: a child forked from a
  process that imported the runtime (a stand-in, `call` not being routed there yet).

The pool's server runs on a state directory of the run's own and is stopped at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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
        "pool.forked.first_call",
        "the same `codecoder call` as the decision server runs a command (a fork of a process "
        "that imported the runtime), the pool warm",
        "ms",
        COLD_CLI,
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
        with (
            make_runtime(pooled) as runtime,
            make_runtime(unpooled) as plain,
            contextlib.closing(_Forker()) as forker,
        ):
            yield _measure(ctx, runtime, plain, forker, pooled, unpooled)


def _measure(
    ctx: BenchContext,
    runtime: Runtime,
    plain: Runtime,
    forker: _Forker,
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
                pooled_sample("pool.process.first_call", lambda: _timed_process(pooled)),
                COLD_CLI,
            ),
            "pool.forked.first_call": (
                pooled_sample("pool.forked.first_call", lambda: forker.call(_call_argv(pooled))),
                COLD_CLI,
            ),
            "pool.process.first_call_unpooled": (
                SelfTimed(lambda: _timed_process(unpooled)),
                COLD_CLI,
            ),
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
    measured[
        "pool.forked.first_call"
    ].note += "; a client of the decision server adds its own start-up (the agents area's)"
    measured["pool.process.first_call"].miss_note = (
        "The sandbox's part is a new session's first call (above); the rest is the new "
        "process importing the runtime and reading the project before it, which a `call` "
        "answered by the decision server (already imported, forking a child per call) "
        "does not pay: the forked figure"
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


def _timed_process(project: Path) -> float:
    """`codecoder call run_command true` in a new process; its wall time."""
    argv = [sys.executable, "-m", "codecoder.runtime", *_call_argv(project)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=project)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"`codecoder call` failed: {done.stdout} {done.stderr}")
    return took


# A stand-in for the decision server (runtime.interfaces.decisiond): a process that imported
# the runtime and forks a child per request, which runs the command line and exits. Each
# answer: the exit code and the seconds from the fork to the child's end.
_FORKER = """
import json, os, sys, time
from codecoder.runtime.interfaces import cli, decisiond
decisiond._warm_up()  # what the decision server imports before it forks
import codecoder.environments.docker.environment  # and, to run @docker calls, this
# Parsing compiles argparse's regular expressions once, as a warmed-up server would have.
cli._parser().parse_args(["call", "run_command", "{}"])
print("ready", flush=True)
for line in sys.stdin:
    argv = json.loads(line)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    took = time.perf_counter() - started
    print(json.dumps([os.waitstatus_to_exitcode(status), took]), flush=True)
"""


class _Forker:
    """The stand-in for the decision server, as a child process of the benchmark."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _FORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        if self._process.stdout.readline() != "ready\n":
            raise RuntimeError("the stand-in for the decision server did not start")

    def call(self, argv: list[str]) -> float:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(argv) + "\n")
        self._process.stdin.flush()
        code, took = json.loads(self._process.stdout.readline())
        if code != 0:
            raise RuntimeError(f"the forked `codecoder call` exited with {code}")
        return float(took)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=60)


def _user_of(workspace: Path) -> str:
    info = workspace.stat()
    return f"{info.st_uid}:{info.st_gid}" if info.st_uid != 0 else "10001:10001"


AREA = Area("pool", "the warm pool: a new session's first @docker call", SPECS, run)
