"""Where each key and value of a JSON text is: its line and column, by JSON pointer.

`runtime.config.reading` indexes codecoder.json and the user's file with it, so that every
diagnostic, and every entry a later check reports on, carries the position of what it is about
(`ProjectFile.position_of`).

Positions come from one pass over the text after `json.loads` has accepted it (see
`SourceIndex`), not from `json_source_map`: that package builds its pointers from the raw
source text of each key, without JSON-pointer escaping and without decoding escapes, so a key
like `write_file:tests/**` or `run_command:"a b"` cannot be looked up reliably, and it keeps only
the last of duplicate keys; it is also about five times slower on a 10,000-entry file.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["Parts", "SourceIndex", "json_pointer", "value_after_key"]

# The keys and indices leading to a value, from the top of the document.
Parts = tuple[str | int, ...]


def json_pointer(parts: Parts) -> str:
    """The RFC 6901 JSON pointer of `parts`: `/` in a key is `~1`, `~` is `~0`."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NEWLINE = re.compile(r"\n")
_DECODER = json.JSONDecoder()
# The json module's string scanner (C when available); typeshed does not declare it.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def value_after_key(text: str, key_offset: int) -> tuple[Any, int]:
    """The value of the object member whose key starts at `key_offset`, and where it starts."""
    _, offset = _scanstring(text, key_offset + 1)
    offset = _skip_whitespace(text, _skip_whitespace(text, offset) + 1)
    return _DECODER.raw_decode(text, offset)[0], offset


def _skip_whitespace(text: str, offset: int) -> int:
    match = _WHITESPACE.match(text, offset)
    assert match is not None  # the pattern matches the empty string anywhere
    return match.end()


class SourceIndex:
    """Where each key and value of a JSON text is, down to the depth the schema has.

    Built by one pass over text that `json.loads` has already accepted, so it trusts the
    syntax; strings are read by the json module's scanner (which decodes escapes, so keys are
    the same strings `json.loads` produced) and values below `_DEPTH` are skipped by its C
    decoder. Duplicate keys in an object are collected as they are met.
    """

    # allowlist / pattern / scope: nothing in the schema is deeper.
    _DEPTH = 3

    __slots__ = ("_keys", "_newlines", "_values", "duplicates")

    def __init__(self, text: str) -> None:
        self._newlines = [match.start() for match in _NEWLINE.finditer(text)]
        self._keys: dict[str, int] = {}
        self._values: dict[str, int] = {}
        self.duplicates: list[tuple[Parts, int, int]] = []
        self._walk(text, 0, "", ())

    def line_column(self, offset: int) -> tuple[int, int]:
        """The 1-based line and column of a character offset, as json.JSONDecodeError counts."""
        lines_before = bisect.bisect_left(self._newlines, offset)
        line_start = self._newlines[lines_before - 1] + 1 if lines_before else 0
        return lines_before + 1, offset - line_start + 1

    def key_position(self, pointer: str) -> tuple[int | None, int | None]:
        offset = self._keys.get(pointer)
        return (None, None) if offset is None else self.line_column(offset)

    def value_position(self, pointer: str) -> tuple[int | None, int | None]:
        offset = self._values.get(pointer)
        return (None, None) if offset is None else self.line_column(offset)

    def nearest_value_position(self, parts: Parts) -> tuple[int | None, int | None]:
        """The value at `parts` or, if there is none (a missing field), its nearest ancestor."""
        for length in range(len(parts), -1, -1):
            line, column = self.value_position(json_pointer(parts[:length]))
            if line is not None:
                return line, column
        return None, None

    def _walk(self, text: str, offset: int, pointer: str, parts: Parts) -> int:
        """Index the value at `offset` and everything in it; return the offset after it."""
        offset = _skip_whitespace(text, offset)
        self._values[pointer] = offset
        opening = text[offset]
        if len(parts) >= self._DEPTH or opening not in "{[":
            return _DECODER.raw_decode(text, offset)[1]
        closing = "}" if opening == "{" else "]"
        seen: dict[str, int] = {}
        offset = _skip_whitespace(text, offset + 1)
        i = 0
        while text[offset] != closing:
            if opening == "{":
                key_offset = offset
                key, offset = _scanstring(text, offset + 1)
                child: str | int = key
                child_pointer = f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"
                if key in seen:
                    self.duplicates.append(((*parts, key), seen[key], key_offset))
                seen[key] = self._keys[child_pointer] = key_offset
                offset = _skip_whitespace(text, offset) + 1
            else:
                child, child_pointer = i, f"{pointer}/{i}"
                i += 1
            offset = self._walk(text, offset, child_pointer, (*parts, child))
            offset = _skip_whitespace(text, offset)
            if text[offset] == ",":
                offset = _skip_whitespace(text, offset + 1)
        return offset + 1
