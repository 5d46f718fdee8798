"""A call's arguments as a person types them, the same in `codecoder call`, `decide` and
`codecoder session`:

    read_file {"path": "README.md"}     a JSON object
    read_file README.md                 the text of the tool's one required text argument
    run_command git status              (several words are joined as a shell would quote them)

Text that starts like a JSON object (`{"…` or `{}`) is JSON, and broken JSON is refused with
where it broke, never taken for a file name or a command; text that only starts with `{`
(`{ echo hi; }`, a command group) is text.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from codecoder.foundation.errors import UsageError

if TYPE_CHECKING:
    from codecoder.tools.base import Tool

__all__ = ["arguments_of", "looks_like_json", "parse_json", "text_field"]

_JSON_OBJECT = re.compile(r'^\s*\{\s*(["}]|$)')


def looks_like_json(text: str) -> bool:
    """Whether `text` starts as a JSON object does: `{` then a quote or `}`."""
    return _JSON_OBJECT.match(text) is not None


def parse_json(text: str, what: str = "the arguments") -> Any:
    """`text` as JSON, or a UsageError that says where it broke."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{what} are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def text_field(tool: Tool[Any]) -> str | None:
    """The tool's one required text argument, which `TOOL TEXT` fills; None if it has none."""
    schema = tool.parameters.model_json_schema()
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    if not required and properties.get("path", {}).get("type") == "string":
        return "path"  # list_dir: its path is optional, and still what one would type
    if len(required) != 1:
        return None
    field: str = required[0]
    return field if properties[field].get("type") == "string" else None


def arguments_of(name: str, tool: Tool[Any] | None, words: Sequence[str]) -> Any:
    """The arguments `words` give `tool` (None: no such tool, which the call then reports):
    nothing (`{}`), one JSON object, or the text of its one required text argument."""
    if not words or (len(words) == 1 and not words[0].strip()):
        return {}
    if len(words) == 1 and looks_like_json(words[0]):
        return parse_json(words[0])
    if tool is None:
        return {}  # the call says there is no such tool, with the names it knows
    field = text_field(tool)
    if field is None:
        raise UsageError(
            f"{name} takes its arguments as a JSON object, e.g. {name} "
            f"'{{\"{_first_field(tool)}\": …}}'"
        )
    text = words[0] if len(words) == 1 else shlex.join(words)
    return {field: text}


def _first_field(tool: Tool[Any]) -> str:
    schema = tool.parameters.model_json_schema()
    required = schema.get("required") or list(schema.get("properties", {})) or ["…"]
    return str(required[0])
