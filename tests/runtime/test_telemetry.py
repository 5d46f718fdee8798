"""OpenTelemetry: every call is an `execute_tool` span (GenAI semantic conventions) with
codecoder's decision on it, questions and grants as events; nothing without a configured
provider, and no import of OpenTelemetry by codecoder itself."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from codecoder import Answer, Runtime
from codecoder.telemetry import tool_span
from tests.conftest import RecordingAsker, write_config


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A tracer provider configured as an application would, exporting to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The global provider can be set once per process: the test's stands in for it.
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(event.name, dict(event.attributes or {})) for event in span.events]


def test_every_call_is_an_execute_tool_span_with_its_decision(
    exported: InMemorySpanExporter, make_runtime: Callable[..., Runtime], project: Any
) -> None:
    write_config(project, {"deny": ["run_command:rm"]})
    asker = RecordingAsker(Answer.SESSION)
    with make_runtime(asker) as runtime, runtime.session() as session:
        session.call("run_command", {"command": "echo hi"}, call_id="call-echo")
        session.call("run_command", {"command": "rm -rf x"}, call_id="call-rm")
        session.call("run_command", {"command": "touch a"}, call_id="call-touch")
        session.call("run_command", {"command": "touch b"})
    echo, rm, touch, again = exported.get_finished_spans()

    assert echo.name == "execute_tool run_command"
    assert echo.kind is trace.SpanKind.INTERNAL
    shown = attributes(echo)
    assert shown.pop("codecoder.duration_ms") >= 0
    assert shown.pop("codecoder.session") == session.id
    assert shown == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "run_command",
        "gen_ai.tool.call.id": "call-echo",
        "gen_ai.tool.type": "function",
        "codecoder.decision": "allow",
        "codecoder.source": "read-only",
        "codecoder.key": "run_command:echo",
        "codecoder.environment": "@bwrap",
        "codecoder.outcome": "ok",
        "codecoder.exit_code": 0,
        "codecoder.waited_ms": 0.0,
    }
    assert events(echo) == []

    assert attributes(rm)["codecoder.decision"] == "deny"
    assert attributes(rm)["codecoder.source"] == "deny"
    assert attributes(rm)["codecoder.matched"] == "run_command:rm"
    assert attributes(rm)["error.type"] == "DeniedByRule"
    assert rm.status.status_code is StatusCode.ERROR
    assert events(rm) == []

    assert attributes(touch)["codecoder.answer"] == "session"
    assert attributes(touch)["codecoder.source"] == "session"
    assert events(touch) == [
        (
            "codecoder.question",
            {
                "codecoder.key": "run_command:touch",
                "codecoder.environment": "@bwrap",
                "codecoder.choices": (
                    "once",
                    "session",
                    "project",
                    "project-any",
                    "every-project",
                    "deny",
                ),
            },
        ),
        ("codecoder.answer", {"codecoder.answer": "session"}),
        (
            "codecoder.grant",
            {
                "codecoder.entry": "run_command:touch",
                "codecoder.scope": "AlwaysThisSession",
                "codecoder.environment": "@bwrap",
            },
        ),
    ]
    assert attributes(again)["gen_ai.tool.call.id"].startswith("codecoder-")
    assert attributes(again)["codecoder.source"] == "session"
    assert events(again) == []


def test_a_refusal_by_nobody_answering_keeps_its_non_interactive_reason(
    exported: InMemorySpanExporter, make_runtime: Callable[..., Runtime]
) -> None:
    from codecoder import non_interactive

    with make_runtime(non_interactive) as runtime, runtime.session() as session:
        outcome = session.call("run_command", {"command": "touch a"})
    assert outcome.decision is not None
    assert outcome.decision.reason == "non-interactive: nothing granted this key"
    (span,) = exported.get_finished_spans()
    assert events(span)[1] == ("codecoder.answer", {"codecoder.answer": "deny"})


def test_a_calls_span_is_a_child_of_the_applications_current_span(
    exported: InMemorySpanExporter, make_runtime: Callable[..., Runtime]
) -> None:
    tracer = trace.get_tracer_provider().get_tracer("app")
    with (
        make_runtime() as runtime,
        runtime.session() as session,
        tracer.start_as_current_span("agent run") as parent,
    ):
        session.call("run_command", {"command": "ls"})
    call, run = exported.get_finished_spans()
    assert run.name == "agent run"
    assert call.parent is not None
    assert call.parent.span_id == parent.get_span_context().span_id


def test_without_a_configured_provider_nothing_is_recorded() -> None:
    # The API's own default: no provider was set, so the span records nothing.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    assert tool_span("read_file", None, "s").live is False


def test_codecoder_imports_nothing_of_opentelemetry() -> None:
    code = (
        "import sys, codecoder.session, codecoder.dispatcher, codecoder.telemetry;"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
