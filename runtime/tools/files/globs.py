"""Glob patterns as regular expressions: the one dialect of the glob tool, grep's `glob`
filter and both read backends (`*`, `?` and `[...]` within a path segment, `**` across them)."""

from __future__ import annotations

import functools
import re


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("^", "\\^")
                out.append(f"[{'^/' if negate else ''}{body}]" if body else "(?!)")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a `/`-separated glob: `*`, `?` and `[...]` stay within one segment; a `**`
    segment spans any number of them (zero included). `*` matches names starting with `.`."""
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


@functools.lru_cache(maxsize=64)
def _listing_regex(prefix: str, pattern: str) -> re.Pattern[str]:
    """`glob_regex(pattern)` for `prefix` + paths in a NUL-separated listing, found in one pass."""
    body = glob_regex(pattern).pattern.removesuffix(r"\Z")
    body = body.replace("[^/", "[^/\\x00").replace(".*", "[^\\x00]*")
    regex = re.compile(r"(?:(?<=\x00)|^)" + re.escape(prefix) + f"(?:{body})(?=\\x00)")
    assert regex.groups == 0  # findall() gives whole matches (runtime.tools.files.landlock)
    return regex


def _literal_prefix(pattern: str) -> tuple[str, str]:
    """Split a glob into the directory its literal leading segments name, and the rest."""
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    literal: list[str] = []
    for segment in segments[:-1]:
        if any(ch in segment for ch in "*?["):
            break
        literal.append(segment)
    return "/".join(literal) or ".", "/".join(segments[len(literal) :])
