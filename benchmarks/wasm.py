"""@wasm: `read_file` of a small file, warm and in a fresh process, against compiling the module
from scratch and against spawning a process.

* warm: `Session.call("read_file")` in a process that has run it before (the module is in the
  in-process cache), against `subprocess.run(["true"])`, the cheapest thing a host tool can do;
  `ConfinedFiles.read` on the environment alone is a second row.
* fresh process: a new interpreter creates the environment with a populated disk cache and makes
  its first call; the child times that itself (its imports are not counted), against compiling
  fileops.wasm from scratch with an engine configured like the environment's. A fresh process
  without the disk cache is a further row.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from codecoder.benchmarks.measure import Measured, SelfTimed, Subject, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import (
    SMALL_FILE,
    make_project,
    make_runtime,
    require_tools,
    run_python,
)
from codecoder.foundation.ceiling import EnvironmentTag

__all__ = ["AREA"]

SPAWN = 'subprocess.run(["true"])'
COMPILE = "compiling fileops.wasm from scratch"
BARE_PYTHON = "python -c pass"

SPECS = (
    FigureSpec(
        "wasm.read_file.landlock",
        "Session.call(read_file, small file) on @landlock (openat2), warm process",
        "ms",
        SPAWN,
        Target("max_ratio", 1 / 10, '≤ 1/10 of subprocess.run(["true"])'),
    ),
    FigureSpec(
        "wasm.read_file.warm",
        "Session.call(read_file, small file) on @wasm (the fallback), warm process",
        "ms",
        SPAWN,
        Target("max_ratio", 1.0, '≤ 1× subprocess.run(["true"])'),
    ),
    FigureSpec(
        "wasm.read_file.environment",
        "ConfinedFiles.read(small file) on WasmEnvironment alone, warm",
        "ms",
        SPAWN,
    ),
    FigureSpec(
        "wasm.read_file.fresh_cached",
        "first read_file in a fresh process, module disk cache populated",
        "ms",
        COMPILE,
        Target("max_ratio", 1 / 5, "≤ 1/5 of compiling"),
    ),
    FigureSpec(
        "wasm.read_file.fresh_uncached",
        "first read_file in a fresh process, no disk cache",
        "ms",
        COMPILE,
    ),
    FigureSpec(
        "wasm.fresh_process.total",
        "a whole fresh process: interpreter, imports, first read_file (cached)",
        "ms",
        BARE_PYTHON,
    ),
)

# Run by a fresh interpreter (`python -c`), importing only the runtime: the first call there is
# timed from the environment's creation to the result; the imports before it are not counted.
_CHILD = """
import json, sys, time
from pathlib import Path
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.prompt import non_interactive
from codecoder.session import Runtime
from codecoder.tools.catalogue import builtin_tools

project, cache, path = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
tools = builtin_tools()
started = time.perf_counter()
if cache == "-":
    env = WasmEnvironment(use_disk_cache=False)
else:
    env = WasmEnvironment(cache_dir=Path(cache))
runtime = Runtime(
    project, asker=non_interactive, environments={EnvironmentTag.WASM: env}, tools=tools,
    audit_log=project.parent / "child.audit.jsonl", trusted=True,
)
outcome = runtime.session().call("read_file", {"path": path})
seconds = time.perf_counter() - started
stats = env.cache_stats
print(json.dumps({"seconds": seconds, "ok": outcome.ok, "compiled": stats.compiled,
                  "disk_hits": stats.disk_hits}))
env.close()
"""


def _fresh_call(project: Path, cache: str) -> float:
    """The child's own timing of its first call (see _CHILD)."""
    result = json.loads(run_python(_CHILD, str(project), cache, SMALL_FILE))
    if not result["ok"]:
        raise RuntimeError("read_file failed in the fresh process")
    if cache != "-" and result["disk_hits"] != 1:
        raise RuntimeError(f"the fresh process did not load from the disk cache: {result}")
    return float(result["seconds"])


def _spawn_true() -> object:
    return subprocess.run(["true"], check=False)


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    tools = require_tools("read_file")
    try:
        from codecoder.environments.wasm.environment import WasmEnvironment
        from codecoder.tools.files import ConfinedFiles
    except ImportError as exc:
        raise Skipped(f"@wasm is unavailable: {exc}") from exc
    module = _fileops_module()
    # read_file runs in @landlock by default; this project binds it to @wasm (the fallback).
    project = make_project(ctx.scratch / "project", {"environments": {"read_file": "@wasm"}})
    kernel = make_project(ctx.scratch / "kernel")
    cache = ctx.scratch / "module-cache"
    env = WasmEnvironment(cache_dir=cache)
    with (
        env,
        make_runtime(project, environments={EnvironmentTag.WASM: env}, tools=tools) as rt,
        make_runtime(kernel, tools=tools) as kernel_rt,
    ):
        session = rt.session()
        args = {"path": SMALL_FILE}
        kernel_session = kernel_rt.session()
        landlock: dict[str, tuple[Subject, str | None]] = {}
        if kernel_rt.environment_of("read_file") is EnvironmentTag.LANDLOCK:
            landlock["wasm.read_file.landlock"] = (
                lambda: kernel_session.call("read_file", args),
                SPAWN,
            )
            if not kernel_session.call("read_file", args).ok:
                raise Skipped("read_file does not run on @landlock here")
        outcome = session.call("read_file", args)
        if not outcome.ok:
            raise Skipped(f"read_file does not run on @wasm here: {outcome.to_json()['error']}")
        files = ConfinedFiles(env, project)
        warm = compare(
            {
                **landlock,
                "wasm.read_file.warm": (lambda: session.call("read_file", args), SPAWN),
                "wasm.read_file.environment": (lambda: files.read(SMALL_FILE), SPAWN),
            },
            {SPAWN: _spawn_true},
            rounds=ctx.rounds(60, 8),
            sample_seconds=ctx.sample_seconds,
        )
        call_ms = statistics.median(warm["wasm.read_file.warm"].subject) * 1e3
        env_ms = statistics.median(warm["wasm.read_file.environment"].subject) * 1e3
        warm["wasm.read_file.warm"].note = (
            f"the environment alone takes {env_ms:.2f} ms: the dispatcher, read_file's own work "
            f"and the audit log add {call_ms - env_ms:.2f} ms"
        )
        warm["wasm.read_file.warm"].miss_note = (
            "Most of the call is the module run itself: a new Store and instance, then "
            "about six filesystem calls (stat, open, fstat, pread, close, write), each of "
            "which wasmtime's WASI hands to a tokio blocking-pool thread and back."
        )
        data = module.read_bytes()
        fresh = compare(
            {
                "wasm.read_file.fresh_cached": (
                    SelfTimed(lambda: _fresh_call(project, str(cache))),
                    COMPILE,
                ),
                "wasm.read_file.fresh_uncached": (
                    SelfTimed(lambda: _fresh_call(project, "-")),
                    COMPILE,
                ),
            },
            {COMPILE: _compiler_like_environment(data)},
            rounds=ctx.rounds(9, 2),
            sample_seconds=None,
        )
        for measured in fresh.values():
            measured.note = (
                "timed inside the child, from creating the environment (imports excluded)"
            )
        fresh["wasm.read_file.fresh_cached"].extra["module_bytes"] = len(data)
        whole = compare(
            {
                "wasm.fresh_process.total": (
                    lambda: run_python(_CHILD, str(project), str(cache), SMALL_FILE),
                    BARE_PYTHON,
                )
            },
            {BARE_PYTHON: lambda: run_python("pass")},
            rounds=ctx.rounds(5, 1),
            sample_seconds=None,
        )
        whole["wasm.fresh_process.total"].subject_fn = None
        yield {**warm, **fresh, **whole}


def _fileops_module() -> Path:
    from codecoder import sandboxes

    path = Path(os.path.dirname(sandboxes.__file__)) / "fileops" / "fileops.wasm"
    if not path.is_file():
        raise Skipped(f"{path} is not built (sandboxes/build.sh)")
    return path


def _compiler_like_environment(data: bytes) -> Callable[[], object]:
    """Compiling `data` with an engine whose code-generation settings are WasmEnvironment's
    (fuel, epoch interruption, optimised for speed), so it costs here what it costs there."""
    import wasmtime

    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    config.cranelift_opt_level = "speed"
    engine = wasmtime.Engine(config)
    return lambda: wasmtime.Module(engine, data)


AREA = Area("wasm", "@wasm calls", SPECS, run)
