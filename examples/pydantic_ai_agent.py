"""A pydantic-ai agent with codecoder's tools: what codecoder allows runs (contained), what a rule
refuses is told to the model, and what needs a person's answer ends the run as a deferred
approval, resumed with the answer at the scope the person chose.

    python examples/pydantic_ai_agent.py PROJECT

The model here is scripted (pydantic-ai's FunctionModel), so the example runs offline: it calls
`echo`, `rm keep.txt` (refused by the project's deny rule) and `touch made.txt` (asked).
Put a real model in its place (`Agent("openai:gpt-5", ...)`) and nothing else changes.
"""

from __future__ import annotations

import asyncio
import json
import sys

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import codecoder
from codecoder import Answer
from codecoder.integrations.pydantic_ai import results, toolset


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returned:
        commands = ["echo hello", "rm keep.txt", "touch made.txt"]
        return ModelResponse(
            parts=[
                ToolCallPart("run_command", {"command": c}, f"call-{i}")
                for i, c in enumerate(commands)
            ]
        )
    told = {part.tool_call_id: part.model_response_str() for part in returned}
    return ModelResponse(parts=[TextPart(json.dumps(told, sort_keys=True))])


async def main(project: str) -> None:
    async with codecoder.Runtime(project) as runtime, runtime.session() as session:
        agent = Agent(
            FunctionModel(model),
            toolsets=[toolset(session, tools=["run_command", "read_file"])],
            output_type=[str, DeferredToolRequests],
        )
        run = await agent.run("Tidy up the project.")
        while isinstance(run.output, DeferredToolRequests):
            answers = {}
            for call in run.output.approvals:
                asked = run.output.metadata[call.tool_call_id]["codecoder"]
                print(f"asked: {asked['key']} in {asked['environment']}: {asked['choices']}")
                answers[call.tool_call_id] = Answer.SESSION  # the person's choice
            run = await agent.run(
                message_history=run.all_messages(),
                deferred_tool_results=results(run.output, answers),
            )
        print(run.output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
