"""The built-in tool catalogue: 23 tools in six categories (SPEC §3); the capability tools of
issue 6 complete it to 26."""

from __future__ import annotations

from typing import Any

from runtime.tool import Tool
from runtime.tools.agent import AGENT_TOOLS, CHILD_TOOLSET
from runtime.tools.execute import Commit, RunCommand, RunContainer
from runtime.tools.files import FILE_TOOLS
from runtime.tools.git import GIT_TOOLS
from runtime.tools.web import WEB_TOOLS

__all__ = ["CHILD_TOOLSET", "builtin_tools"]


def builtin_tools() -> dict[str, Tool[Any]]:
    tools: list[Tool[Any]] = [
        *FILE_TOOLS,
        RunCommand(),
        RunContainer(),
        Commit(),
        *GIT_TOOLS,
        *WEB_TOOLS,
        *AGENT_TOOLS,
    ]
    return {tool.name: tool for tool in tools}
