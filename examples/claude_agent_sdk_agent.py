"""The Claude Agent SDK with codecoder deciding its built-in tools and containing its shell.

    python examples/claude_agent_sdk_agent.py PROJECT [CLAUDE_CLI]

Claude Code runs in PROJECT; every tool call it makes is judged by codecoder's rules (the
project's codecoder.json), Bash commands run in bubblewrap through `codecoder exec`, and the
questions codecoder asks are answered by `ask` below (here: allow each once, printing what was
asked). It needs a model: ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for another endpoint; the
tests point it at a stand-in server on 127.0.0.1). CLAUDE_CLI is the `claude` command to run
(by default the one the SDK bundles).
"""

from __future__ import annotations

import asyncio
import json
import sys

from claude_agent_sdk import AssistantMessage, ClaudeSDKClient, ResultMessage, TextBlock

from codecoder import Answer, AskRequest
from codecoder.integrations.claude_agent_sdk import ClaudeCodePermissions


async def ask(question: AskRequest) -> Answer:
    """The application's question to its person; this one allows each call once."""
    print(json.dumps({"asked": question.key, "choices": [c.value for c in question.choices]}))
    return Answer.ONCE


async def main(project: str, cli: str | None) -> None:
    permissions = ClaudeCodePermissions(project, asker=ask)
    options = permissions.options(cli_path=cli, max_turns=10, setting_sources=[])
    async with ClaudeSDKClient(options) as claude:
        await claude.query("Say hello, tidy up, and mark the work as done.")
        async for message in claude.receive_response():
            if isinstance(message, AssistantMessage):
                for block in message.content:
                    if isinstance(block, TextBlock):
                        print(json.dumps({"said": block.text}))
            elif isinstance(message, ResultMessage):
                print(json.dumps({"result": message.result, "error": message.is_error}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
