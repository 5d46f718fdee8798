"""The append-only audit log: one JSON line per call, with its decision and how it ended.

It lives in the runtime's state directory (`foundation.state.project_state_directory`, by
default `~/.local/state/codecoder/projects/<id>/audit.jsonl`), out of reach of the tools it records:
a host command (`git clean -fdx`) or a sandbox cannot delete or rewrite it.

Sources (SPEC §7): none, deny, project, session, once, denied, and read-only (a read-only
command run confined read-only, with no question). A call the human chose to run on the host
instead of its sandbox is an escalation: its record names @shell as its environment and
carries `escalated_from` (the sandbox it was bound to). Outcomes:

    ok / failed     the tool ran and succeeded / reported a failure (exit code, is_error)
    error           the tool could not do its work (ToolError: timeout, sandbox unavailable, ...)
    denied          refused: a deny rule, the human, the ceiling
    invalid         the call never got as far as a decision (unknown tool, bad arguments)
    interrupted     Ctrl-C or SIGTERM arrived while the call was decided or ran
    cancelled       the MCP client cancelled the call (notifications/cancelled)
    handed-over     another agent's hook allowed its own call: the agent runs it
    asked           another agent's hook had the agent ask its person (a record `ran` follows
                    when the agent reports that the call ran: the person approved it)
    ran             the agent ran a call its person approved at its own prompt

Every record carries the project's path (`project`), the session, the tool, the key, the
environment, the decision and its source, the entry that matched, who or what decided
(`decided_by`: person, given-answer, rule, non-interactive, cancelled, timeout), the answer
(only where someone gave one: a person, or `--answer`/a replay line), the outcome and the
duration; `codecoder log` reads them back (filtered by tool, decision, outcome
and time, as text or JSON lines, and following the log as it grows).
A call that ended before its command did (interrupted, cancelled, killed at its deadline) keeps
the tail of what the command had printed by then, as `output`.

A sandbox's connections through its egress proxy are recorded too, one line each, as tool
`network` with the key `network:<host>`, outcome ok or denied, and a `network` object (host, port,
address, bytes each way).

Nothing lost. A call is audited before it runs: `reserve()` sets aside room in the log's file
system for its record (fallocate past the end of the file, which appends then fill), so a call
that could not be recorded does not run (`AuditUnavailable`, a clear error) instead of running and
then failing to say so. Each record starts on a fresh line: a line cut short (a full disk, a
crash in the middle of a write) ends at the next record, never swallows it. Readers (`read`,
`codecoder log`) report a damaged line (`Damaged`) and go on, and take back a record that an
older writer appended to a cut line.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from codecoder.foundation.decision import Decider, Decision
from codecoder.foundation.errors import AuditUnavailable
from codecoder.foundation.regularfile import open_regular

__all__ = ["AuditLog", "Damaged", "parse_line", "parse_record"]

# Room set aside ahead of a call's record: far more than one record (about 500 bytes; one that
# keeps the tail of an unfinished command's output, a few KB), so the calls running at the same
# time all fit in it.
RESERVED: Final = 256 * 1024
_FALLOC_FL_KEEP_SIZE: Final = 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)


@dataclass(frozen=True, slots=True)
class Damaged:
    """A line of the log that is not a record: cut short (a full disk, a crash) or altered."""

    line: int  # 1-based; 0 when not known (a log followed from its end)
    text: str  # its beginning, for a message

    def describe(self, path: Path | None) -> str:
        where = (
            f"line {self.line} of {path or 'the audit log'}"
            if self.line > 0
            else (f"a line of {path or 'the audit log'}")
        )
        return f"{where} is damaged (cut short, or not a record): {self.text[:60]!r}; skipped"


class AuditLog:
    """Appends records to a JSON-lines file.

    Each record is written with one `write()` on a descriptor opened with O_APPEND, so records of
    concurrent processes never interleave or overwrite each other; the log is never truncated.
    `reserve()` before a call runs makes sure its record will fit.
    """

    def __init__(self, path: Path | None, project: Path | None = None) -> None:
        """`project`, when given, is written into every record, so a record read on its own
        (or a log collected from several projects) says which project it is about."""
        self.path = path
        self.project = str(project) if project is not None else None

    def record(
        self,
        *,
        session: str,
        tool: str,
        decision: Decision | None,
        outcome: str,
        duration: float,
        error: str | None = None,
        agent: dict[str, Any] | None = None,
        network: dict[str, Any] | None = None,
        output: str | None = None,
        front_end: str | None = None,
        host_tool: str | None = None,
        asked: bool = False,
    ) -> dict[str, Any]:
        """One record. `front_end` and `host_tool` name another agent's hook that decided
        without running anything (`hook claude-code`, its tool `Bash`); `asked`: the hook had
        the agent ask its person (the record's decision is then `ask`, by nobody yet)."""
        entry: dict[str, Any] = {
            "ts": round(time.time(), 6),
            "project": self.project,
            "session": session,
            "tool": tool,
            "key": decision.key if decision else None,
            "environment": decision.environment.value if decision else None,
            "decision": ("allow" if decision.allowed else "deny") if decision else None,
            "source": decision.source.value if decision else None,
            "matched": decision.matched if decision else None,
            "answer": decision.answer.value if decision and decision.answer else None,
            "decided_by": decided_by(decision) if decision else None,
            "violations": list(decision.violations) if decision else [],
            "outcome": outcome,
            "error": error,
            "duration_ms": round(duration * 1000, 3),
        }
        if decision is not None and decision.escalated_from is not None:
            entry["escalated_from"] = decision.escalated_from.value
        if asked:
            entry.update(decision="ask", source=None, decided_by=None, answer=None)
        if front_end:
            entry["front_end"] = front_end
        if host_tool:
            entry["host_tool"] = host_tool
        if agent:
            entry["agent"] = agent
        if network:
            entry["network"] = network  # a connection of a sandbox (runtime.tools.network)
        if output:
            entry["output"] = output  # the tail of what an unfinished command had printed
        if self.path is not None:
            self._append((json.dumps(entry, ensure_ascii=True) + "\n").encode())
        return entry

    def reserve(self) -> None:
        """Make sure the next record can be written, before the call it records runs: room set
        aside past the end of the log (see the module docstring). Raises `AuditUnavailable`
        when there is none."""
        if self.path is None:
            return
        fd = self._open()
        try:
            end = os.fstat(fd).st_size
            if _libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE, end, RESERVED) != 0:
                code = ctypes.get_errno()
                if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise self._unavailable(OSError(code, os.strerror(code)))
                # A file system that cannot set room aside: at least the room must be there.
                stats = os.fstatvfs(fd)
                if stats.f_bavail * stats.f_frsize < RESERVED:
                    raise self._unavailable(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        finally:
            os.close(fd)

    def _open(self) -> int:
        assert self.path is not None
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
        try:
            try:
                return open_regular(self.path, flags, 0o600)
            except FileNotFoundError:  # the first record: make the directory
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                return open_regular(self.path, flags, 0o600)
        except OSError as exc:
            raise self._unavailable(exc) from None

    def _append(self, data: bytes) -> None:
        """One write at the end (O_APPEND: concurrent writers never overwrite each other),
        starting a fresh line if the last one was cut short."""
        fd = self._open()
        try:
            end = os.fstat(fd).st_size
            if end and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, "no space left on device: the record was cut short")
        except OSError as exc:
            raise self._unavailable(exc) from None
        finally:
            os.close(fd)

    def _unavailable(self, exc: OSError) -> AuditUnavailable:
        reason = exc.strerror or str(exc)
        return AuditUnavailable(f"the audit log {self.path} cannot be used: {reason}")

    def tail(self, count: int = 20) -> list[dict[str, Any]]:
        return list(self.read())[-count:]

    def read(self, damaged: Callable[[Damaged], None] | None = None) -> Iterator[dict[str, Any]]:
        """The records, in order; each damaged line is given to `damaged` (if given) and
        skipped. A log that is not a regular file (a FIFO) is refused (`AuditUnavailable`)."""
        if self.path is None or not self.path.exists():
            return
        try:
            fd = open_regular(self.path)
        except OSError as exc:
            raise self._unavailable(exc) from None
        with os.fdopen(fd, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                records, problem = parse_line(line, number)
                if problem is not None and damaged is not None:
                    damaged(problem)
                yield from records


def parse_line(line: str, number: int = 0) -> tuple[list[dict[str, Any]], Damaged | None]:
    """The records on one line of the log, and what is damaged on it. A blank line holds none;
    a line that is not a record is damaged, but a whole record after a cut (an older writer
    appended it to a line cut short) is taken back."""
    record = parse_record(line)
    if record is not None or not line.strip():
        return ([record] if record is not None else []), None
    problem = Damaged(number, line.strip())
    start = line.find('{"ts":', 1)
    while start > 0:
        salvaged = parse_record(line[start:])
        if salvaged is not None:
            return [salvaged], Damaged(number, line[:start].strip())
        start = line.find('{"ts":', start + 1)
    return [], problem


def decided_by(decision: Decision) -> str:
    """Who or what decided (`Decider`): said by the decision, else read from its source."""
    if decision.decided_by is not None:
        return decision.decided_by.value
    return _DECIDED_BY_SOURCE.get(decision.source.value, Decider.RULE.value)


# Records written before `decided_by` existed: a refusal with an answer was a person's; one
# without, the non-interactive policy's (or a cancelled question's; they cannot be told apart).
_DECIDED_BY_SOURCE = {"once": Decider.PERSON.value, "denied": Decider.NON_INTERACTIVE.value}


def who_decided(record: dict[str, Any]) -> str | None:
    """A record's `decided_by`, also for lines written before it was recorded."""
    found = record.get("decided_by")
    if isinstance(found, str):
        return found
    if record.get("decision") is None:
        return None
    if record.get("answer"):
        return Decider.PERSON.value
    return _DECIDED_BY_SOURCE.get(str(record.get("source")), Decider.RULE.value)


def parse_record(line: str) -> dict[str, Any] | None:
    """One line of the log as a record; None for a blank line or one that is not a record
    (a line being written, or damaged: reading the log never fails on it)."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None
