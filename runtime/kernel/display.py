"""What a person is shown: text that cannot hide part of itself.

Everything shown to a human (a question, a key, an error, a log line) goes through `visible()`,
so a command cannot hide part of itself with control characters, ANSI escapes, bidirectional
overrides or zero-width characters, nor push its payload out of view with a long run of spaces
(shown as `[4000 spaces]`). Tool output written to a terminal goes through `for_terminal()`,
which keeps lines and tabs but neutralises escapes the same way, so output cannot restyle, hide
or overwrite what follows it. `lookalikes()` names non-ASCII characters of a program name.
"""

from __future__ import annotations

import json
import re
import unicodedata

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e", "\\": "\\\\"}
_HIDING = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
# A run of spaces this long is shown as a marker with its length: enough to push the rest of a
# line out of view, or off to the right of a prompt.
SPACE_RUN = 8
_SPACES = re.compile(f" {{{SPACE_RUN},}}")
# In output, lines and indentation are content: only runs longer than any indentation, and
# more blank lines than any layout needs, are marked.
OUTPUT_SPACE_RUN = 80
OUTPUT_BLANK_LINES = 8
_OUTPUT_BLANKS = re.compile(f"[ \t]{{{OUTPUT_SPACE_RUN},}}")
_BLANK_LINES = re.compile(f"(?:[ \t]*\n){{{OUTPUT_BLANK_LINES + 1},}}")


def visible(text: str) -> str:
    """The text with every character that could hide or rewrite what is shown made visible,
    and every run of `SPACE_RUN` or more spaces shown as `[N spaces]`."""
    out: list[str] = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            out.append(_neutral(ch))
    return _SPACES.sub(_space_marker, "".join(out))


def visible_lines(text: str) -> list[str]:
    """`visible()` line by line: a text of several lines (a multi-line command, a diff) as
    that many lines, each made visible; only `\n` breaks a line (`\r` stays visible)."""
    return [visible(line) for line in text.split("\n")]


def visible_message(text: str, indent: str = "  ") -> str:
    """A message for a person that may hold lines of output (a timeout's last output): its
    lines kept as lines, neutralised as tool output is (`for_terminal`), and every line after
    the first indented, so none of them can pass for a line of its own."""
    first, *rest = for_terminal(text.rstrip("\n")).split("\n")
    return "\n".join([first, *(indent + line if line else line for line in rest)])


def for_terminal(text: str) -> str:
    """Tool output made safe to write to a terminal: lines and tabs kept, every other control
    character, escape, bidi override and invisible character shown as in `visible()`, runs of
    `OUTPUT_SPACE_RUN` blanks and of more than `OUTPUT_BLANK_LINES` blank lines as markers."""
    text = text.replace("\r\n", "\n")
    out: list[str] = []
    for ch in text:
        if ch in "\n\t":
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            out.append(_neutral(ch))
    marked = _OUTPUT_BLANKS.sub(_blank_marker, "".join(out))
    return _BLANK_LINES.sub(_blank_lines_marker, marked)


def _neutral(ch: str) -> str:
    if ch.isascii() and ch.isprintable():
        return ch
    category = unicodedata.category(ch)
    if category in _HIDING or (category == "Zs" and ch != " "):
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{{{code:04x}}}"
    return ch


def _space_marker(match: re.Match[str]) -> str:
    return f"[{len(match.group())} spaces]"


def _blank_marker(match: re.Match[str]) -> str:
    run = match.group()
    return f"[{len(run)} spaces]" if set(run) == {" "} else f"[{len(run)} blanks]"


def _blank_lines_marker(match: re.Match[str]) -> str:
    return f"\n[{match.group().count(chr(10)) - 1} blank lines]\n"


def lookalikes(text: str) -> list[str]:
    """Non-ASCII letters and marks, named, so a look-alike program name stands out."""
    found: list[str] = []
    for ch in dict.fromkeys(text):
        if ord(ch) > 127 and unicodedata.category(ch)[0] in "LMNS":
            found.append(f"U+{ord(ch):04X} {unicodedata.name(ch, '?')}")
    return found


def quoted(value: object) -> str:
    """A JSON string literal with every control or format character escaped, so a key cannot
    hide part of itself (or move the cursor) when the message is shown."""
    quoted = json.dumps(str(value), ensure_ascii=False)
    return "".join(
        f"\\u{ord(char):04x}" if unicodedata.category(char) in ("Cc", "Cf") else char
        for char in quoted
    )
