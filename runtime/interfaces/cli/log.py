"""`codecoder log`: the project's audit log read back (`runtime.auditlog`), filtered by tool,
decision, source, outcome and time, as a table or as JSON lines, and followed as it grows.

    codecoder log                         the last 20 records
    codecoder log --tool run_command --decision deny --since 2h
    codecoder log --json --last 1         the call just made, as JSON
    codecoder log --follow                what comes next, until Ctrl-C

Times are `30s`, `10m`, `2h`, `3d` ago, a time of today (`14:05`), or a date and time
(`2026-12-03`, `2026-12-03T14:05`). Whatever a record holds is shown through `visible()`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecoder.interfaces.cli.exit_codes import EXIT_FAILED, EXIT_OK
from codecoder.interfaces.cli.inputs import usage

if TYPE_CHECKING:
    from codecoder.auditlog import Damaged

__all__ = ["LogFilter", "log", "parse_when"]

DEFAULT_LAST = 20
_FOLLOW_POLL = 0.2  # seconds between looks at a followed log
_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(text: str, now: float | None = None) -> float:
    """A time as the options take it, as a timestamp; ValueError says what is accepted."""
    now = time.time() if now is None else now
    ago = _AGO.match(text.strip())
    if ago is not None:
        return now - float(ago.group(1)) * _UNITS[ago.group(2)]
    try:
        clock = datetime.time.fromisoformat(text)
    except ValueError:
        pass
    else:
        today = datetime.datetime.fromtimestamp(now).date()
        return datetime.datetime.combine(today, clock).timestamp()
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use 30s, 10m, 2h or 3d (ago), 14:05 (today), or "
            "2026-12-03 / 2026-12-03T14:05"
        ) from None


@dataclass(frozen=True, slots=True)
class LogFilter:
    """Which records are shown: each given field must match (tools: any of them)."""

    tools: frozenset[str] = frozenset()
    decision: str | None = None
    source: str | None = None
    outcome: str | None = None
    since: float | None = None
    until: float | None = None

    def __call__(self, record: dict[str, Any]) -> bool:
        stamp = record.get("ts")
        when = stamp if isinstance(stamp, (int, float)) else 0.0
        return (
            (not self.tools or record.get("tool") in self.tools)
            and (self.decision is None or record.get("decision") == self.decision)
            and (self.source is None or record.get("source") == self.source)
            and (self.outcome is None or record.get("outcome") == self.outcome)
            and (self.since is None or when >= self.since)
            and (self.until is None or when <= self.until)
        )


def log(args: argparse.Namespace) -> int:
    from codecoder.auditlog import AuditLog
    from codecoder.foundation.errors import AuditUnavailable
    from codecoder.foundation.state import project_state_directory

    project = args.project.resolve()
    path = project_state_directory(project) / "audit.jsonl"
    try:
        wanted = LogFilter(
            frozenset(args.tool or ()),
            args.decision,
            args.source,
            args.outcome,
            parse_when(args.since) if args.since else None,
            parse_when(args.until) if args.until else None,
        )
    except ValueError as exc:
        usage(str(exc))
    if args.last is not None and args.last < 0:
        usage("--last takes a number of records, 0 or more")
    last = args.last if args.last is not None else (None if args.json else DEFAULT_LAST)
    try:
        shown = [r for r in AuditLog(path).read(_report_damaged(path)) if wanted(r)]
    except AuditUnavailable as exc:
        print(f"codecoder: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if last is not None:
        shown = shown[-last:] if last else []
    if not shown and not args.json and not args.follow:
        if path.exists():
            print(f"no record matches (the audit log of {project}: {path})")
        else:
            print(f"no call of {project} is recorded yet (its audit log will be {path})")
    _print(shown, args.json)
    if args.follow:
        try:
            for record in _follow(path):
                if wanted(record):
                    _print([record], args.json)
        except KeyboardInterrupt:
            return EXIT_OK  # Ctrl-C is how one stops following
    return EXIT_OK


def _print(records: Iterable[dict[str, Any]], as_json: bool) -> None:
    for record in records:
        print(json.dumps(record, ensure_ascii=True) if as_json else _line(record), flush=True)


def _line(record: dict[str, Any]) -> str:
    from codecoder.auditlog import who_decided
    from codecoder.foundation.display import visible
    from codecoder.permissions.prompt import key_for_person

    stamp = record.get("ts")
    when = stamp if isinstance(stamp, (int, float)) else 0.0
    today = time.strftime("%Y-%m-%d") == time.strftime("%Y-%m-%d", time.localtime(when))
    shape = "%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S"
    verdict = f"{record.get('decision') or '-'}/{record.get('source') or '-'}"
    duration = record.get("duration_ms")
    fields = [
        time.strftime(shape, time.localtime(when)),
        str(record.get("tool") or "-"),
        str(record.get("key") or "-"),
        str(record.get("environment") or "-"),
        verdict,
        str(record.get("outcome") or "-"),
        f"{duration:.0f} ms" if isinstance(duration, (int, float)) else "-",
    ]
    who = who_decided(record)
    if record.get("answer") and who in ("person", "given-answer", None):
        fields.append(
            f"answered {record['answer']}" + (" (given)" if who == "given-answer" else "")
        )
    elif who in _NOBODY:
        fields.append(_NOBODY[who])
    if record.get("front_end"):
        fields.append(f"by {record['front_end']} ({record.get('host_tool') or '-'})")
    if record.get("error"):
        fields.append(str(record["error"]))
    fields[2] = key_for_person(fields[2])
    return "  ".join(field if index == 2 else visible(field) for index, field in enumerate(fields))


# Refusals nobody answered, said as what they were (never "answered deny").
_NOBODY = {
    "non-interactive": "nobody could be asked (non-interactive)",
    "cancelled": "the question was cancelled",
    "timeout": "the question timed out",
}


def _report_damaged(path: Path) -> Callable[[Damaged], None]:
    """Say on stderr which line of the log is damaged; the records after it are shown."""

    def report(damaged: Damaged) -> None:
        print(f"codecoder: {damaged.describe(path)}", file=sys.stderr, flush=True)

    return report


def _follow(path: Path) -> Iterator[dict[str, Any]]:
    """The records appended to `path` from now on (it may not exist yet), as they come."""
    from codecoder.auditlog import parse_line
    from codecoder.foundation.regularfile import open_regular

    report = _report_damaged(path)
    offset = path.stat().st_size if path.exists() else 0
    pending = b""
    while True:
        try:
            with os.fdopen(open_regular(path), "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except FileNotFoundError:
            chunk = b""
        if not chunk:
            time.sleep(_FOLLOW_POLL)
            continue
        offset += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            records, damaged = parse_line(line.decode("utf-8", "replace"))
            if damaged is not None:
                report(damaged)
            yield from records
        sys.stdout.flush()
