"""What a command reads besides its options: a call's JSON arguments (inline, `-` for stdin,
`@FILE` for a file) and files; input it cannot use is a usage error (or invalid arguments)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from codecoder.runtime.kernel.errors import InvalidArguments, UsageError


def usage(message: str) -> NoReturn:
    raise UsageError(message)


def call_arguments(text: str) -> Any:
    """A call's JSON arguments: given inline, `-` for stdin, `@FILE` for a file (no limit of
    the command line's length either way)."""
    if text == "-":
        return json_arg(sys.stdin.read(), "arguments (stdin)")
    if text.startswith("@"):
        return json_arg(read_text(Path(text[1:])), f"arguments ({text[1:]})")
    return json_arg(text, "arguments")


def json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArguments(
            "(cli)", [(what, f"not valid JSON: {exc.msg} at column {exc.colno}")]
        ) from None


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
