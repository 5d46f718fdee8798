"""Tool definitions exported for LLM tool-calling APIs, ready to paste into a request.

    openai      [{"type": "function", "function": {"name", "description", "parameters"}}]
    anthropic   [{"name", "description", "input_schema"}]
    mcp         [{"name", "description", "inputSchema"}]   (the MCP server lists exactly these)

Every format carries the same cleaned JSON Schema of the tool's parameter model
(`input_schema()`): pydantic's local `$ref`s into `$defs` are inlined, because some providers
reject references, and the model's class name (the top-level `title`) is dropped, because it
is noise to an LLM. Names are checked against what each API accepts, so an export never
produces a request the provider would refuse.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any, Final, Literal

from runtime.errors import UsageError
from runtime.tool import ToolDefinition

__all__ = [
    "FORMATS",
    "Format",
    "anthropic_tool",
    "export",
    "input_schema",
    "mcp_tool",
    "openai_tool",
]

Format = Literal["openai", "anthropic", "mcp"]
FORMATS: Final[tuple[Format, ...]] = ("openai", "anthropic", "mcp")

# OpenAI and Anthropic both document ^[a-zA-Z0-9_-]{1,64}$ for function/tool names;
# MCP (2025-11-25) allows dots and up to 128 characters.
_API_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_MCP_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
_LOCAL_REF = re.compile(r"#/(\$defs|definitions)/(.+)")


def input_schema(definition: ToolDefinition) -> dict[str, Any]:
    """The tool's parameter schema, self-contained and without pydantic's class-name title."""
    schema = _inline_refs(definition.input_schema)
    schema.pop("title", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def openai_tool(definition: ToolDefinition) -> dict[str, Any]:
    _check_name(definition.name, _API_NAME, "OpenAI")
    return {
        "type": "function",
        "function": {
            "name": definition.name,
            "description": definition.description,
            "parameters": input_schema(definition),
        },
    }


def anthropic_tool(definition: ToolDefinition) -> dict[str, Any]:
    _check_name(definition.name, _API_NAME, "Anthropic")
    return {
        "name": definition.name,
        "description": definition.description,
        "input_schema": input_schema(definition),
    }


def mcp_tool(definition: ToolDefinition) -> dict[str, Any]:
    _check_name(definition.name, _MCP_NAME, "MCP")
    return {
        "name": definition.name,
        "description": definition.description,
        "inputSchema": input_schema(definition),
    }


_EXPORTERS = {"openai": openai_tool, "anthropic": anthropic_tool, "mcp": mcp_tool}


def export(definitions: Iterable[ToolDefinition], format: Format) -> list[dict[str, Any]]:
    """Every definition in `format`, in the order given."""
    exporter = _EXPORTERS.get(format)
    if exporter is None:
        raise UsageError(f"unknown schema format {format!r}; choose one of {', '.join(FORMATS)}")
    return [exporter(definition) for definition in definitions]


def _check_name(name: str, pattern: re.Pattern[str], api: str) -> None:
    if not pattern.fullmatch(name):
        raise UsageError(
            f"tool name {name!r} is not accepted by the {api} API (allowed: {pattern.pattern})"
        )


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every local `$ref` replaced by the definition it points to.

    A recursive model cannot be inlined (it would never end): those references stay, and
    `$defs` keeps exactly the definitions they need, so the schema is still self-contained.
    """
    definitions: dict[str, Any] = {
        **schema.get("definitions", {}),
        **schema.get("$defs", {}),
    }
    kept: dict[str, Any] = {}

    def resolve(node: Any, active: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, active) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        match = _LOCAL_REF.fullmatch(ref) if isinstance(ref, str) else None
        if match is not None and match.group(2) in definitions:
            name = match.group(2)
            if name in active:
                kept[name] = None  # filled below, outside the cycle
                return {**node, "$ref": f"#/$defs/{name}"}
            target = resolve(definitions[name], (*active, name))
            siblings = {k: resolve(v, active) for k, v in node.items() if k != "$ref"}
            # Keywords next to a $ref (a field's description, default) refine the target.
            return {**target, **siblings}
        return {
            key: (
                {name: resolve(sub, active) for name, sub in value.items()}
                if key in ("properties", "patternProperties") and isinstance(value, dict)
                else resolve(value, active)
            )
            for key, value in node.items()
            if key not in ("$defs", "definitions")
        }

    result: dict[str, Any] = resolve(copy.deepcopy(schema), ())
    pending = list(kept)
    while pending:
        name = pending.pop()
        before = set(kept)
        kept[name] = resolve(definitions[name], (name,))
        pending.extend(set(kept) - before)
    if kept:
        result["$defs"] = kept
    return result
