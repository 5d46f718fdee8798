"""codecoder's calls as OpenTelemetry `execute_tool` spans, in an application that traces.

    python examples/opentelemetry_spans.py PROJECT

The application configures the tracer provider (here: the SDK's, printing each span as JSON on
stdout); codecoder only uses it. Without a configured provider nothing is recorded or exported.
"""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import codecoder
from codecoder import Answer

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(provider)

runtime = codecoder.Runtime(sys.argv[1], asker=codecoder.fixed(Answer.ONCE))
turn = trace.get_tracer("app").start_as_current_span("agent turn")
with runtime, runtime.session() as session, turn:
    session.call("run_command", {"command": "echo traced"}, call_id="call-1")
    session.call("run_command", {"command": "touch traced.txt"}, call_id="call-2")
provider.shutdown()
