"""Reliability: what survives faults, in counts and ratios (docs/reliability.md).

* kills survived: processes granting and revoking in a trusted codecoder.json, each killed
  (SIGKILL) at a random moment; a kill is survived when afterwards the file is whole, trusted,
  and still grants what was granted long before (per 100 kills; the count in `extra`);
* readers refused: while three processes grant and revoke, a reader loads the project again and
  again; a read is refused when the grant given long before is not in force (per 100 reads);
* 70 concurrent calls under load: `codecoder call read_file` in 70 processes started at once
  while both cores are kept busy, answered by the decision server, against the same 70 in
  their own processes (CODECODER_DAEMON=0): the p99 of the calls' wall times (each sample is
  one round's p99).

Everything runs on a state directory of the run's own.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from codecoder.benchmarks.agents import codecoder_command, decision_server
from codecoder.benchmarks.measure import Measured
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import SMALL_FILE, make_project

__all__ = ["AREA"]

KEPT = "write_file:kept/**"
CONCURRENT = 70
IN_PROCESS = "the same calls, each in its own process (no decision server)"

SPECS = (
    FigureSpec(
        "reliability.kills.survived",
        "grant/revoke processes killed at a random moment: the project trusted as before",
        "per100",
        None,
        better="higher",
    ),
    FigureSpec(
        "reliability.readers.refused",
        "loads of a project while three processes grant and revoke: a grant given long before "
        "not in force",
        "per100",
        None,
        Target("max_value", 0, "0"),
    ),
    FigureSpec(
        "reliability.concurrent.p99",
        f"p99 of {CONCURRENT} concurrent `codecoder call read_file`, both cores busy, the "
        "decision server",
        "s",
        IN_PROCESS,
    ),
)


def _state(root: Path) -> tuple[str, bool]:
    """How the project stands in a fresh process: its trust, and whether KEPT is in force."""
    from codecoder.config.project import load_project
    from codecoder.tools.catalogue import builtin_tools

    config = load_project(root, builtin_tools())
    granted = {rule.value for rule in config.rules if rule.kind == "allow"}
    return config.trust.state.value, KEPT in granted


def _trusted_project(directory: Path) -> Path:
    from codecoder.config.trust import record_trust

    root = make_project(directory, {"allowlist": {KEPT: "AlwaysThisProject"}}).resolve()
    record_trust(root, (root / "codecoder.json").read_bytes(), ())
    return root


def _churn(root: Path, n: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from pathlib import Path\n"
        "from codecoder.config.writing import add_allow_entry, remove_allow_entry\n"
        f"path = Path({str(root / 'codecoder.json')!r})\n"
        "i = 0\n"
        "while True:\n"
        f"    add_allow_entry(path, f'write_file:w{n}-{{i}}/**')\n"
        f"    remove_allow_entry(path, f'write_file:w{n}-{{i}}/**')\n"
        "    i += 1\n",
    ]


def _kills(ctx: BenchContext, env: dict[str, str]) -> Measured:
    trials = ctx.rounds(240, 12)
    survived = 0
    failures: list[str] = []
    rng = random.Random(36)
    for trial in range(trials):
        root = _trusted_project(ctx.scratch / "kills" / str(trial))
        writer = subprocess.Popen(_churn(root, 0), env=env)
        time.sleep(rng.uniform(0.3, 1.5))  # past its start-up, somewhere in its writes
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        try:
            json.loads((root / "codecoder.json").read_text())
            state, kept = _state(root)
        except ValueError as exc:
            state, kept = f"damaged: {exc}", False
        if state == "trusted" and kept:
            survived += 1
        else:
            failures.append(state)
    measured = Measured([100.0 * survived / trials])
    measured.note = f"{survived} of {trials} kills survived"
    measured.extra.update({"survived": survived, "kills": trials, "failures": failures[:10]})
    return measured


def _readers(ctx: BenchContext, env: dict[str, str]) -> Measured:
    root = _trusted_project(ctx.scratch / "readers")
    writers = [subprocess.Popen(_churn(root, n), env=env) for n in range(3)]
    reads = ctx.rounds(400, 40)
    refused = 0
    try:
        time.sleep(2.0)  # the writers at work
        for _ in range(reads):
            state, kept = _state(root)
            refused += not (state == "trusted" and kept)
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
    measured = Measured([100.0 * refused / reads])
    measured.note = f"{refused} of {reads} reads refused"
    measured.extra.update({"refused": refused, "reads": reads})
    return measured


def _busy(stop: float) -> None:
    while time.monotonic() < stop:
        pass


@contextlib.contextmanager
def _loaded(seconds: float) -> Iterator[None]:
    """Both cores kept busy (`stress`-like loops) for the block."""
    stop = time.monotonic() + seconds
    loops = [
        multiprocessing.Process(target=_busy, args=(stop,)) for _ in range(os.cpu_count() or 2)
    ]
    for loop in loops:
        loop.start()
    try:
        yield
    finally:
        for loop in loops:
            loop.terminate()
            loop.join()


def _p99_round(project: Path, env: dict[str, str]) -> float:
    argv = [*codecoder_command(), "call", "read_file", json.dumps({"path": SMALL_FILE})]
    argv += ["--project", str(project)]
    started = time.perf_counter()
    calls = [
        subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        for _ in range(CONCURRENT)
    ]
    took = []
    for call in calls:
        _, err = call.communicate(timeout=600)
        took.append(time.perf_counter() - started)
        if call.returncode != 0:
            raise RuntimeError(f"`codecoder call` failed: {err.decode(errors='replace')}")
    took.sort()
    return took[int(0.99 * (len(took) - 1))]


def _concurrent(ctx: BenchContext, env: dict[str, str]) -> Measured:
    project = make_project(ctx.scratch / "concurrent")
    in_process = {**env, "CODECODER_DAEMON": "0"}
    served: list[float] = []
    alone: list[float] = []
    rounds = ctx.rounds(3, 1)
    with decision_server(env):
        _p99_round(project, env)  # the decision server started and warm
        with _loaded(3600):
            for _ in range(rounds):
                served.append(_p99_round(project, env))
                alone.append(_p99_round(project, in_process))
    measured = Measured(served, alone)
    measured.note = f"{CONCURRENT} processes at once, {rounds} round(s), both cores busy"
    return measured


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CODECODER_DAEMON")}
    env["XDG_STATE_HOME"] = str(ctx.scratch / "state")
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]  # this process's reads, the same
    try:
        yield {
            "reliability.kills.survived": _kills(ctx, env),
            "reliability.readers.refused": _readers(ctx, env),
            "reliability.concurrent.p99": _concurrent(ctx, env),
        }
    finally:
        if saved is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = saved


AREA = Area("reliability", "reliability: kills, concurrent writers, calls under load", SPECS, run)
