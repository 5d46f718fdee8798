"""What a command reads besides its options: a call's arguments (JSON inline, `-` for stdin,
`@FILE` for a file, or the shorthand `read_file README.md`) and files; input it cannot use is a
usage error that says what was wrong."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from codecoder.foundation.errors import UsageError
from codecoder.interfaces.shorthand import arguments_of, parse_json

if TYPE_CHECKING:
    from codecoder.tools.base import Tool


def usage(message: str) -> NoReturn:
    raise UsageError(message)


def call_arguments(words: Sequence[str], name: str, tool: Tool[Any] | None) -> Any:
    """A call's arguments: a JSON object inline, `-` for stdin, `@FILE` for a file (no limit of
    the command line's length either way), or the shorthand of `codecoder session`
    (`read_file README.md`, `run_command git status`: runtime.interfaces.shorthand)."""
    if len(words) == 1 and words[0] == "-":
        return parse_json(sys.stdin.read(), "the arguments on stdin")
    if len(words) == 1 and words[0].startswith("@"):
        return parse_json(read_text(Path(words[0][1:])), f"the arguments in {words[0][1:]}")
    return arguments_of(name, tool, words)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
