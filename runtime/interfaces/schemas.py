"""Tool definitions exported for LLM tool-calling APIs, ready to paste into a request.

    openai            [{"type": "function", "function": {"name", "description", "parameters"}}]
                      (Chat Completions)
    openai-responses  [{"type": "function", "name", "description", "parameters", "strict"}]
                      (the Responses API)
    anthropic         [{"name", "description", "input_schema"}]
    mcp               [{"name", "title", "description", "inputSchema", "annotations"}]
                      (the MCP server lists exactly these)

Every format carries the same cleaned JSON Schema of the tool's parameter model
(`input_schema()`): pydantic's local `$ref`s into `$defs` are inlined, because some providers
reject references, and the model's class name (the top-level `title`) is dropped, because it
is noise to an LLM. Names are checked against what each API accepts, so an export never
produces a request the provider would refuse.

`strict=True` (OpenAI formats and Anthropic) rewrites each schema for the providers' strict
mode (`strict_schema()`): every property is required, an optional one becomes a union with
`null`, every object closes with `additionalProperties: false`, and keywords outside the subset
strict mode documents are dropped (a kept list, so an unknown keyword is dropped, not passed).
A schema that must stay open (a free-form object, such as a capability's own parameter schema)
cannot be strict: that one tool is exported with `strict: false` and its schema as it is.

MCP annotations are derived from the tool model (`tool_annotations()`): a Permission.None tool is
read-only; a tool that asks is destructive; web tools, and commands on the unsandboxed host,
reach an open world.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any, Final, Literal

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import UsageError
from codecoder.tools.base import Category, ToolDefinition

__all__ = [
    "FORMATS",
    "Format",
    "anthropic_tool",
    "export",
    "input_schema",
    "mcp_tool",
    "openai_responses_tool",
    "openai_tool",
    "strict_schema",
    "title",
    "tool_annotations",
]

Format = Literal["openai", "openai-responses", "anthropic", "mcp"]
FORMATS: Final[tuple[Format, ...]] = ("openai", "openai-responses", "anthropic", "mcp")

# OpenAI and Anthropic both document ^[a-zA-Z0-9_-]{1,64}$ for function/tool names;
# MCP (2025-11-25) allows dots and up to 128 characters.
_API_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_MCP_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
_LOCAL_REF = re.compile(r"#/(\$defs|definitions)/(.+)")

# The keywords OpenAI's strict mode documents as supported ("Supported schemas" of Structured
# Outputs; Anthropic's strict tool use accepts the same subset). Anything else is dropped.
_STRICT_KEYWORDS: Final = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$defs",
        "$ref",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
_STRICT_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)


class _Open(Exception):
    """A schema that must stay open (free-form object): it cannot be made strict."""


def input_schema(definition: ToolDefinition) -> dict[str, Any]:
    """The tool's parameter schema, self-contained and without pydantic's class-name title."""
    schema = _inline_refs(definition.input_schema)
    schema.pop("title", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def openai_tool(definition: ToolDefinition, strict: bool = False) -> dict[str, Any]:
    """Chat Completions' `tools` entry."""
    _check_name(definition.name, _API_NAME, "OpenAI")
    function: dict[str, Any] = {
        "name": definition.name,
        "description": definition.description,
        "parameters": input_schema(definition),
    }
    if strict:
        function["parameters"], function["strict"] = _strict_or_open(function["parameters"])
    return {"type": "function", "function": function}


def openai_responses_tool(definition: ToolDefinition, strict: bool = False) -> dict[str, Any]:
    """The Responses API's function tool: flat, and `strict` is always stated (the API
    defaults it to true, which a schema that is not strict-ready would fail)."""
    _check_name(definition.name, _API_NAME, "OpenAI")
    parameters, is_strict = input_schema(definition), False
    if strict:
        parameters, is_strict = _strict_or_open(parameters)
    return {
        "type": "function",
        "name": definition.name,
        "description": definition.description,
        "parameters": parameters,
        "strict": is_strict,
    }


def anthropic_tool(definition: ToolDefinition, strict: bool = False) -> dict[str, Any]:
    _check_name(definition.name, _API_NAME, "Anthropic")
    tool: dict[str, Any] = {
        "name": definition.name,
        "description": definition.description,
        "input_schema": input_schema(definition),
    }
    if strict:
        tool["input_schema"], tool["strict"] = _strict_or_open(tool["input_schema"])
    return tool


def tool_annotations(definition: ToolDefinition) -> dict[str, Any]:
    """MCP tool annotations from the tool model: what a client may assume before calling."""
    asks = definition.needs_permission
    open_world = definition.category is Category.WEB or (
        definition.category is Category.EXECUTE and definition.environment is EnvironmentTag.SHELL
    )
    return {
        "title": title(definition),
        "readOnlyHint": not asks,
        "destructiveHint": asks,
        "idempotentHint": not asks,
        "openWorldHint": open_world,
    }


def title(definition: ToolDefinition) -> str:
    """`run_command` on @docker → "Run command (@docker)"."""
    words = definition.name.replace("_", " ").strip()
    return f"{words[:1].upper()}{words[1:]} ({definition.environment.value})"


def mcp_tool(definition: ToolDefinition, strict: bool = False) -> dict[str, Any]:
    """The MCP `tools/list` entry; `strict` does not apply (MCP has no strict mode).

    No `outputSchema`: a tool that declares one must send `structuredContent`, and clients
    (Codex 0.171) then show the model the `structuredContent` *instead of* the text, so a
    command's output would never reach it. What a result carries besides its text goes in
    `_meta` (`runtime.interfaces.mcp_server.tool_result`)."""
    _check_name(definition.name, _MCP_NAME, "MCP")
    tool: dict[str, Any] = {
        "name": definition.name,
        "title": title(definition),
        "description": definition.description,
        "inputSchema": input_schema(definition),
        "annotations": tool_annotations(definition),
    }
    return tool


_EXPORTERS = {
    "openai": openai_tool,
    "openai-responses": openai_responses_tool,
    "anthropic": anthropic_tool,
    "mcp": mcp_tool,
}


def export(
    definitions: Iterable[ToolDefinition], format: Format, *, strict: bool = False
) -> list[dict[str, Any]]:
    """Every definition in `format`, in the order given; `strict` for providers' strict mode."""
    exporter = _EXPORTERS.get(format)
    if exporter is None:
        raise UsageError(f"unknown schema format {format!r}; choose one of {', '.join(FORMATS)}")
    if strict and format == "mcp":
        raise UsageError("--strict applies to the openai, openai-responses and anthropic formats")
    return [exporter(definition, strict) for definition in definitions]


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` rewritten for strict mode; raises UsageError when it must stay open."""
    try:
        strict: dict[str, Any] = _strict(schema, root=True)
        return strict
    except _Open as exc:
        raise UsageError(f"the schema cannot be strict: {exc}") from None


def _strict_or_open(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    try:
        strict: dict[str, Any] = _strict(schema, root=True)
        return strict, True
    except _Open:
        return schema, False


def _strict(node: Any, *, root: bool = False) -> Any:
    if not isinstance(node, dict):
        return node
    node = dict(node)
    for merged in _single_all_of(node):
        node = {**merged, **node}
    if "oneOf" in node:  # strict mode knows anyOf only; the alternatives stay the same
        node["anyOf"] = node.pop("oneOf") + node.pop("anyOf", [])
    if node.get("format") not in _STRICT_FORMATS:
        node.pop("format", None)
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _STRICT_KEYWORDS}
    unknown = {"allOf", "not", "if", "then", "else", "patternProperties", "propertyNames"} & set(
        node
    )
    if unknown:
        raise _Open(f"it uses {', '.join(sorted(unknown))}")
    types = node.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    if root and not is_object:
        raise _Open("its root is not an object")
    if is_object:
        extra = node.get("additionalProperties", False)
        properties = node.get("properties")
        if extra not in (False, None) or (not properties and extra is None and not root):
            raise _Open("it has an object whose properties are free-form")
        if properties is None and "additionalProperties" not in node and not root:
            raise _Open("it has an object whose properties are free-form")
        required = set(node.get("required", []))
        strict_properties: dict[str, Any] = {}
        for name, sub in (properties or {}).items():
            converted = _strict(sub)
            if name not in required:
                converted = _nullable(converted)
            strict_properties[name] = converted
        out["properties"] = strict_properties
        out["required"] = list(strict_properties)
        out["additionalProperties"] = False
    if "items" in node:
        out["items"] = _strict(node["items"])
    if "anyOf" in out:
        out["anyOf"] = [_strict(option) for option in out["anyOf"]]
    if "$defs" in out:
        out["$defs"] = {name: _strict(sub) for name, sub in out["$defs"].items()}
    return out


def _single_all_of(node: dict[str, Any]) -> list[dict[str, Any]]:
    """pydantic wraps a described reference as `allOf: [target]`: unwrap that one form."""
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        del node["allOf"]
        return [all_of[0]]
    return []


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null: a property the model may leave out becomes one it sets to null."""
    types = schema.get("type")
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not any(option.get("type") == "null" for option in options):
            return {**schema, "anyOf": [*options, {"type": "null"}]}
        return schema
    if isinstance(types, str) and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [types, "null"]}
    if isinstance(types, list):
        return schema if "null" in types else {**schema, "type": [*types, "null"]}
    description = schema.get("description")
    rest = {k: v for k, v in schema.items() if k != "description"}
    wrapped: dict[str, Any] = {"anyOf": [rest, {"type": "null"}]}
    if description is not None:
        wrapped["description"] = description
    return wrapped


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
