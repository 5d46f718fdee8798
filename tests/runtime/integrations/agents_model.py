"""A scripted model for the OpenAI Agents SDK, through its own `Model` interface: each turn makes
the next of the script's rounds of tool calls, and once every call has returned it says what
each returned (as JSON), so a test reads what the model was shown. Offline: nothing leaves the
process."""

from __future__ import annotations

import json
from typing import Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


class ScriptedModel(Model):
    def __init__(self, *rounds: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.rounds = rounds  # each: the calls of one turn, (call id, tool, arguments)

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **rest: Any,
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        returned = {
            _field(item, "call_id"): _field(item, "output")
            for item in items
            if _field(item, "type") == "function_call_output"
        }
        output: list[Any]
        waiting = [r for r in self.rounds if not all(c[0] in returned for c in r)]
        if waiting:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{call_id}",
                    call_id=call_id,
                    name=tool,
                    arguments=json.dumps(args),
                    status="completed",
                )
                for call_id, tool, args in waiting[0]
            ]
        else:
            text = ResponseOutputText(type="output_text", text=json.dumps(returned), annotations=[])
            output = [
                ResponseOutputMessage(
                    type="message",
                    id="msg_done",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)
