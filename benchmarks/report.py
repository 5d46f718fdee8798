"""What a benchmark run reports: figures against baselines and targets, as JSON and as a table.

Every area declares its figures up front (`FigureSpec`: a stable name, a unit, the baseline it
is compared with, the target if the issue sets one). A run fills them in; a figure that could
not be measured (its environment is unavailable, its area was not selected or failed) is still
reported, with status `skipped` or `error` and the reason, so the JSON has the same names and
units in every run and can be compared across versions.

JSON shape (`SCHEMA`):

    {"schema": "codecoder-benchmarks/1", "started_at", "duration_s", "options", "machine",
     "memory": {"start_rss_kib", "peak_rss_kib"},
     "summary": {"pass", "miss", "info", "skipped", "error"},
     "areas": [{"name", "title", "status", "reason", "duration_s", "rss_high_water_kib",
                "figures": [{"name", "label", "unit", "better",
                             "subject": STATS | null, "baseline_label",
                             "baseline": STATS | null, "ratio",
                             "target": {"kind", "limit", "text"} | null,
                             "status", "note", "profile": [...], "extra": {...}}]}]}
    STATS = {"median", "p25", "p75", "iqr", "samples", "calls_per_sample"}

`ratio` is subject median / baseline median. Statuses: `pass` and `miss` (against the target),
`info` (no target), `skipped`, `error`. `extra` holds free-form facts of one figure (match
counts, scaling); `profile` the functions that took the time of a missed figure.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from codecoder.benchmarks.measure import Measured, ProfileLine, Stats

__all__ = [
    "SCHEMA",
    "Area",
    "AreaResult",
    "AreaRun",
    "BenchContext",
    "Figure",
    "FigureSpec",
    "Report",
    "Skipped",
    "Status",
    "Target",
    "Unit",
]

SCHEMA = "codecoder-benchmarks/1"

Unit = Literal["us", "ms", "s", "calls/s", "chars", "per100", "MiB"]
_SCALE: dict[str, float] = {
    "us": 1e6,
    "ms": 1e3,
    "s": 1.0,
    "calls/s": 1.0,
    "chars": 1.0,
    "MiB": 1 / 2**20,  # samples in bytes
    "per100": 1.0,
}
_SHOWN_UNIT = {
    "us": "µs",
    "ms": "ms",
    "s": "s",
    "calls/s": "calls/s",
    "chars": "chars",
    "MiB": "MiB",
    "per100": "per 100 calls",
}


class Status(enum.StrEnum):
    PASS = "pass"
    MISS = "miss"
    INFO = "info"
    SKIPPED = "skipped"
    ERROR = "error"


class Skipped(Exception):
    """Raised by an area whose environment is unavailable; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    """A target of the issue: subject/baseline at most `limit`, or the subject at most `limit`
    (in the figure's unit). Higher-is-better figures have no targets."""

    kind: Literal["max_ratio", "max_value"]
    limit: float
    text: str

    def met(self, subject: Stats, ratio: float | None) -> bool:
        if self.kind == "max_value":
            return subject.median <= self.limit
        return ratio is not None and ratio <= self.limit

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "limit": self.limit, "text": self.text}


@dataclass(frozen=True, slots=True)
class FigureSpec:
    """One figure an area reports: what is measured, against what, in which unit."""

    name: str
    label: str
    unit: Unit
    baseline: str | None
    target: Target | None = None
    better: Literal["lower", "higher"] = "lower"


@dataclass(slots=True)
class Figure:
    spec: FigureSpec
    status: Status
    subject: Stats | None = None
    baseline: Stats | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    profile: list[ProfileLine] = field(default_factory=list)

    @classmethod
    def unmeasured(cls, spec: FigureSpec, status: Status, reason: str) -> Figure:
        return cls(spec, status, note=reason)

    @classmethod
    def from_measured(cls, spec: FigureSpec, measured: Measured) -> Figure:
        scale = _SCALE[spec.unit]
        subject = Stats.of(measured.subject, scale=scale, calls=measured.subject_calls)
        baseline = None
        if measured.baseline is not None:
            baseline = Stats.of(measured.baseline, scale=scale, calls=measured.baseline_calls)
        figure = cls(spec, Status.INFO, subject, baseline, measured.note, dict(measured.extra))
        if spec.target is not None:
            met = spec.target.met(subject, figure.ratio)
            figure.status = Status.PASS if met else Status.MISS
            if not met:
                figure.note = _sentences(figure.note, measured.miss_note)
        return figure

    @property
    def ratio(self) -> float | None:
        if self.subject is None or self.baseline is None or self.baseline.median == 0:
            return None
        return self.subject.median / self.baseline.median

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        ratio = self.ratio
        return {
            "name": spec.name,
            "label": spec.label,
            "unit": spec.unit,
            "better": spec.better,
            "subject": self.subject.to_json() if self.subject else None,
            "baseline_label": spec.baseline,
            "baseline": self.baseline.to_json() if self.baseline else None,
            "ratio": float(f"{ratio:.4g}") if ratio is not None else None,
            "target": spec.target.to_json() if spec.target else None,
            "status": self.status.value,
            "note": self.note,
            "profile": [line.to_json() for line in self.profile],
            "extra": self.extra,
        }


@dataclass(slots=True)
class BenchContext:
    """What an area may use: the run's scale and a scratch directory of its own."""

    quick: bool
    scratch: Path

    @property
    def sample_seconds(self) -> float:
        """How long one batched sample of a fast callable lasts."""
        return 0.004 if self.quick else 0.02

    def rounds(self, default: int, quick: int) -> int:
        return quick if self.quick else default


AreaRun = Callable[[BenchContext], AbstractContextManager[Mapping[str, "Measured | Skipped"]]]


@dataclass(frozen=True, slots=True)
class Area:
    """A group of figures measured together.

    `run(ctx)` is a context manager: entering it measures and gives a Measured per figure name
    (a Skipped for a figure it could not measure, or it raises Skipped for them all). What it
    set up (runtimes, containers) stays alive until it exits, so that a missed target can still
    be profiled on the real thing. `cheap` areas need no sandbox and run in the smoke test.
    """

    name: str
    title: str
    specs: tuple[FigureSpec, ...]
    run: AreaRun
    cheap: bool = False


@dataclass(slots=True)
class AreaResult:
    name: str
    title: str
    status: Literal["ok", "skipped", "error", "not_run"]
    reason: str | None
    duration: float
    rss_high_water_kib: int | None
    figures: list[Figure]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "duration_s": round(self.duration, 3),
            "rss_high_water_kib": self.rss_high_water_kib,
            "figures": [figure.to_json() for figure in self.figures],
        }


@dataclass(slots=True)
class Report:
    started_at: str
    duration: float
    options: dict[str, Any]
    machine: dict[str, Any]
    memory: dict[str, int | None]
    areas: list[AreaResult]

    def figures(self) -> Iterable[Figure]:
        for area in self.areas:
            yield from area.figures

    def summary(self) -> dict[str, int]:
        counts = {status.value: 0 for status in Status}
        for figure in self.figures():
            counts[figure.status.value] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "started_at": self.started_at,
            "duration_s": round(self.duration, 3),
            "options": self.options,
            "machine": self.machine,
            "memory": self.memory,
            "summary": self.summary(),
            "areas": [area.to_json() for area in self.areas],
        }

    def table(self) -> str:
        """A Markdown table of every figure of the areas that ran, ready for docs/benchmarks.md."""
        rows = [
            "| figure | median (p25–p75), n | baseline | baseline median (p25–p75), n "
            "| ratio | target | result | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for area in self.areas:
            if area.status != "not_run":
                rows.extend(_row(figure) for figure in area.figures)
        memory = self.memory
        peak, start = memory.get("peak_rss_kib"), memory.get("start_rss_kib")
        if peak is not None and start is not None:
            rows.append(
                f"| peak RSS of the runtime process | {peak / 1024:.0f} MiB | after imports "
                f"| {start / 1024:.0f} MiB | {peak / start:.2f}× | – | info "
                "| resource.getrusage high-water mark; child processes not included |"
            )
        return "\n".join(rows)


def _row(figure: Figure) -> str:
    spec = figure.spec
    status = figure.status.value
    if figure.subject is None:
        note = f"{status}: {figure.note}" if figure.note else status
        cells = [spec.label, "–", spec.baseline or "–", "–", "–", _target_text(spec), status, note]
    else:
        note = figure.note
        if figure.profile:
            shown = ", ".join(str(line) for line in figure.profile[:3])
            note = _sentences(note, f"Profile (self time): {shown}")
        cells = [
            spec.label,
            _stats_text(figure.subject, spec.unit),
            spec.baseline or "–",
            _stats_text(figure.baseline, spec.unit) if figure.baseline else "–",
            f"{figure.ratio:.3g}×" if figure.ratio is not None else "–",
            _target_text(spec),
            f"**{status}**" if figure.status is Status.MISS else status,
            note,
        ]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _sentences(*parts: str) -> str:
    """Non-empty parts joined as sentences, each ending with a full stop."""
    kept = [part.strip() for part in parts if part.strip()]
    return " ".join(part if part.endswith(".") else part + "." for part in kept)


def _target_text(spec: FigureSpec) -> str:
    return spec.target.text if spec.target else "–"


def _stats_text(stats: Stats, unit: str) -> str:
    shown = _SHOWN_UNIT[unit]
    return f"{_num(stats.median)} {shown} ({_num(stats.p25)}–{_num(stats.p75)}), n={stats.samples}"


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def area_figures(
    area: Area, measured: Mapping[str, Measured | Skipped], missing: str
) -> list[Figure]:
    """The area's figures in declaration order; a figure the run did not measure is skipped,
    with its own reason if the area gave one."""
    figures: list[Figure] = []
    for spec in area.specs:
        found = measured.get(spec.name)
        if isinstance(found, Measured):
            figures.append(Figure.from_measured(spec, found))
        else:
            reason = str(found) if found is not None else missing
            figures.append(Figure.unmeasured(spec, Status.SKIPPED, reason))
    return figures
