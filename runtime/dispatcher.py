"""The one dispatcher: validate → permission → decide → execute → audit.

Every call of every interface (Python API, CLI, replay, MCP, child agents) goes through
`Dispatcher.call`. `execute()` is unreachable until the decision allows the call; every call,
refused or not, leaves one audit record, and so does a call interrupted by Ctrl-C or SIGTERM
(outcome `interrupted`, the interruption then carrying on up to whoever handles it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from environments.workspaceguard import unresolved_quarantine
from runtime.audit import AuditLog
from runtime.ceiling import EnvironmentTag
from runtime.decision import Decision
from runtime.engine import PermissionEngine
from runtime.errors import (
    CodecoderError,
    ExecutionFailed,
    InvalidArguments,
    PermissionDenied,
    ToolError,
    UnknownTool,
)
from runtime.tool import CallSite, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from runtime.session import Runtime, Session


@dataclass(slots=True)
class CallOutcome:
    """How one call ended: a result or an error, and the decision that let it run (or not)."""

    tool: str
    result: ToolResult | None
    error: CodecoderError | None
    decision: Decision | None
    duration: float

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and not self.result.is_error

    def unwrap(self) -> ToolResult:
        """The result, or the error raised."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def to_json(self) -> dict[str, Any]:
        error = None
        if self.error is not None:
            error = {"type": type(self.error).__name__, "message": str(self.error)}
        decision = self.decision.to_json() if self.decision else None
        return {
            "tool": self.tool,
            "ok": self.ok,
            "result": self.result.to_json() if self.result else None,
            "error": error,
            "decision": decision,
            "duration_ms": round(self.duration * 1000, 3),
        }


def _refuse_while_quarantine_unresolved(workspace: Path) -> None:
    """Host tools do not run in a workspace still holding what a sandbox planted there."""
    why = unresolved_quarantine(workspace)
    if why is not None:
        raise ExecutionFailed(why)


class Dispatcher:
    def __init__(
        self, runtime: Runtime, session: Session, engine: PermissionEngine, audit: AuditLog
    ) -> None:
        self._runtime = runtime
        self._session = session
        self._engine = engine
        self._audit = audit

    def call(
        self,
        name: str,
        args: Any,
        *,
        progress: Callable[[float, float | None, str | None], None] | None = None,
    ) -> CallOutcome:
        started = time.monotonic()
        decision: Decision | None = None
        try:
            tool = self._tool(name)
            params = validate_arguments(tool, args)
            runtime = self._runtime
            tag = runtime.environment_of(name)
            permission = tool.permission_in(params, CallSite(runtime.project_dir, tag))
            decision = self._engine.decide(name, tag, permission)
            if tag is EnvironmentTag.SHELL:
                _refuse_while_quarantine_unresolved(runtime.project_dir)
            ctx = ToolContext(
                workspace=runtime.project_dir,
                environment=runtime.environment(tag),
                environment_tag=tag,
                session_id=self._session.id,
                limits=runtime.config.limits,
                session=self._session,
                extra={"read_roots": runtime.config.read_roots},
                key=permission.key,
                grant=decision.grant,
                progress=progress,
            )
            result = tool.execute(params, ctx)
        except CodecoderError as exc:
            if isinstance(exc, PermissionDenied) and exc.decision is not None:
                decision = exc.decision
            return self._finish(name, None, exc, decision, started)
        except Exception as exc:  # a tool's bug must not escape as a foreign exception
            error = ExecutionFailed(f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return self._finish(name, None, error, decision, started)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (runtime.cli): audit, go on
            self._finish(name, None, None, decision, started, interrupted=type(exc).__name__)
            raise
        return self._finish(name, result, None, decision, started)

    def _tool(self, name: str) -> Tool[Any]:
        tools = self._session.tools()
        tool = tools.get(name)
        if tool is None:
            raise UnknownTool(name, list(tools))
        return tool

    def _finish(
        self,
        name: str,
        result: ToolResult | None,
        error: CodecoderError | None,
        decision: Decision | None,
        started: float,
        interrupted: str | None = None,
    ) -> CallOutcome:
        duration = time.monotonic() - started
        if interrupted is not None:
            outcome = "interrupted"
        elif isinstance(error, PermissionDenied):
            outcome = "denied"
        elif isinstance(error, ToolError):
            outcome = "error"
        elif error is not None:
            outcome = "invalid"
        else:
            outcome = "ok" if result is not None and not result.is_error else "failed"
        session = self._session
        self._audit.record(
            session=session.id,
            tool=name,
            decision=decision,
            outcome=outcome,
            duration=duration,
            error=str(error) if error else interrupted,
            agent={"id": session.agent_id, "depth": session.depth} if session.depth else None,
        )
        return CallOutcome(name, result, error, decision, duration)


def validate_arguments(tool: Tool[Any], args: Any) -> Any:
    """The tool's parameter model filled from `args`, or InvalidArguments naming each field."""
    if not isinstance(args, Mapping):
        raise InvalidArguments(
            tool.name, [("(arguments)", f"must be a JSON object, got {type(args).__name__}")]
        )
    try:
        return tool.parameters.model_validate(dict(args))
    except ValidationError as exc:
        problems = [
            (".".join(str(p) for p in err["loc"]) or "(arguments)", err["msg"])
            for err in exc.errors()
        ]
        raise InvalidArguments(tool.name, problems) from None
