"""A stand-in model server on 127.0.0.1 for the real agent CLIs, playing a script of tool calls.

It speaks just enough of two APIs for a CLI to run its agent loop against it:

* the Anthropic Messages API (`POST /v1/messages`, streamed as server-sent events or not), for
  Claude Code with `ANTHROPIC_BASE_URL`;
* the Gemini API (`POST /v1beta/models/M:streamGenerateContent?alt=sse`, `:generateContent`,
  `:countTokens`), for Gemini CLI with `GOOGLE_GEMINI_BASE_URL`;
* the OpenAI Responses API (`POST /v1/responses`, streamed as server-sent events), for Codex
  with a `model_providers` entry whose `base_url` is the stand-in's.

A `Script` is the list of tool calls the "model" makes, one per turn, then a final text. Which
turn a request is at is read from the conversation it carries (how many tool results it holds),
so the CLI may retry or interleave side requests (titles, checks) freely: a request that does
not offer the script's next tool gets a short text answer. Every request is kept (`requests`),
so a test can read what the model was shown: the tool results, the hook's reasons.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Call", "Script", "StandIn"]


@dataclass(frozen=True)
class Call:
    """One tool call of the script: the tool's name as the CLI offers it, and its input."""

    tool: str
    input: dict[str, Any]


@dataclass
class Script:
    calls: list[Call]
    final: str = "All done."


@dataclass
class Seen:
    """One request the server received."""

    method: str
    path: str
    body: Any
    turn: int | None = None  # the script's turn it answered, None for a side request


@dataclass
class StandIn:
    """The server, listening on 127.0.0.1 (a free port) until `close()`."""

    script: Script
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class Handler(_Handler):
            standin = owner

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def tool_results(self) -> list[Any]:
        """The tool results of the last request that carried the whole conversation."""
        main = [r for r in self.requests if r.turn is not None]
        if not main:
            return []
        return _results(main[-1].body)


def _results(body: Any) -> list[Any]:
    found: list[Any] = []
    if not isinstance(body, dict):
        return found
    for message in body.get("messages", []) or []:  # Anthropic
        content = message.get("content")
        if isinstance(content, list):
            found += [block for block in content if block.get("type") == "tool_result"]
    for content in body.get("contents", []) or []:  # Gemini
        for part in content.get("parts", []) or []:
            if "functionResponse" in part:
                found.append(part["functionResponse"])
    for item in body.get("input", []) if isinstance(body.get("input"), list) else []:  # OpenAI
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            found.append(item)
    return found


def _offered(body: Any) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools", []) or []:
        if "name" in tool:  # Anthropic
            names.add(tool["name"])
        for declaration in tool.get("functionDeclarations", []) or []:  # Gemini
            names.add(declaration.get("name", ""))
        names.update(_namespaced(tool))  # OpenAI: a namespace of functions
    return names


def _namespaced(tool: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """An OpenAI `namespace` tool's functions, by the name a script calls them
    (`NAMESPACE__FUNCTION`, as Codex names MCP tools), with the namespace and the function."""
    if tool.get("type") != "namespace":
        return {}
    space = tool.get("name", "")
    return {f"{space}__{f.get('name', '')}": (space, f.get("name", "")) for f in tool["tools"]}


def _instance(schema: dict[str, Any]) -> Any:
    """The plainest value of a JSON schema (Gemini's upper-case types too), for a side request
    that asks for JSON (Gemini CLI's routing and next-speaker checks)."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: _instance(sub) for name, sub in properties.items()}
    return {"string": "ok", "integer": 1, "number": 1, "boolean": False, "array": []}.get(kind)


class _Handler(BaseHTTPRequestHandler):
    standin: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.standin.record(Seen("GET", self.path, None))
        self._json(404, {"error": {"message": f"the stand-in has no {self.path}"}})

    def do_HEAD(self) -> None:
        self.standin.record(Seen("HEAD", self.path, None))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = self.path
        script = self.standin.script
        turn: int | None = None
        call: Call | None = None
        if isinstance(body, dict):
            done = len(_results(body))
            if done < len(script.calls) and script.calls[done].tool in _offered(body):
                turn, call = done, script.calls[done]
            elif done >= len(script.calls) and _offered(body):
                turn = done
        self.standin.record(Seen("POST", path, body, turn))
        text = script.final if turn is not None else "ok"
        if path.startswith("/v1/messages/count_tokens"):
            self._json(200, {"input_tokens": 10})
        elif path.startswith("/v1/messages"):
            self._anthropic(body, call, text, turn)
        elif path.startswith("/v1/responses"):
            self._responses(body, call, text, turn)
        elif ":countTokens" in path:
            self._json(200, {"totalTokens": 10})
        elif ":streamGenerateContent" in path or ":generateContent" in path:
            config = body.get("generationConfig", {}) if isinstance(body, dict) else {}
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            if call is None and isinstance(schema, dict):
                text = json.dumps(_instance(schema))  # a side request asking for JSON
            self._gemini(call, text, stream=":streamGenerateContent" in path)
        else:
            self._json(404, {"error": {"message": f"the stand-in has no {path}"}})

    # -- Anthropic ------------------------------------------------------------------------------

    def _anthropic(self, body: Any, call: Call | None, text: str, turn: int | None) -> None:
        model = body.get("model", "claude") if isinstance(body, dict) else "claude"
        ident = f"{turn if turn is not None else 's'}-{len(self.standin.requests)}"
        if call is not None:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": f"toolu_{ident}",
                "name": call.tool,
                "input": call.input,
            }
            stop = "tool_use"
        else:
            block = {"type": "text", "text": text}
            stop = "end_turn"
        message = {
            "id": f"msg_{ident}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not (isinstance(body, dict) and body.get("stream")):
            self._json(200, message)
            return
        start = {**message, "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": 10, "output_tokens": 1}
        if call is not None:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call.input)}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": text}
        events = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": opening},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        self._sse([f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events])

    # -- Gemini ---------------------------------------------------------------------------------

    def _gemini(self, call: Call | None, text: str, *, stream: bool) -> None:
        part: dict[str, Any]
        if call is not None:
            part = {"functionCall": {"name": call.tool, "args": call.input}}
        else:
            part = {"text": text}
        response = {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 10,
                "candidatesTokenCount": 5,
                "totalTokenCount": 15,
            },
            "modelVersion": "gemini-2.5-pro",
        }
        if stream:
            self._sse([f"data: {json.dumps(response)}\r\n\r\n"])
        else:
            self._json(200, response)

    # -- OpenAI Responses -----------------------------------------------------------------------

    def _responses(self, body: Any, call: Call | None, text: str, turn: int | None) -> None:
        model = body.get("model", "gpt") if isinstance(body, dict) else "gpt"
        ident = f"{turn if turn is not None else 's'}_{len(self.standin.requests)}"
        item: dict[str, Any]
        if call is not None:
            item = {
                "type": "function_call",
                "id": f"fc_{ident}",
                "call_id": f"call_{ident}",
                "name": call.tool,
                "arguments": json.dumps(call.input),
                "status": "completed",
            }
            for tool in body.get("tools", []):
                if call.tool in (found := _namespaced(tool)):
                    item["namespace"], item["name"] = found[call.tool]
        else:
            item = {
                "type": "message",
                "id": f"msg_{ident}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        response: dict[str, Any] = {
            "id": f"resp_{ident}",
            "object": "response",
            "model": model,
            "status": "in_progress",
            "output": [],
        }
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        events = [
            {"type": "response.created", "response": response},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [item], "usage": usage},
            },
        ]
        self._sse([f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events])

    # -- the wire -------------------------------------------------------------------------------

    def _json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _sse(self, chunks: list[str]) -> None:
        payload = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
