"""The one dispatcher: validate → permission → decide → execute → audit.

Every call of every interface (Python API, CLI, replay, MCP, child agents) goes through
`Dispatcher.call`. What a call needs before anything runs is made in one place,
`Dispatcher.prepare`: the tool, its validated arguments, the environment it is bound to, its
key there, the decision and where the decided call runs (the host, when the human escalated
it), as one value (`PreparedCall`) that `call` then executes. `codecoder decide` and the hooks
(`runtime.evaluation`) ask `prepare` the same with nobody asked, so what `decide` says and
what `call` does cannot drift apart.

`execute()` is unreachable until the decision allows the call; every call, refused or not,
leaves one audit record, and so does a call interrupted by Ctrl-C or SIGTERM (outcome
`interrupted`, the interruption then carrying on up to whoever handles it). A command's output
is passed on as it comes (`output`, `progress`: runtime.tools.liveoutput) and what it printed
before it was interrupted, cancelled or killed at its deadline is kept: in the error
(`ToolError.output`) and in the audit record (its tail). A call's duration leaves out the time
spent waiting for the human's answer (`CallOutcome.waited`): it measures the call, not the
person. Where the application traces with OpenTelemetry, each call is an `execute_tool` span
too (runtime.telemetry, which imports nothing of OpenTelemetry itself).
"""

from __future__ import annotations

import threading
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from codecoder.auditlog import AuditLog
from codecoder.config.project import ProjectConfig
from codecoder.environments.base import Environment, OutputListener
from codecoder.environments.host.gitseen import GitGuard, refusal
from codecoder.environments.workspaceguard import quarantine, unresolved_quarantine
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Decision, Source
from codecoder.foundation.errors import (
    AuditUnavailable,
    Cancelled,
    CodecoderError,
    ExecutionFailed,
    InvalidArguments,
    PermissionDenied,
    ToolError,
    UnknownTool,
    UsageError,
)
from codecoder.permissions.chain import PermissionChain
from codecoder.permissions.keys import CallSite, Permission, PermissionKey
from codecoder.permissions.prompt import Asker, AskRequest
from codecoder.telemetry import ToolSpan, tool_span
from codecoder.tools.base import CallingSession, Tool, ToolContext, ToolResult
from codecoder.tools.files.paths import STANDING
from codecoder.tools.liveoutput import LiveOutput
from codecoder.tools.network import SessionNetwork

# How much of an unfinished command's output its audit record keeps (its last characters).
AUDITED_OUTPUT = 2000


class DispatchingRuntime(Protocol):
    """What the dispatcher reads of the runtime it serves (runtime.session.Runtime)."""

    @property
    def project_dir(self) -> Path: ...
    @property
    def config(self) -> ProjectConfig: ...
    @property
    def git_guard(self) -> GitGuard: ...
    def environment_of(self, tool: str) -> EnvironmentTag: ...
    def environment(
        self, tag: EnvironmentTag, *, session: str | None = None
    ) -> Environment[Any, Any]: ...


class DispatchingSession(CallingSession, Protocol):
    """The session whose calls the dispatcher runs (runtime.session.Session)."""

    @property
    def id(self) -> str: ...
    @property
    def standing(self) -> str:
        """Where the caller stands in the workspace ("." for the workspace itself)."""
        ...


@dataclass(slots=True)
class CallOutcome:
    """How one call ended: a result or an error, and the decision that let it run (or not)."""

    tool: str
    result: ToolResult | None
    error: CodecoderError | None
    decision: Decision | None
    duration: float  # seconds, without `waited`
    waited: float = 0.0  # seconds spent waiting for the human's answer

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and not self.result.is_error

    @property
    def text(self) -> str:
        """The outcome as the model is shown it (MCP, the agent frameworks' adapters): the
        tool's output, or what refused or stopped the call, with what a command printed
        before it was stopped."""
        error = self.error
        if error is None:
            assert self.result is not None
            return self.result.output
        if isinstance(error, PermissionDenied):
            text = f"permission denied: {error}"
        elif isinstance(error, UsageError):
            text = f"invalid call: {error}"
        elif isinstance(error, Cancelled):
            text = f"cancelled: {error}"
        elif isinstance(error, ToolError):
            text = f"tool error: {error}"
        else:
            text = f"error: {error}"
        if isinstance(error, ToolError) and error.output:
            # What the command printed before it was stopped (its deadline, a cancel) is kept.
            text += f"\noutput so far:\n{error.output}"
        return text

    def unwrap(self) -> ToolResult:
        """The result, or the error raised."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] | None = None
        if self.error is not None:
            error = {"type": type(self.error).__name__, "message": str(self.error)}
            if isinstance(self.error, ToolError) and self.error.output:
                error["output"] = self.error.output  # what it printed before it failed
        decision = self.decision.to_json() if self.decision else None
        return {
            "tool": self.tool,
            "ok": self.ok,
            "result": self.result.to_json() if self.result else None,
            "error": error,
            "decision": decision,
            "duration_ms": round(self.duration * 1000, 3),
            "waited_ms": round(self.waited * 1000, 3),
        }


def _refuse_while_quarantine_unresolved(workspace: Path) -> None:
    """Host tools do not run in a workspace still holding what a sandbox planted there."""
    why = unresolved_quarantine(workspace)
    if why is not None:
        raise ExecutionFailed(why)


def _quarantine_planted(workspace: Path, planted: list[str], tool: str) -> None:
    """What a host command created among the runtime's trust files and the agents' settings
    goes where a sandbox's plants go: out of the workspace, and the call fails."""
    if not planted:
        return
    why = (
        f"a host command ({tool}) created {', '.join(planted)} in the workspace: the runtime's "
        "trust files and the agents' settings are written only by the runtime, or by a write "
        "allowed once"
    )
    raise ExecutionFailed(f"{why}. Quarantined: {quarantine(workspace, planted, why)}")


def _with_git_changes(result: ToolResult, changes: list[str]) -> ToolResult:
    """A host command's result, saying at once what it changed of what git runs (the next
    host command is refused until the human accepts it)."""
    if not changes:
        return result
    note = f"\n[codecoder: {refusal(changes, by_this_command=True)}]"
    return ToolResult(result.output + note, result.is_error, {**result.data, "git_unseen": changes})


def _program_of(key: PermissionKey | None) -> str | None:
    """The command a call's network questions name (`pip download`), where its key knows it."""
    if key is None or not key.argv:
        return None
    return " ".join(key.argv[:2])


def _with_refused_hosts(result: ToolResult, refused: Mapping[str, str]) -> ToolResult:
    """A sandboxed call's result, saying which hosts its connections were refused and why
    (its client was answered the same at once): what a person needs to allow them, in the
    result itself, not in a log that ended with the sandbox."""
    if not refused:
        return result
    lines = "".join(f"\n[codecoder: egress refused: {why}]" for why in refused.values())
    return ToolResult(
        result.output + lines, result.is_error, {**result.data, "network_refused": dict(refused)}
    )


class Dispatcher:
    def __init__(
        self,
        runtime: DispatchingRuntime,
        session: DispatchingSession,
        engine: PermissionChain,
        audit: AuditLog,
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
        cancel: threading.Event | None = None,
        progress: Callable[[float, float | None, str | None], None] | None = None,
        output: OutputListener | None = None,
        asker: Asker | None = None,
        call_id: str | None = None,
    ) -> CallOutcome:
        """Run one call. `cancel`, once set, stops it (the outcome is Cancelled); `progress`
        receives the tool's progress reports (a command's: its latest lines); `output` a
        command's output as it comes; `asker` answers this call's question instead of the
        session's; `call_id` is the caller's name for the call (an agent framework's), which
        its span carries (runtime.telemetry)."""
        with tool_span(name, call_id, self._session.id) as span:
            return self._call(name, args, cancel, progress, output, asker, span)

    def _call(
        self,
        name: str,
        args: Any,
        cancel: threading.Event | None,
        progress: Callable[[float, float | None, str | None], None] | None,
        output: OutputListener | None,
        asker: Asker | None,
        span: ToolSpan,
    ) -> CallOutcome:
        started = time.monotonic()
        decision: Decision | None = None
        clock = _Clock(started)
        live = LiveOutput(output, progress, limit=self._runtime.config.limits.max_output)
        try:
            prepared = self.prepare(name, args, asker=asker, clock=clock, span=span)
            decision = prepared.decision
            if prepared.refusal is not None:
                raise prepared.refusal
            assert decision is not None  # asked: a decision or a refusal
            tool, params, permission = prepared.tool, prepared.params, prepared.permission
            tag, key = prepared.environment, prepared.key
            runtime = self._runtime
            if tag in (EnvironmentTag.SHELL, EnvironmentTag.CONFINED):
                _refuse_while_quarantine_unresolved(runtime.project_dir)
                # Host processes may run git: never while its hooks or configuration hold
                # what the human has not seen (environments.host.gitseen).
                runtime.git_guard.before()
            elif tag is not EnvironmentTag.RUNTIME and tag is not EnvironmentTag.LANDLOCK:
                # A sandbox may change what host git reads (a file .git/config includes):
                # what the human had is recorded before the first sandbox runs, not at the
                # first host command after it.
                runtime.git_guard.baseline()
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"{name} was cancelled before it started")
            # A call that could not be recorded does not run (runtime.auditlog).
            self._audit.reserve()
            ctx = ToolContext(
                workspace=runtime.project_dir,
                environment=runtime.environment(tag, session=self._session.id),
                environment_tag=tag,
                session_id=self._session.id,
                limits=runtime.config.limits,
                session=self._session,
                extra={"read_roots": runtime.config.read_roots},
                key=key,
                standing=self._session.standing,
                grant=decision.grant,
                read_only=decision.source is Source.READ_ONLY,
                progress=progress,
                output=live,
                cancel=cancel,
                network=SessionNetwork(
                    self._engine,
                    self._audit,
                    self._session.id,
                    runtime.config.credential_hosts if tag is EnvironmentTag.BWRAP else (),
                    program=_program_of(key),
                    environment=tag,
                )
                if tag in (EnvironmentTag.DOCKER, EnvironmentTag.BWRAP)
                else None,
            )
            with self._engine.grants_written_after():
                result = tool.execute(params, ctx)
            if isinstance(ctx.network, SessionNetwork):
                result = _with_refused_hosts(result, ctx.network.refusals())
            if tag in (EnvironmentTag.SHELL, EnvironmentTag.CONFINED):
                # Landlock alone cannot keep existing protected paths read-only: @confined is
                # checked afterwards as the host is.
                planted, unseen = runtime.git_guard.after()
                # A command that names a protected path, shown to the human and allowed once,
                # may create it; any other leaves it quarantined.
                if not (permission.key and permission.key.protected and decision.answer):
                    _quarantine_planted(runtime.project_dir, planted, name)
                result = _with_git_changes(result, unseen)
        except CodecoderError as exc:
            if isinstance(exc, PermissionDenied) and exc.decision is not None:
                decision = exc.decision
                clock.waited_since(decision)
                span.decided(decision)
            if isinstance(exc, ToolError) and not exc.output and live.received:
                exc.output = live.text()
            return self._finish(name, None, exc, decision, clock, span)
        except Exception as exc:  # a tool's bug must not escape as a foreign exception
            error = ExecutionFailed(
                f"{name} failed unexpectedly: {type(exc).__name__}: {exc}", output=live.text()
            )
            error.__cause__ = exc
            return self._finish(name, None, error, decision, clock, span)
        except (
            KeyboardInterrupt
        ) as exc:  # Ctrl-C, or SIGTERM (runtime.interfaces.cli): audit, go on
            self._finish(
                name, None, None, decision, clock, span, interrupted=type(exc).__name__, live=live
            )
            raise
        finally:
            live.close()
        return self._finish(name, result, None, decision, clock, span)

    def prepare(
        self,
        name: str,
        args: Any,
        *,
        ask: bool = True,
        asker: Asker | None = None,
        clock: _Clock | None = None,
        span: ToolSpan | None = None,
    ) -> PreparedCall:
        """Everything a call needs before it runs, in the order `call` needs it: the tool, its
        arguments validated, the environment it is bound to, its key as keyed there (a program
        found where a sandbox writes, a word leading to a protected path), the decision, and
        where and under which key the decided call runs.

        `ask` False decides as `codecoder decide` does: nobody is asked and nothing is
        recorded; where the human would be asked, `question` says what. Else `asker` answers
        instead of the session's, and `span` (runtime.telemetry) records the question and the
        decision. A refusal is returned (`refusal`), never raised, so that both callers see it
        with the call it refuses.
        Raises UsageError (UnknownTool, InvalidArguments) for a call that cannot be considered.
        """
        tools = self._session.tools()
        tool = tools.get(name)
        if tool is None:
            raise UnknownTool(name, list(tools))
        params = validate_arguments(tool, args, self._session.standing)
        runtime = self._runtime
        bound = runtime.environment_of(name)
        site = CallSite(
            runtime.project_dir, bound, runtime.config.credential_hosts, self._session.standing
        )
        permission = tool.permission_in(params, site)
        decided: Decision | AskRequest | None = None
        refusal: PermissionDenied | None = None
        if clock is not None:
            clock.asking = time.monotonic()
        try:
            if ask:
                if span is not None and span.live and permission.key is not None:
                    asker = span.asking(asker or self._engine.asker)
                decided = self._engine.decide(name, bound, permission, asker=asker)
                if span is not None:
                    span.decided(decided)
            else:
                decided = self._engine.evaluate(name, bound, permission)
        except PermissionDenied as refused:
            refusal = refused
            decided = refused.decision
        finally:
            if clock is not None and permission.key is not None:
                clock.waited_since(decided if isinstance(decided, Decision) else None)
        return PreparedCall(
            tool,
            params,
            bound,
            permission,
            decided if isinstance(decided, Decision) else None,
            decided if isinstance(decided, AskRequest) else None,
            refusal,
        )

    def _finish(
        self,
        name: str,
        result: ToolResult | None,
        error: CodecoderError | None,
        decision: Decision | None,
        clock: _Clock,
        span: ToolSpan,
        interrupted: str | None = None,
        live: LiveOutput | None = None,
    ) -> CallOutcome:
        duration = max(time.monotonic() - clock.started - clock.waited, 0.0)
        if interrupted is not None:
            outcome = "interrupted"
        elif isinstance(error, PermissionDenied):
            outcome = "denied"
        elif isinstance(error, Cancelled):
            outcome = "cancelled"
        elif isinstance(error, ToolError):
            outcome = "error"
        elif error is not None:
            outcome = "invalid"
        else:
            outcome = "ok" if result is not None and not result.is_error else "failed"
        session = self._session
        # What an unfinished command printed is otherwise lost: its tail goes on the record.
        so_far = error.output if isinstance(error, ToolError) else ""
        if not so_far and live is not None:
            so_far = live.text()
        try:
            self._audit.record(
                session=session.id,
                tool=name,
                decision=decision,
                outcome=outcome,
                duration=duration,
                error=str(error) if error else interrupted,
                agent={"id": session.agent_id, "depth": session.depth} if session.depth else None,
                output=so_far[-AUDITED_OUTPUT:] if so_far else None,
            )
        except AuditUnavailable as exc:
            # Room was set aside before the call ran, so this is a call that never ran (the
            # reservation itself failed) or a log taken away meanwhile: said, never lost.
            if error is not None and not isinstance(error, AuditUnavailable):
                exc = AuditUnavailable(f"{exc} (the call ended: {error})")
            error = exc
        span.finished(outcome, result, error, duration, clock.waited)
        return CallOutcome(name, result, error, decision, duration, clock.waited)


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A call made ready to run (`Dispatcher.prepare`): what it is, where it is bound, its key
    there, and what the permission chain decided. Exactly one of `decision` (allowed, or the
    refusal's decision), `question` (the human would be asked: deciding without asking only)
    and a refusal without a decision holds what was decided."""

    tool: Tool[Any]
    params: Any
    bound: EnvironmentTag  # the environment the tool is bound to
    permission: Permission  # keyed where it is bound
    decision: Decision | None
    question: AskRequest | None = None
    refusal: PermissionDenied | None = None

    @property
    def escalated(self) -> bool:
        """The human chose the host for this call (never the model: no argument can ask
        for it)."""
        return self.decision is not None and self.decision.escalated_from is not None

    @property
    def environment(self) -> EnvironmentTag:
        """Where the call runs: @shell when escalated, else where it is bound."""
        return EnvironmentTag.SHELL if self.escalated else self.bound

    @property
    def key(self) -> PermissionKey | None:
        """The key the call runs under: on the host, its key there."""
        return self.permission.host if self.escalated else self.permission.key


@dataclass(slots=True)
class _Clock:
    """When a call started, and how long of it was spent waiting for the human."""

    started: float
    waited: float = 0.0
    asking: float = 0.0  # when the permission chain was asked

    def waited_since(self, decision: Decision | None) -> None:
        """Count the time since the chain was asked as the human's, when the human was."""
        if decision is not None and decision.answer is not None and not self.waited:
            self.waited = time.monotonic() - (self.asking or self.started)


def validate_arguments(tool: Tool[Any], args: Any, standing: str = ".") -> Any:
    """The tool's parameter model filled from `args`, or InvalidArguments naming each field.
    Relative paths are read from `standing`, where the caller stands in the workspace
    (`tools.files.paths`): a person at a terminal in a subdirectory means paths there.

    A null given for an optional field that does not take null means "the default": strict
    tool schemas (`runtime.interfaces.schemas.strict_schema`) make every field required and the
    optional ones nullable, so a model in strict mode sends null for what it leaves out.
    """
    if not isinstance(args, Mapping):
        raise InvalidArguments(
            tool.name, [("(arguments)", f"must be a JSON object, got {type(args).__name__}")]
        )
    try:
        return tool.parameters.model_validate(
            _without_null_defaults(tool.parameters, args), context={STANDING: standing}
        )
    except ValidationError as exc:
        problems = [
            (".".join(str(p) for p in err["loc"]) or "(arguments)", _message(err["msg"]))
            for err in exc.errors()
        ]
        raise InvalidArguments(tool.name, problems) from None


def _message(text: str) -> str:
    """pydantic's message without the prefix it puts before a validator's own words."""
    for prefix in ("Value error, ", "Assertion failed, "):
        text = text.removeprefix(prefix)
    return text


def _without_null_defaults(model: type[BaseModel], args: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in args.items():
        field = model.model_fields.get(name)
        if field is not None and value is None and not field.is_required():
            if not _takes_none(field.annotation):
                continue
        elif field is not None and isinstance(value, Mapping):
            nested = _model_of(field.annotation)
            if nested is not None:
                value = _without_null_defaults(nested, value)
        out[name] = value
    return out


def _takes_none(annotation: Any) -> bool:
    return annotation is None or annotation is Any or type(None) in typing.get_args(annotation)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *typing.get_args(annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
