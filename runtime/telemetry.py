"""OpenTelemetry spans of tool calls, when the application traces.

Every call through the dispatcher is one span when the application has configured a tracer
provider with OpenTelemetry's API (`opentelemetry.trace.set_tracer_provider`), following the
GenAI semantic conventions for tool execution:

    span name               execute_tool {tool}            (kind INTERNAL)
    gen_ai.operation.name   execute_tool
    gen_ai.tool.name        the tool
    gen_ai.tool.call.id     the framework's id for the call (or one made for it)
    gen_ai.tool.type        function
    error.type              the error's class, when the call failed (status ERROR)

and codecoder's own: `codecoder.decision` (allow / deny), `codecoder.key`, `codecoder.source`
(none, deny, read-only, project, session, once, denied), `codecoder.environment`,
`codecoder.matched`, `codecoder.answer` (when a person was asked), `codecoder.outcome` (ok,
failed, error, denied, cancelled, invalid, interrupted), `codecoder.exit_code` (a command's),
`codecoder.duration_ms` and `codecoder.waited_ms` (the time spent waiting for the answer),
`codecoder.session`. Each question is a span event (`codecoder.question`, then
`codecoder.answer`), and so is each grant an answer recorded (`codecoder.grant`).

Nothing here imports OpenTelemetry: an application that traces has imported its API already, so
a call looks it up among the loaded modules and, where it is absent or no provider is
configured, takes the span that does nothing. So there is no import cost without it, and
nothing is exported unless the application says where. The JSONL audit log stays the record;
spans are for the application's own traces.
"""

from __future__ import annotations

import functools
import sys
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codecoder.foundation.decision import Answer, Decision
    from codecoder.foundation.errors import CodecoderError
    from codecoder.permissions.prompt import Asker, AskRequest
    from codecoder.tools.base import ToolResult

__all__ = ["ToolSpan", "tool_span"]


class ToolSpan:
    """One call's span. This one records nothing: the span of a call nobody traces."""

    live = False

    def __enter__(self) -> ToolSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def asking(self, asker: Asker) -> Asker:
        """`asker`, with each question and answer recorded as events of the span."""
        return asker

    def decided(self, decision: Decision) -> None:
        """The decision that let the call run, or refused it."""

    def finished(
        self,
        outcome: str,
        result: ToolResult | None,
        error: CodecoderError | None,
        duration: float,
        waited: float,
    ) -> None:
        """How the call ended."""


_NOTHING = ToolSpan()


def tool_span(tool: str, call_id: str | None, session: str) -> ToolSpan:
    """The span of one call of `tool`: a live one where the application traces."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return _NOTHING
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return _NOTHING
    return _OpenTelemetrySpan(_tracer(provider), trace, tool, call_id, session)


@functools.lru_cache(maxsize=4)
def _tracer(provider: Any) -> Any:
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("codecoder-runtime")
    except PackageNotFoundError:
        own = None
    return provider.get_tracer("codecoder", own)


class _OpenTelemetrySpan(ToolSpan):
    live = True

    def __init__(
        self, tracer: Any, trace: Any, tool: str, call_id: str | None, session: str
    ) -> None:
        self._trace = trace
        self._span = tracer.start_span(
            f"execute_tool {tool}",
            kind=trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id or f"codecoder-{uuid.uuid4().hex[:16]}",
                "gen_ai.tool.type": "function",
                "codecoder.session": session,
            },
        )
        self._token: Any = None

    def __enter__(self) -> ToolSpan:
        from opentelemetry import context

        # The call's span is the current one while it runs: what it does (a child agent's
        # calls) is traced beneath it.
        self._token = context.attach(self._trace.set_span_in_context(self._span))
        return self

    def __exit__(self, *exc: object) -> None:
        from opentelemetry import context

        self._span.end()
        if self._token is not None:
            context.detach(self._token)

    def asking(self, asker: Asker) -> Asker:
        span = self._span

        @functools.wraps(asker)
        def ask(request: AskRequest) -> Answer:
            span.add_event(
                "codecoder.question",
                {
                    "codecoder.key": request.key,
                    "codecoder.environment": request.environment.value,
                    "codecoder.choices": [choice.value for choice in request.choices],
                },
            )
            answer = asker(request)
            span.add_event("codecoder.answer", {"codecoder.answer": answer.value})
            return answer

        return ask

    def decided(self, decision: Decision) -> None:
        from codecoder.foundation.decision import Source

        attributes: dict[str, Any] = {
            "codecoder.decision": "allow" if decision.allowed else "deny",
            "codecoder.source": decision.source.value,
            "codecoder.environment": decision.environment.value,
        }
        for name, value in (
            ("codecoder.key", decision.key),
            ("codecoder.matched", decision.matched),
            ("codecoder.answer", decision.answer.value if decision.answer else None),
            ("codecoder.escalated_from", getattr(decision.escalated_from, "value", None)),
        ):
            if value is not None:
                attributes[name] = value
        self._span.set_attributes(attributes)
        granted = decision.source in (Source.SESSION, Source.PROJECT)
        if decision.allowed and decision.answer is not None and granted and decision.matched:
            self._span.add_event(
                "codecoder.grant",
                {
                    "codecoder.entry": decision.matched,
                    "codecoder.scope": decision.answer.label,
                    "codecoder.environment": decision.environment.value,
                },
            )

    def finished(
        self,
        outcome: str,
        result: ToolResult | None,
        error: CodecoderError | None,
        duration: float,
        waited: float,
    ) -> None:
        span = self._span
        span.set_attributes(
            {
                "codecoder.outcome": outcome,
                "codecoder.duration_ms": round(duration * 1000, 3),
                "codecoder.waited_ms": round(waited * 1000, 3),
            }
        )
        exit_code = result.data.get("exit_code") if result is not None else None
        if isinstance(exit_code, int):
            span.set_attribute("codecoder.exit_code", exit_code)
        if error is not None or outcome == "interrupted":
            kind = type(error).__name__ if error is not None else "KeyboardInterrupt"
            span.set_attribute("error.type", kind)
            status = self._trace.Status(self._trace.StatusCode.ERROR, str(error or outcome))
            span.set_status(status)
