"""An OpenAI Agents SDK agent with codecoder's tools: `needs_approval` is codecoder's decision, an
interruption is answered with codecoder's answer, a denied call is refused, not asked.

    python examples/openai_agents_agent.py PROJECT

The model here is scripted through the SDK's Model interface, so the example runs offline: it
calls `echo`, `rm keep.txt` (refused by the project's deny rule) and `touch made.txt` (asked).
Drop `model=` to use OpenAI's (with OPENAI_API_KEY) and nothing else changes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import codecoder
from codecoder import Answer
from codecoder.integrations.openai_agents import approve, question, tools

COMMANDS = {"call-0": "echo hello", "call-1": "rm keep.txt", "call-2": "touch made.txt"}


class Scripted(Model):
    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        outputs = {
            i["call_id"]: i["output"]
            for i in input
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }
        if not outputs:
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=call_id,
                    name="run_command",
                    arguments=json.dumps({"command": command}),
                    id=f"fc-{call_id}",
                )
                for call_id, command in COMMANDS.items()
            ]
        else:
            text = ResponseOutputText(
                type="output_text", text=json.dumps(outputs, sort_keys=True), annotations=[]
            )
            output = [
                ResponseOutputMessage(
                    type="message", id="m", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


async def main(project: str) -> None:
    async with codecoder.Runtime(project) as runtime, runtime.session() as session:
        agent = Agent(name="coder", model=Scripted(), tools=tools(session, ["run_command"]))
        quiet = RunConfig(tracing_disabled=True)
        result = await Runner.run(agent, "Tidy up the project.", run_config=quiet)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                asked = question(item)
                print(f"asked: {asked.key if asked else item.tool_name}")
                approve(state, item, Answer.ONCE)  # the person's choice
            result = await Runner.run(agent, state, run_config=quiet)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
