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

Every record carries the project's path (`project`), the session, the tool, the key, the
environment, the decision and its source, the entry that matched, the human's answer, the
outcome and the duration; `codecoder log` reads them back (filtered by tool, decision, outcome
and time, as text or JSON lines, and following the log as it grows).
A call that ended before its command did (interrupted, cancelled, killed at its deadline) keeps
the tail of what the command had printed by then, as `output`.

A sandbox's connections through its egress proxy are recorded too, one line each, as tool
`network` with the key `network:<host>`, outcome ok or denied, and a `network` object (host, port,
address, bytes each way).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codecoder.foundation.decision import Decision


class AuditLog:
    """Appends records to a JSON-lines file.

    Each record is written with one `write()` on a descriptor opened with O_APPEND, so records of
    concurrent processes never interleave or overwrite each other; the log is never truncated.
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
    ) -> dict[str, Any]:
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
            "violations": list(decision.violations) if decision else [],
            "outcome": outcome,
            "error": error,
            "duration_ms": round(duration * 1000, 3),
        }
        if decision is not None and decision.escalated_from is not None:
            entry["escalated_from"] = decision.escalated_from.value
        if agent:
            entry["agent"] = agent
        if network:
            entry["network"] = network  # a connection of a sandbox (runtime.tools.network)
        if output:
            entry["output"] = output  # the tail of what an unfinished command had printed
        if self.path is not None:
            data = (json.dumps(entry, ensure_ascii=True) + "\n").encode()
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
            try:
                fd = os.open(self.path, flags, 0o600)
            except FileNotFoundError:  # the first record: make the directory
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(self.path, flags, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        return entry

    def tail(self, count: int = 20) -> list[dict[str, Any]]:
        return list(self.read())[-count:]

    def read(self) -> Iterator[dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return
        with self.path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                record = parse_record(line)
                if record is not None:
                    yield record


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
