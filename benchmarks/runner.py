"""Running the areas: selection, skips, failures, profiles of misses, memory, the report.

An area that raises `Skipped` (no Docker engine, no wasm module) is reported as skipped with
its reason; an area that fails is reported as an error with the exception, and the run goes on.
Nothing an area does can end the run early.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

from codecoder.benchmarks.measure import Measured, profile
from codecoder.benchmarks.report import (
    Area,
    AreaResult,
    BenchContext,
    Figure,
    Report,
    Skipped,
    Status,
    area_figures,
)

__all__ = ["run_areas"]


def _max_rss_kib() -> int:
    """The process's RSS high-water mark so far (child processes are not counted)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def run_areas(
    areas: Sequence[Area],
    *,
    only: Sequence[str] | None = None,
    quick: bool = False,
    profile_misses: bool = True,
    progress: TextIO | None = None,
) -> Report:
    """Run the selected areas (all when `only` is None) and report every figure of all areas."""
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    clock = time.monotonic()
    start_rss = _max_rss_kib()
    load_before = os.getloadavg()[0]
    selected = set(only) if only is not None else {area.name for area in areas}
    unknown = selected - {area.name for area in areas}
    if unknown:
        raise ValueError(f"no benchmark area {', '.join(sorted(unknown))}")
    scratch = Path(tempfile.mkdtemp(prefix="codecoder-bench-"))
    results: list[AreaResult] = []
    try:
        for area in areas:
            if area.name not in selected:
                figures = area_figures(area, {}, "not selected (--only)")
                results.append(
                    AreaResult(area.name, area.title, "not_run", None, 0.0, None, figures)
                )
                continue
            directory = scratch / area.name
            directory.mkdir()
            ctx = BenchContext(quick=quick, scratch=directory)
            results.append(_run_one(area, ctx, profile_misses, progress))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Report(
        started_at=started_at,
        duration=time.monotonic() - clock,
        options={"quick": quick, "only": sorted(selected) if only is not None else None},
        machine={
            **machine(),
            # Other work on the machine moves the figures: the 1-minute load, before and after.
            "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2),
        },
        memory={
            "start_rss_kib": start_rss,
            "peak_rss_kib": _max_rss_kib(),
        },
        areas=results,
    )


def _run_one(
    area: Area, ctx: BenchContext, profile_misses: bool, progress: TextIO | None
) -> AreaResult:
    _say(progress, f"[{area.name}] {area.title} ...")
    clock = time.monotonic()
    status: Literal["ok", "skipped", "error"] = "ok"
    reason: str | None = None
    try:
        with area.run(ctx) as measured:
            figures = area_figures(area, measured, "not measured in this run")
            if profile_misses:
                for figure in figures:
                    found = measured.get(figure.spec.name)
                    fn = found.subject_fn if isinstance(found, Measured) else None
                    if figure.status is Status.MISS and fn is not None:
                        figure.profile = profile(fn, seconds=0.2 if ctx.quick else 1.0)
    except Skipped as skipped:
        status, reason = "skipped", str(skipped)
        figures = area_figures(area, {}, str(skipped))
    except Exception as exc:
        status, reason = "error", f"{type(exc).__name__}: {exc}"
        if progress is not None:
            traceback.print_exc(file=progress)
        figures = [Figure.unmeasured(spec, Status.ERROR, reason) for spec in area.specs]
    duration = time.monotonic() - clock
    _say(progress, f"[{area.name}] {status}{f' ({reason})' if reason else ''} in {duration:.1f} s")
    return AreaResult(area.name, area.title, status, reason, duration, _max_rss_kib(), figures)


def _say(progress: TextIO | None, text: str) -> None:
    if progress is not None:
        print(text, file=progress, flush=True)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""

    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "wasmtime": version("wasmtime"),
        "bashlex": version("bashlex"),
        "docker_sdk": version("docker"),
        "pydantic": version("pydantic"),
        "docker_engine": _docker_engine(),
    }


def _docker_engine() -> str | None:
    """The Docker engine's version, or None when no engine answers."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            return str(client.version().get("Version"))
        finally:
            client.close()
    except Exception:  # no engine, no SDK: the figures of @docker say why they were skipped
        return None
