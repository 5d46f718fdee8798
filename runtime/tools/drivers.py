"""Model drivers: what decides a child agent's next turn.

A driver is given the conversation so far and the tools the agent may call, and returns the
model's next turn: text, tool calls, or both. It does not run tools; the `agent` tool does, through
the child's session, so every call goes through the dispatcher and the audit log.

* `OpenAIChatDriver` speaks the OpenAI chat-completions protocol with function calling
  (`POST {base_url}/chat/completions`), which OpenAI, vLLM, llama.cpp's server, Ollama and most
  gateways serve. HTTP failures, timeouts and malformed replies become `ExecutionFailed` /
  `ExecutionTimeout` naming the server; the key never appears in a message.
* `ScriptedDriver` plays back a list of turns and records what it was sent: the fake model of
  the tests (like pydantic-ai's `FunctionModel`), no network, no mocks.
"""

from __future__ import annotations

import abc
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from codecoder.foundation.errors import ExecutionFailed, ExecutionTimeout

__all__ = [
    "Message",
    "ModelDriver",
    "ModelTurn",
    "OpenAIChatDriver",
    "ScriptedDriver",
    "ScriptedRequest",
    "ToolCall",
    "ToolSpec",
]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for. `arguments` is the decoded JSON object; when the model sent
    something that is not JSON, it is the raw text and `problem` says what is wrong with it."""

    id: str
    name: str
    arguments: Any
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the conversation, in the shape every chat API shares."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    @classmethod
    def system(cls, content: str) -> Message:
        return cls("system", content)

    @classmethod
    def user(cls, content: str) -> Message:
        return cls("user", content)

    @classmethod
    def tool_result(cls, call_id: str, content: str) -> Message:
        return cls("tool", content, tool_call_id=call_id)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: its name, what it does, its JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """What the model answered: text, and the tools it wants called (none: it is done)."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def say(cls, content: str) -> ModelTurn:
        return cls(content)

    @classmethod
    def calling(cls, *calls: ToolCall, content: str = "") -> ModelTurn:
        return cls(content, tuple(calls))

    def as_message(self) -> Message:
        return Message("assistant", self.content, self.tool_calls)


class ModelDriver(abc.ABC):
    """Decides the next turn of a conversation: one method."""

    @abc.abstractmethod
    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelTurn:
        """The model's next turn after `messages`, offered `tools`."""


# --- the scripted driver ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    """What a `ScriptedDriver` was sent for one turn."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]


class ScriptedDriver(ModelDriver):
    """Plays back `turns` in order; a turn may be a function of the request, to answer from what
    the tools returned. Every request is kept in `requests`. Running out of turns is an error."""

    def __init__(self, turns: Iterable[ModelTurn | Callable[[ScriptedRequest], ModelTurn]]) -> None:
        self._turns = list(turns)
        self._given = len(self._turns)
        self.requests: list[ScriptedRequest] = []

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelTurn:
        request = ScriptedRequest(tuple(messages), tuple(tools))
        self.requests.append(request)
        if not self._turns:
            raise ExecutionFailed(
                f"the scripted model has no turn left (it was given {self._given})"
            )
        turn = self._turns.pop(0)
        return turn if isinstance(turn, ModelTurn) else turn(request)


# --- the OpenAI-compatible driver ------------------------------------------------------------


class _Reply(BaseModel):
    # Servers add fields of their own (usage, logprobs, system_fingerprint); only these matter.
    model_config = ConfigDict(extra="ignore")


class _Function(_Reply):
    name: str = Field(min_length=1)
    # The protocol says a JSON-encoded string; some servers send the object itself.
    arguments: str | dict[str, Any] = "{}"


class _ToolCallReply(_Reply):
    id: str | None = None
    type: str = "function"
    function: _Function


class _MessageReply(_Reply):
    content: str | None = None
    tool_calls: list[_ToolCallReply] | None = None


class _Choice(_Reply):
    message: _MessageReply


class _Completion(_Reply):
    choices: list[_Choice] = Field(min_length=1)


class OpenAIChatDriver(ModelDriver):
    """A client of an OpenAI-compatible `/chat/completions` endpoint with tool calling.

    `base_url` is the API root, as the OpenAI SDK takes it (`https://api.openai.com/v1`,
    `http://127.0.0.1:11434/v1`); `api_key` None sends no Authorization header (local servers).
    `timeout` bounds each network operation. Replies larger than `max_reply_bytes` are refused.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        *,
        max_reply_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self._api_key = api_key

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelTurn:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_encode_message(message) for message in messages],
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in tools
            ]
        return self._parse(self._post(json.dumps(body).encode("utf-8")))

    def _post(self, data: bytes) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.endpoint, data=data, headers=headers, method="POST")
        where = f"the model server at {self.endpoint}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply: bytes = response.read(self.max_reply_bytes + 1)
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            raise ExecutionFailed(
                f"{where} answered HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
            ) from None
        except TimeoutError as exc:
            raise ExecutionTimeout(f"{where} did not answer within {self.timeout:g}s") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ExecutionTimeout(f"{where} did not answer within {self.timeout:g}s") from exc
            raise ExecutionFailed(f"cannot reach {where}: {exc.reason}") from exc
        except (OSError, ValueError) as exc:  # a connection reset mid-reply, a malformed URL
            raise ExecutionFailed(f"cannot talk to {where}: {exc}") from exc
        if len(reply) > self.max_reply_bytes:
            raise ExecutionFailed(f"{where} sent a reply larger than {self.max_reply_bytes} bytes")
        return reply

    def _parse(self, reply: bytes) -> ModelTurn:
        where = f"the model server at {self.endpoint}"
        try:
            document = json.loads(reply)
        except (ValueError, RecursionError) as exc:
            raise ExecutionFailed(f"{where} sent a reply that is not JSON: {exc}") from None
        try:
            completion = _Completion.model_validate(document)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or '(reply)'}: {error['msg']}"
                for error in exc.errors()[:5]
            )
            raise ExecutionFailed(f"{where} sent a malformed reply: {problems}") from None
        message = completion.choices[0].message
        calls = tuple(_decode_call(call, i) for i, call in enumerate(message.tool_calls or ()))
        return ModelTurn(message.content or "", calls)


def _encode_message(message: Message) -> dict[str, Any]:
    encoded: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        # An assistant turn that only calls tools has null content in the protocol.
        encoded["content"] = message.content or None
        encoded["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    # The model's own text when it was not JSON, so it sees what it sent.
                    "arguments": call.arguments
                    if call.problem is not None and isinstance(call.arguments, str)
                    else json.dumps(call.arguments),
                },
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        encoded["tool_call_id"] = message.tool_call_id
    return encoded


def _decode_call(call: _ToolCallReply, position: int) -> ToolCall:
    call_id = call.id or f"call_{position}"
    arguments = call.function.arguments
    if isinstance(arguments, dict):
        return ToolCall(call_id, call.function.name, arguments)
    if not arguments.strip():
        return ToolCall(call_id, call.function.name, {})
    try:
        decoded = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        return ToolCall(
            call_id, call.function.name, arguments, f"the arguments are not JSON: {exc}"
        )
    return ToolCall(call_id, call.function.name, decoded)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The server's own explanation (`{"error": {"message": ...}}`), or the start of its body."""
    try:
        body = exc.read(64 * 1024)
    except OSError:
        return ""
    try:
        document = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500]
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:500]
    if isinstance(error, str):
        return error[:500]
    return json.dumps(document)[:500]
