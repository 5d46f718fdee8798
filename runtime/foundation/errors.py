"""The one exception tree of codecoder.

Every error a caller of the runtime can see is a subclass of `CodecoderError`; exceptions of
docker, wasmtime, bashlex and subprocess are mapped at the boundary where they occur and never
leak.

    CodecoderError
    ├── UsageError                  a call the runtime cannot even consider
    │   ├── UnknownTool             no tool of that name (in this agent's toolset)
    │   └── InvalidArguments        arguments do not fit the tool's parameter model
    ├── PermissionDenied            the call was refused; no tool code ran
    │   ├── DeniedByRule            a deny rule of codecoder.json matched
    │   │   └── RulesUnreadable     codecoder.json or the user's file is broken: it fails closed
    │   ├── DeniedByUser            the human answered Deny
    │   │   └── Unanswered          nobody answered: no one could be asked (non-interactive),
    │   │                           or the question was cancelled or timed out
    │   └── CeilingViolation        a grant above the environment's ceiling was refused
    ├── ConfigError                 codecoder.json cannot be used (carries file, line, column)
    └── ToolError                   the tool ran, or tried to, and failed
        ├── ExecutionFailed         the tool's own failure (bad path, git error, ...)
        ├── ExecutionTimeout        killed at its deadline
        ├── OutOfMemory             killed at its memory limit
        ├── OutOfFuel               a Wasm module ran out of fuel
        ├── SandboxUnavailable      the environment it is bound to cannot be reached
        ├── AuditUnavailable        its audit record cannot be written: it does not run
        └── Cancelled               the caller cancelled the call; what it started was stopped
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codecoder.foundation.decision import Decision


class CodecoderError(Exception):
    """Root of every error the runtime raises."""


class UsageError(CodecoderError):
    """A call the runtime cannot even consider."""


class UnknownTool(UsageError):
    """No tool of that name is available to the caller."""

    def __init__(self, name: str, available: list[str] | None = None) -> None:
        self.name = name
        close = difflib.get_close_matches(name, available or [], n=1, cutoff=0.8)
        meant = f" (did you mean {close[0]}?)" if close else ""
        hint = f"; available: {', '.join(sorted(available))}" if available else ""
        super().__init__(f"unknown tool {name!r}{meant}{hint}")


class InvalidArguments(UsageError):
    """The arguments do not fit the tool's parameter model; `problems` names each field."""

    def __init__(self, tool: str, problems: list[tuple[str, str]]) -> None:
        self.tool = tool
        self.problems = problems
        detail = "; ".join(f"{field}: {message}" for field, message in problems)
        super().__init__(f"invalid arguments for {tool}: {detail}")


class PermissionDenied(CodecoderError):
    """The call was refused before any of the tool's code ran."""

    def __init__(self, message: str, decision: Decision | None = None) -> None:
        self.decision = decision
        super().__init__(message)


class DeniedByRule(PermissionDenied):
    """A deny rule of the project matched the call's key."""


class RulesUnreadable(DeniedByRule):
    """A project or user file cannot be read or parsed: until it is fixed, nothing that needs
    permission runs (its rules are unknown, so any of them could have refused the call)."""


class DeniedByUser(PermissionDenied):
    """The human answered Deny (and, as its subclass Unanswered, nobody did)."""


class Unanswered(DeniedByUser):
    """Refused with no answer: nobody could be asked (the non-interactive policy), or the
    question was cancelled or timed out; its decision's `decided_by` says which. A
    DeniedByUser so that code catching refusals of the question catches it too."""


class CeilingViolation(PermissionDenied):
    """A grant above the ceiling of the tool's environment (e.g. a @shell tool for the project)."""

    def __init__(self, key: str, environment: str, ceiling: str, reason: str = "") -> None:
        self.key = key
        self.environment = environment
        self.ceiling = ceiling
        self.reason = reason or (
            f"{key} runs in {environment}, whose highest grant is {ceiling}: "
            "permanent trust goes only to sandboxed tools"
        )
        super().__init__(f"CeilingViolation: {self.reason}")


class ConfigError(CodecoderError):
    """codecoder.json cannot be used; the message says where and why."""

    def __init__(
        self,
        message: str,
        path: Path | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}" + (f":{column}" if column is not None else "")
            where += ": "
        super().__init__(where + message)


class ToolError(CodecoderError):
    """The tool ran, or tried to run, and failed. `output` is what it had printed by then (a
    command killed at its deadline or cancelled: its output so far, capped), or ""."""

    def __init__(self, message: str = "", *, output: str = "") -> None:
        self.output = output
        super().__init__(message)


class ExecutionFailed(ToolError):
    """The tool's own failure, described for the agent."""


class ExecutionTimeout(ToolError):
    """The call was killed at its deadline."""


class OutOfMemory(ToolError):
    """The call was killed at its memory limit."""


class OutOfFuel(ToolError):
    """A Wasm module used up its fuel."""


class SandboxUnavailable(ToolError):
    """The environment the tool is bound to cannot be reached; the message says what to do."""


class AuditUnavailable(ToolError):
    """The call's audit record cannot be written (a full disk, a log that is not a file): a
    call that cannot be audited does not run."""


class Cancelled(ToolError):
    """The caller cancelled the call while it ran; what it had started was stopped."""
