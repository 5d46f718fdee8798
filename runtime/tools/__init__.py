"""The built-in tool catalogue, by category (SPEC §3)."""

from __future__ import annotations

from typing import Any

from runtime.tool import Tool
from runtime.tools.execute import Commit, RunCommand


def builtin_tools() -> dict[str, Tool[Any]]:
    tools: list[Tool[Any]] = [RunCommand(), Commit()]
    return {tool.name: tool for tool in tools}
