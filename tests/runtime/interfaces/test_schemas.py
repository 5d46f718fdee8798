"""Tool schemas for the OpenAI, Anthropic and MCP tool-calling formats, for every tool."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import UsageError
from codecoder.interfaces.schemas import (
    anthropic_tool,
    export,
    input_schema,
    mcp_tool,
    openai_tool,
)
from codecoder.session import Runtime
from codecoder.tools.base import Category, Parameters, ToolDefinition

API_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def definitions(project: Path) -> list[ToolDefinition]:
    return Runtime(project, audit_log=None).definitions()


def refs_in(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in refs_in(value)]
    if isinstance(node, list):
        return [ref for item in node for ref in refs_in(item)]
    return []


def test_every_tool_exports_as_an_openai_function(project: Path) -> None:
    defs = definitions(project)
    exported = export(defs, "openai")
    assert [e["function"]["name"] for e in exported] == [d.name for d in defs]
    for d, entry in zip(defs, exported, strict=True):
        assert entry == {
            "type": "function",
            "function": {
                "name": d.name,
                "description": d.description,
                "parameters": input_schema(d),
            },
        }
        assert API_NAME.fullmatch(d.name)
        assert entry["function"]["parameters"]["type"] == "object"
        assert refs_in(entry) == []


def test_every_tool_exports_as_an_anthropic_tool(project: Path) -> None:
    defs = definitions(project)
    exported = export(defs, "anthropic")
    assert exported == [
        {"name": d.name, "description": d.description, "input_schema": input_schema(d)}
        for d in defs
    ]
    for entry in exported:
        assert API_NAME.fullmatch(entry["name"])
        assert entry["input_schema"]["type"] == "object"
        assert refs_in(entry) == []


def test_every_tool_exports_as_an_mcp_tool(project: Path) -> None:
    defs = definitions(project)
    exported = export(defs, "mcp")
    assert [
        {k: e[k] for k in ("name", "description", "inputSchema", "title")} for e in exported
    ] == [
        {
            "name": d.name,
            "description": d.description,
            "inputSchema": input_schema(d),
            "title": f"{d.name.replace('_', ' ').capitalize()} ({d.environment.value})",
        }
        for d in defs
    ]
    for entry in exported:
        assert entry["inputSchema"]["type"] == "object"
        assert refs_in(entry) == []


def test_the_run_command_schema_is_its_parameter_model_without_the_class_name(
    project: Path,
) -> None:
    run_command = next(d for d in definitions(project) if d.name == "run_command")
    schema = input_schema(run_command)
    assert "title" not in schema
    assert schema == {k: v for k, v in run_command.input_schema.items() if k != "title"}
    assert schema["required"] == ["command"]
    assert schema["additionalProperties"] is False


class Limits(BaseModel):
    seconds: float = Field(description="How long.")


class Node(BaseModel):
    name: str
    children: list[Node] = []


class NestedParameters(Parameters):
    limits: Limits = Field(description="The limits of this call.")
    also: Limits | None = None
    tree: Node | None = None


def nested_definition(name: str = "nested_tool") -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="A tool with nested and recursive parameters.",
        category=Category.AGENT,
        environment=EnvironmentTag.RUNTIME,
        needs_permission=False,
        input_schema=NestedParameters.model_json_schema(),
    )


def test_nested_models_are_inlined_and_their_field_descriptions_kept() -> None:
    schema = input_schema(nested_definition())
    assert schema["properties"]["limits"] == {
        "description": "The limits of this call.",
        "properties": {
            "seconds": {"description": "How long.", "title": "Seconds", "type": "number"}
        },
        "required": ["seconds"],
        "title": "Limits",
        "type": "object",
    }
    limits = {k: v for k, v in schema["properties"]["limits"].items() if k != "description"}
    assert schema["properties"]["also"] == {
        "anyOf": [limits, {"type": "null"}],
        "default": None,
    }


def test_a_recursive_model_keeps_only_the_definitions_it_needs() -> None:
    schema = input_schema(nested_definition())
    assert set(schema["$defs"]) == {"Node"}
    assert {ref for ref in refs_in(schema)} == {"#/$defs/Node"}
    node = schema["$defs"]["Node"]
    assert node["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert "Limits" not in json.dumps(schema["$defs"])


def test_a_name_an_api_rejects_is_refused_with_the_rule() -> None:
    bad = nested_definition("read file")
    with pytest.raises(UsageError) as caught:
        openai_tool(bad)
    assert str(caught.value) == (
        "tool name 'read file' is not accepted by the OpenAI API (allowed: [a-zA-Z0-9_-]{1,64})"
    )
    with pytest.raises(UsageError):
        anthropic_tool(bad)
    assert mcp_tool(nested_definition("files.read"))["name"] == "files.read"


def codecoder(*args: str, project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args, "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.mark.parametrize("format", ["openai", "anthropic", "mcp"])
def test_the_schema_command_prints_the_export_as_json(project: Path, format: str) -> None:
    proc = codecoder("schema", "--format", format, project=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == export(definitions(project), format)  # type: ignore[arg-type]


def test_an_unknown_format_is_a_usage_error(project: Path) -> None:
    proc = codecoder("schema", "--format", "gemini", project=project)
    assert proc.returncode == 2
    assert "'gemini' is not a choice; the choices are openai" in proc.stderr


# --- strict mode and the Responses API, checked with the providers' own SDK types ------------


def strict_ready(schema: Any) -> list[str]:
    """Where a schema breaks strict mode's rules: every object closed, every property required."""
    problems: list[str] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict) and where.endswith("/properties"):
            for name, value in node.items():  # property names, not keywords
                walk(value, f"{where}/{name}")
        elif isinstance(node, dict):
            if node.get("type") == "object" or "properties" in node:
                if node.get("additionalProperties") is not False:
                    problems.append(f"{where}: additionalProperties is not false")
                if sorted(node.get("required", [])) != sorted(node.get("properties", {})):
                    problems.append(f"{where}: not every property is required")
            for bad in ("default", "title", "minLength", "maxLength", "oneOf", "allOf"):
                if bad in node:
                    problems.append(f"{where}: keeps {bad}")
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}/{i}")

    walk(schema, "")
    return problems


def test_strict_exports_are_valid_sdk_types_and_strict_where_they_can_be(project: Path) -> None:
    from anthropic.types import ToolParam
    from openai.types.chat import ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam
    from pydantic import TypeAdapter

    defs = definitions(project)
    responses = export(defs, "openai-responses", strict=True)
    chat = export(defs, "openai", strict=True)
    claude = export(defs, "anthropic", strict=True)
    for entry in responses:
        TypeAdapter(FunctionToolParam).validate_python(entry)
    for entry in chat:
        TypeAdapter(ChatCompletionToolParam).validate_python(entry)
    for entry in claude:
        TypeAdapter(ToolParam).validate_python(entry)
    not_strict = sorted(e["name"] for e in responses if not e["strict"])
    # Only tools whose parameters hold a free-form JSON object (a capability's own schema and
    # arguments) stay open; every other tool is strict, in all three formats.
    assert not_strict == ["create_capability", "run_capability"]
    assert sorted(e["function"]["name"] for e in chat if not e["function"]["strict"]) == not_strict
    assert sorted(e["name"] for e in claude if not e["strict"]) == not_strict
    for entry in responses:
        if entry["strict"]:
            assert strict_ready(entry["parameters"]) == [], entry["name"]


def test_an_optional_field_becomes_required_and_nullable_and_null_means_the_default(
    project: Path,
) -> None:
    from codecoder.dispatcher import validate_arguments
    from codecoder.interfaces.schemas import openai_responses_tool
    from codecoder.tools.catalogue import builtin_tools

    grep = builtin_tools()["grep"]
    tool = openai_responses_tool(grep.definition(), strict=True)
    properties = tool["parameters"]["properties"]
    assert properties["path"]["type"] == ["string", "null"]
    assert properties["glob"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert "pattern" in tool["parameters"]["required"] and "path" in tool["parameters"]["required"]
    # What a model in strict mode sends for what it leaves out is the default.
    nulls = {name: None for name in properties if name != "pattern"}
    params = validate_arguments(grep, {"pattern": "x", **nulls})
    assert params == validate_arguments(grep, {"pattern": "x"})


def test_a_schema_that_must_stay_open_is_refused_by_strict_schema() -> None:
    from codecoder.interfaces.schemas import strict_schema

    with pytest.raises(UsageError, match="free-form"):
        strict_schema(
            {"type": "object", "properties": {"anything": {"type": "object"}}, "required": []}
        )
    with pytest.raises(UsageError, match="not an object"):
        strict_schema({"type": "string"})


def test_the_responses_format_is_flat_and_states_strict(project: Path) -> None:
    (entry, *_) = export(definitions(project), "openai-responses")
    assert set(entry) == {"type", "name", "description", "parameters", "strict"}
    assert entry["strict"] is False  # not asked for: the schema is not rewritten


def test_strict_does_not_apply_to_mcp(project: Path) -> None:
    with pytest.raises(UsageError, match="--strict applies to"):
        export(definitions(project), "mcp", strict=True)
