"""Timing primitives: samples of a callable, taken in turn with its baselines, and their summary.

These machines are small and noisy (two shared cores), so nothing here trusts a single timing:

* a *probe* takes one sample: the seconds per call of a callable, averaged over a batch sized
  so that a sample lasts a few milliseconds (`per_call`), or one call timed alone (`one_call`)
  for things that take milliseconds anyway;
* `interleave` samples a subject and its baselines in turn, round after round and in a
  rotating order, so a slow moment of the machine lands on every side alike;
* `Stats` is the median and the quartiles of the samples, never a mean or a minimum.

`profile` runs a callable under cProfile for a moment and names where its time went; the
runner uses it to explain a missed target.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Measured",
    "Probe",
    "ProfileLine",
    "SelfTimed",
    "Stats",
    "compare",
    "interleave",
    "median_time",
    "one_call",
    "per_call",
    "profile",
]

Probe = Callable[[], float]
"""Takes one sample and returns it in SI units (seconds per call, or calls per second)."""

_CLOCK = time.perf_counter


@dataclass(frozen=True, slots=True)
class Stats:
    """The median and quartiles of some samples, in the unit of the figure they belong to.

    `calls_per_sample` says how many calls each sample averaged (1 for calls timed alone).
    """

    median: float
    p25: float
    p75: float
    samples: int
    calls_per_sample: int

    @classmethod
    def of(cls, values: Sequence[float], *, scale: float = 1.0, calls: int = 1) -> Stats:
        if not values:
            raise ValueError("no samples")
        scaled = sorted(v * scale for v in values)
        if len(scaled) == 1:
            q1 = med = q3 = scaled[0]
        else:
            q1, med, q3 = statistics.quantiles(scaled, n=4, method="inclusive")
        return cls(med, q1, q3, len(scaled), calls)

    @property
    def iqr(self) -> float:
        return self.p75 - self.p25

    def to_json(self) -> dict[str, float | int]:
        return {
            "median": _round(self.median),
            "p25": _round(self.p25),
            "p75": _round(self.p75),
            "iqr": _round(self.iqr),
            "samples": self.samples,
            "calls_per_sample": self.calls_per_sample,
        }


def _round(value: float) -> float:
    """Four significant digits: more would be noise on these machines."""
    return float(f"{value:.4g}")


def _batch(fn: Callable[[], object], calls: int) -> float:
    clock = _CLOCK
    started = clock()
    for _ in range(calls):
        fn()
    return (clock() - started) / calls


def per_call(
    fn: Callable[[], object], *, sample_seconds: float, max_calls: int = 1_000_000
) -> tuple[Probe, int]:
    """A probe averaging `fn` over a batch that lasts about `sample_seconds`, and the batch size.

    The batch size is fixed once (after a short warm-up), so every sample of a figure averages
    the same number of calls.
    """
    fn()  # warm-up: caches, lazy imports, first-call setup
    calls = 1
    while True:
        spent = _batch(fn, calls) * calls
        if spent >= sample_seconds / 10 or calls >= max_calls:
            break
        calls *= 10
    calls = max(1, min(max_calls, round(calls * sample_seconds / max(spent, 1e-9))))
    return (lambda: _batch(fn, calls)), calls


def median_time(
    fn: Callable[[], object], *, sample_seconds: float | None = None, rounds: int = 5
) -> float:
    """The median seconds per call of `fn`, for the breakdowns that explain a figure."""
    probe = (
        one_call(fn) if sample_seconds is None else per_call(fn, sample_seconds=sample_seconds)[0]
    )
    return statistics.median(probe() for _ in range(rounds))


def one_call(fn: Callable[[], object]) -> Probe:
    """A probe timing one call of `fn` (for calls long enough to time alone)."""

    def probe() -> float:
        started = _CLOCK()
        fn()
        return _CLOCK() - started

    return probe


def interleave(
    probes: Mapping[str, Probe], rounds: int, *, warmup: int = 1
) -> dict[str, list[float]]:
    """`rounds` samples of every probe, taken in turn in a rotating order; warm-up discarded."""
    names = list(probes)
    for _ in range(warmup):
        for name in names:
            probes[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(probes[name]())
    return samples


@dataclass(slots=True)
class Measured:
    """What was measured for one figure: raw samples in SI units (seconds per call, calls per
    second, bytes), and optionally the callable behind the subject, so that a missed target can
    be profiled. `note` is always shown; `miss_note` (what profiling found) only on a miss."""

    subject: list[float]
    baseline: list[float] | None = None
    subject_calls: int = 1
    baseline_calls: int = 1
    note: str = ""
    miss_note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    subject_fn: Callable[[], object] | None = None


@dataclass(frozen=True, slots=True)
class SelfTimed:
    """A probe that measures itself and returns its own sample: seconds, e.g. a child process
    reporting how long its first call took without its start-up, or a rate in calls/s."""

    fn: Callable[[], float]


Subject = Callable[[], object] | SelfTimed


def compare(
    figures: Mapping[str, tuple[Subject, str | None]],
    baselines: Mapping[str, Subject],
    *,
    rounds: int,
    sample_seconds: float | None,
) -> dict[str, Measured]:
    """Each figure's subject and its named baseline, sampled in turn (`interleave`).

    With `sample_seconds` each sample averages a batch (`per_call`); without, each sample is
    one call (`one_call`); a `SelfTimed` subject reports its own samples.
    """
    # A subject shared by several figures (one call against several baselines) is sampled once.
    subject_of: dict[str, str] = {}
    callables: dict[str, Subject] = {}
    for name, (fn, _) in figures.items():
        probe_name = next((p for p, c in callables.items() if c is fn), f"figure:{name}")
        callables[probe_name] = fn
        subject_of[name] = probe_name
    callables.update({f"baseline:{n}": fn for n, fn in baselines.items()})
    probes: dict[str, Probe] = {}
    calls: dict[str, int] = {}
    for name, fn in callables.items():
        if isinstance(fn, SelfTimed):
            probes[name], calls[name] = fn.fn, 1
        elif sample_seconds is None:
            probes[name], calls[name] = one_call(fn), 1
        else:
            probes[name], calls[name] = per_call(fn, sample_seconds=sample_seconds)
    samples = interleave(probes, rounds)
    measured: dict[str, Measured] = {}
    for name, (fn, baseline) in figures.items():
        key = f"baseline:{baseline}" if baseline is not None else None
        measured[name] = Measured(
            subject=samples[subject_of[name]],
            baseline=samples[key] if key else None,
            subject_calls=calls[subject_of[name]],
            baseline_calls=calls[key] if key else 1,
            subject_fn=None if isinstance(fn, SelfTimed) else fn,
        )
    return measured


@dataclass(frozen=True, slots=True)
class ProfileLine:
    """One function of a profile: the share of all self time it took, and its calls per call."""

    function: str
    self_share: float
    calls_per_call: float

    def to_json(self) -> dict[str, str | float]:
        return {
            "function": self.function,
            "self_share": round(self.self_share, 3),
            "calls_per_call": round(self.calls_per_call, 2),
        }

    def __str__(self) -> str:
        return f"{self.function} {self.self_share:.0%}"


def profile(fn: Callable[[], object], *, seconds: float, top: int = 8) -> list[ProfileLine]:
    """Run `fn` under cProfile for about `seconds`; the functions with the most self time."""
    profiler = cProfile.Profile()
    calls = 0
    deadline = _CLOCK() + seconds
    profiler.enable()
    try:
        while calls == 0 or _CLOCK() < deadline:
            fn()
            calls += 1
    finally:
        profiler.disable()
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values()) or 1.0
    ranked = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)[:top]
    return [
        ProfileLine(_function_name(where), entry[2] / total, entry[1] / calls)
        for where, entry in ranked
    ]


def _function_name(where: tuple[str, int, str]) -> str:
    filename, _, name = where
    if filename == "~":  # a builtin: cProfile names it `<built-in method ...>`
        return name.strip("<>{}").replace("built-in method ", "")
    path = Path(filename)
    return f"{path.parent.name}/{path.name}:{name}"
