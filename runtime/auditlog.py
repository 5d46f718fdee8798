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
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codecoder.foundation.decision import Decider, Decision


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
