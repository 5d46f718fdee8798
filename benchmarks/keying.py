"""Command keying: `key_command` the first time a command is seen and when it is repeated
(its cache), against `bashlex.parse` of the same string alone.

The first time costs our strict lexer, one bashlex parse (under the lock that keeps bashlex's
shared parser single-threaded) and the program checks; a compound command stops at the lexer
before bashlex is ever called. The repeated case is the one every call of a session pays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import bashlex

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.permissions.commandkey import clear_cache, key_command

__all__ = ["AREA"]

SIMPLE = "git log --oneline -n 5"
COMPOUND = "git status && git push origin main"
PARSE_SIMPLE = "bashlex.parse, same command"
PARSE_COMPOUND = "bashlex.parse, same compound command"

SPECS = (
    FigureSpec(
        "keying.first.simple",
        f"key_command, first time (cache cleared): `{SIMPLE}`",
        "us",
        PARSE_SIMPLE,
    ),
    FigureSpec(
        "keying.first.compound",
        f"key_command, first time (cache cleared): `{COMPOUND}`",
        "us",
        PARSE_COMPOUND,
    ),
    FigureSpec(
        "keying.repeated",
        f"key_command, repeated (cached): `{SIMPLE}`",
        "us",
        PARSE_SIMPLE,
        Target("max_ratio", 1 / 50, "≤ 1/50 of bashlex.parse"),
    ),
)


def _first_time(command: str) -> Callable[[], object]:
    """Key `command` as if never seen: the cache cleared first."""

    def cleared() -> object:
        clear_cache()
        return key_command(command)

    return cleared


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    if key_command(SIMPLE).compound or not key_command(COMPOUND).compound:
        raise RuntimeError("the benchmark commands are no longer keyed as expected")
    figures = {
        "keying.first.simple": (_first_time(SIMPLE), PARSE_SIMPLE),
        "keying.first.compound": (_first_time(COMPOUND), PARSE_COMPOUND),
        "keying.repeated": (lambda: key_command(SIMPLE), PARSE_SIMPLE),
    }
    baselines = {
        PARSE_SIMPLE: lambda: bashlex.parse(SIMPLE),
        PARSE_COMPOUND: lambda: bashlex.parse(COMPOUND),
    }
    yield compare(figures, baselines, rounds=ctx.rounds(15, 5), sample_seconds=ctx.sample_seconds)


AREA = Area("keying", "Command keying", SPECS, run, cheap=True)
