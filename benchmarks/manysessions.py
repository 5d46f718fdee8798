"""Many sessions at once: one runtime, 100 sessions, each with its own warm @docker sandbox.

For runc and, where the engine has it, gVisor (runsc):

* **memory per idle sandbox**: what the host spends on each sandbox once every session made its
  first call and all are idle: the container's memory cgroup (its processes, their page cache
  and kernel memory; under gVisor the sentry and gofer are in it too), the PSS of its
  containerd-shim (outside the cgroup), and its share of the runtime's own growth (the
  session, its channel and reader thread). The samples are the sandboxes; `extra` has how many
  fit in a GiB and the machine's MemAvailable drop (noisier: other work moves it);
* **a call with all sessions active**, p50 and p99: every session calls `run_command true` every
  `PERIOD` seconds (at its own phase), as agents do between thoughts; against one session
  alone;
* **all sessions calling back-to-back**: calls per second through the runtime against the
  sessions' environments called directly by as many threads (where the runtime serialises, the
  ratio drops).

Sessions come from `Runtime.session()`, calls go through `Session.call` (the whole chain and the
audit log), the pool is off (every session's sandbox is its own from the start).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.environments.base import CommandRequest
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.session import Runtime, Session

__all__ = ["AREA", "SESSIONS"]

SESSIONS = 100
RUNTIMES = ("runc", "runsc")
# Seconds between one session's calls under the paced load: an agent between two tool calls
# (a model's turn takes seconds); 100 sessions then offer 50 calls a second, within what this
# machine's two cores serve under gVisor (about 80 a second, saturated).
PERIOD = 2.0
ALONE = "one session alone"


def _specs() -> tuple[FigureSpec, ...]:
    specs: list[FigureSpec] = []
    for runtime in RUNTIMES:
        where = "gVisor (runsc)" if runtime == "runsc" else "runc"
        specs += [
            FigureSpec(
                f"many_sessions.{runtime}.memory",
                f"host memory per idle sandbox, {SESSIONS} sessions, {where}",
                "MiB",
                None,
            ),
            FigureSpec(
                f"many_sessions.{runtime}.p50",
                f"a call (p50), {SESSIONS} sessions each calling every {PERIOD:g} s, {where}",
                "ms",
                f"{ALONE}, p50",
            ),
            FigureSpec(
                f"many_sessions.{runtime}.p99",
                f"a call (p99), {SESSIONS} sessions each calling every {PERIOD:g} s, {where}",
                "ms",
                f"{ALONE}, p99",
            ),
            FigureSpec(
                f"many_sessions.{runtime}.saturated",
                f"calls/s, {SESSIONS} sessions calling back-to-back, {where}",
                "calls/s",
                f"the {SESSIONS} sessions' environments called directly",
                better="higher",
            ),
        ]
    return tuple(specs)


SPECS = _specs()


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured | Skipped]]:
    require_tools("run_command")
    count = 8 if ctx.quick else SESSIONS
    seconds = 3.0 if ctx.quick else 8.0
    rounds = ctx.rounds(3, 1)
    results: dict[str, Measured | Skipped] = {}
    engine_runtimes = _engine_runtimes()
    for runtime in RUNTIMES:
        if runtime not in engine_runtimes:
            for spec in SPECS:
                if spec.name.startswith(f"many_sessions.{runtime}."):
                    results[spec.name] = Skipped(f"the engine has no {runtime} runtime")
            continue
        config: dict[str, Any] = {
            "environments": {"run_command": "@docker"},
            "allowlist": {"run_command:true": "AlwaysThisProject"},
            "docker": {"pool": 0, **({"runtime": runtime} if runtime != "runc" else {})},
        }
        project = make_project(ctx.scratch / runtime, config)
        with make_runtime(project) as rt:
            results.update(_measure(rt, runtime, count, seconds, rounds))
    yield results


def _engine_runtimes() -> set[str]:
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            return set(client.info().get("Runtimes") or {}) | {"runc"}
        finally:
            client.close()
    except Exception as exc:  # no engine, no SDK: every figure says so
        raise Skipped(f"no Docker engine answers: {exc}") from exc


def _call(session: Session) -> float:
    started = time.perf_counter()
    outcome = session.call("run_command", {"command": "true"})
    took = time.perf_counter() - started
    if isinstance(outcome.error, SandboxUnavailable):
        raise Skipped(f"no Docker engine or image: {outcome.error}")
    if not outcome.ok:
        raise RuntimeError(f"a call failed: {outcome.to_json()}")
    return took


def _measure(
    rt: Runtime, runtime: str, count: int, seconds: float, rounds: int
) -> dict[str, Measured]:
    alone = rt.session()
    try:
        _call(alone)
    except BaseException:
        alone.close()
        raise
    own_before = _own_rss()
    available_before = _mem_available()
    sessions = [rt.session() for _ in range(count)]
    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=8) as starting:
            list(starting.map(_call, sessions))
        start_seconds = time.perf_counter() - started
        time.sleep(2.0)  # idle: what the first calls left settles
        containers = [cid for s in sessions for cid in _environment_of(rt, s).containers()]
        per_sandbox = _sandbox_memory(containers)
        own_share = max(0, _own_rss() - own_before) / max(1, len(containers))
        system = max(0, available_before - _mem_available()) / max(1, len(containers))
        memory = [value + own_share for value in per_sandbox]

        alone_p50: list[float] = []
        alone_p99: list[float] = []
        paced_p50: list[float] = []
        paced_p99: list[float] = []
        rates: list[float] = []
        direct: list[float] = []
        saturated_latencies: list[float] = []
        for _ in range(rounds):
            single = _back_to_back([alone], seconds / 2)[0]
            alone_p50.append(_quantile(single, 0.5))
            alone_p99.append(_quantile(single, 0.99))
            latencies = _paced(sessions, seconds)
            paced_p50.append(_quantile(latencies, 0.5))
            paced_p99.append(_quantile(latencies, 0.99))
            calls, rate = _back_to_back(sessions, seconds / 2)
            rates.append(rate)
            saturated_latencies += calls
            grant = _grant_of(alone)
            envs = [_environment_of(rt, s) for s in sessions]
            direct.append(_direct(envs, rt.project_dir, grant, seconds / 2))
    finally:
        for session in sessions:
            session.close()
        alone.close()
    mib = 2**20
    shared = {
        "sessions": count,
        "sandboxes": len(containers),
        "start_all_s": round(start_seconds, 2),
    }
    return {
        f"many_sessions.{runtime}.memory": Measured(
            subject=memory,
            note=(
                f"{len(containers)} sandboxes: {1024 / (statistics.median(memory) / mib):.0f} "
                f"per GiB; the machine's MemAvailable fell by {system / mib:.0f} MiB a sandbox"
            ),
            extra={
                **shared,
                "sandboxes_per_gib": round(2**30 / statistics.median(memory), 1),
                "runtime_share_mib": round(own_share / mib, 2),
                "mem_available_drop_mib": round(system / mib, 1),
            },
        ),
        f"many_sessions.{runtime}.p50": Measured(
            subject=paced_p50, baseline=alone_p50, extra=shared
        ),
        f"many_sessions.{runtime}.p99": Measured(
            subject=paced_p99, baseline=alone_p99, extra=shared
        ),
        f"many_sessions.{runtime}.saturated": Measured(
            subject=rates,
            baseline=direct,
            note=(
                f"latency with all calling back-to-back: p50 "
                f"{_quantile(saturated_latencies, 0.5) * 1000:.0f} ms, p99 "
                f"{_quantile(saturated_latencies, 0.99) * 1000:.0f} ms"
            ),
            extra=shared,
        ),
    }


def _environment_of(rt: Runtime, session: Session) -> Any:
    return rt.environment(EnvironmentTag.DOCKER, session=session.id)


def _grant_of(session: Session) -> str | None:
    outcome = session.call("run_command", {"command": "true"})
    return outcome.decision.grant if outcome.decision is not None else None


def _paced(sessions: list[Session], seconds: float) -> list[float]:
    """Every session calls once every PERIOD seconds, at its own phase; every call's latency."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    begin = time.monotonic() + 0.2
    end = begin + seconds

    def caller(session: Session) -> None:
        due = begin + random.uniform(0, PERIOD)
        try:
            while due < end:
                time.sleep(max(0.0, due - time.monotonic()))
                took = _call(session)
                with lock:
                    latencies.append(took)
                due += PERIOD
        except BaseException as exc:
            errors.append(exc)

    _together([functools.partial(caller, s) for s in sessions])
    if errors:
        raise errors[0]
    return latencies


def _back_to_back(sessions: list[Session], seconds: float) -> tuple[list[float], float]:
    """Every session calls back-to-back for `seconds`: the latencies and the total rate."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def caller(session: Session) -> None:
        mine: list[float] = []
        try:
            while time.monotonic() < end:
                mine.append(_call(session))
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    started = time.monotonic()
    _together([functools.partial(caller, s) for s in sessions])
    elapsed = time.monotonic() - started
    if errors:
        raise errors[0]
    return latencies, len(latencies) / elapsed


def _direct(envs: list[Any], workspace: Path, grant: str | None, seconds: float) -> float:
    """The sessions' environments called directly, one thread each: calls per second."""
    request = CommandRequest(cwd=workspace, argv=("true",), writable=True, grant=grant)
    count = [0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def caller(env: Any) -> None:
        done = 0
        while time.monotonic() < end:
            env.run(request)
            done += 1
        with lock:
            count[0] += done

    started = time.monotonic()
    _together([functools.partial(caller, e) for e in envs])
    return count[0] / (time.monotonic() - started)


def _together(jobs: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- memory ---------------------------------------------------------------------------------------


def _sandbox_memory(container_ids: list[str]) -> list[float]:
    """Bytes per sandbox: its memory cgroup and its containerd-shim's PSS."""
    shims = _shims()
    return [_cgroup_bytes(cid) + _pss(shims.get(cid)) for cid in container_ids]


def _cgroup_bytes(container_id: str) -> int:
    candidates = (
        Path(f"/sys/fs/cgroup/memory/docker/{container_id}/memory.usage_in_bytes"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.current"),
        Path(f"/sys/fs/cgroup/docker/{container_id}/memory.current"),
    )
    for path in candidates:
        with contextlib.suppress(OSError, ValueError):
            return int(path.read_text())
    raise Skipped("the containers' memory cgroups are not readable here")


def _shims() -> dict[str, int]:
    """containerd-shim processes by the container they hold."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or b"containerd-shim" not in argv[0] or b"-id" not in argv:
            continue
        found[argv[argv.index(b"-id") + 1].decode()] = int(entry)
    return found


def _pss(pid: int | None) -> int:
    if pid is None:
        return 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _own_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


AREA = Area("many_sessions", f"{SESSIONS} sessions at once, a warm sandbox each", SPECS, run)
