"""The built-in tool catalogue: 26 tools in six categories (SPEC §3).

The project's capabilities are not in it: `Runtime` adds one tool per capability on top
(`runtime.tools.capability.capability_tools`) when the catalogue has `run_capability`.
"""

from __future__ import annotations

from typing import Any

from codecoder.tools.agent import AGENT_TOOLS, CHILD_TOOLSET
from codecoder.tools.base import Tool
from codecoder.tools.capability import CAPABILITY_TOOLS
from codecoder.tools.execute import Commit, RunCommand, RunContainer
from codecoder.tools.files import FILE_TOOLS
from codecoder.tools.git import GIT_TOOLS
from codecoder.tools.web import WEB_TOOLS

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
        *CAPABILITY_TOOLS,
    ]
    return {tool.name: tool for tool in tools}
