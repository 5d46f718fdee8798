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
import os
import re
import unicodedata
from collections.abc import Mapping
from typing import Literal, TextIO

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


Colours = Literal["visible", "off", "on"]

_SGR = re.compile(r"\x1b\[([0-9;]*)m")
# Colours and styles that can neither hide text nor outlast their line: the reset, bold, italic,
# underline (and their ends), and the six hues that show on a dark and on a light terminal
# alike. Black, white, grey, backgrounds and 256-colour or RGB codes could paint text in the
# terminal's own background colour: they are dropped, the text shown plain.
_HARMLESS_SGR = frozenset(
    {"", "0", "1", "3", "4", "22", "23", "24", "39"}
    | {str(n) for n in (*range(31, 37), *range(91, 97))}
)
_EXTENDED_SGR = frozenset({"38", "48", "58"})  # 256-colour and RGB forms: parameters follow
_HIDING_SGR = frozenset({"5", "6", "7", "8"})  # blink, reverse, conceal: shown, never obeyed


def colours_for(stream: TextIO, environ: Mapping[str, str] | None = None) -> Colours:
    """How tool output written to `stream` shows its colour codes: as colours on a terminal
    (unless `NO_COLOR` is set, or `TERM` is dumb), dropped on a terminal that wants none."""
    environ = os.environ if environ is None else environ
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return "off"
    try:
        return "on" if stream.isatty() else "off"
    except (AttributeError, ValueError):
        return "off"


def for_terminal(text: str, colours: Colours = "visible") -> str:
    """Tool output made safe to write to a terminal: lines and tabs kept, every other control
    character, escape, bidi override and invisible character shown as in `visible()`, runs of
    `OUTPUT_SPACE_RUN` blanks and of more than `OUTPUT_BLANK_LINES` blank lines as markers.

    `colours` says what becomes of the output's own colour codes (SGR): `visible` shows them
    all like any escape (what a question shows of a file); `on` keeps the harmless ones as
    colours, each line ending reset, so none outlasts its line (`colours_for` a terminal);
    `off` drops them. Either way, codes that hide text (conceal, reverse, blink) stay visible,
    and every other escape too."""
    text = text.replace("\r\n", "\n")
    if colours == "visible":
        shown = _neutralised(text)
    else:
        parts: list[str] = []
        done = 0
        for match in _SGR.finditer(text):
            parts.append(_neutralised(text[done : match.start()]))
            parts.append(_colour(match, colours))
            done = match.end()
        parts.append(_neutralised(text[done:]))
        shown = "".join(parts)
        if colours == "on" and "\x1b" in shown:
            shown = "\n".join(
                line + "\x1b[0m" if "\x1b" in line else line for line in shown.split("\n")
            )
    marked = _OUTPUT_BLANKS.sub(_blank_marker, shown)
    return _BLANK_LINES.sub(_blank_lines_marker, marked)


def _colour(match: re.Match[str], colours: Colours) -> str:
    params = set(match.group(1).split(";"))
    if params & _EXTENDED_SGR:
        return ""
    if params & _HIDING_SGR:
        return _neutralised(match.group())
    if params <= _HARMLESS_SGR:
        return match.group() if colours == "on" else ""
    return ""


def _neutralised(text: str) -> str:
    out: list[str] = []
    for ch in text:
        if ch in "\n\t":
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            out.append(_neutral(ch))
    return "".join(out)


def _neutral(ch: str) -> str:
    if ch.isascii() and ch.isprintable():
        return ch
    if "\udc80" <= ch <= "\udcff":  # a byte of a name that is not UTF-8: see `spelled`
        return f"\\x{ord(ch) - 0xDC00:02x}"
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


_SPELLED_BYTE = re.compile(r"\\(\\|x([89a-fA-F][0-9a-fA-F]))")
_BYTE_ESCAPE = re.compile(r"x[89a-fA-F][0-9a-fA-F]")


def spelled(name: str | bytes) -> str:
    r"""A file name as text that says exactly which bytes it is, and that `unspelled` reads
    back: a byte that is not UTF-8 as `\xHH` (the name `n\xe9e.txt`: the bytes `n`, 0xE9,
    `e.txt`), and a backslash that would otherwise read as the start of an escape doubled.
    `name` is bytes, or a name as Python holds it (`os.fsdecode`: surrogates for such bytes)."""
    text = name.decode("utf-8", "surrogateescape") if isinstance(name, bytes) else name
    if "\\" not in text and not any("\udc80" <= ch <= "\udcff" for ch in text):
        return text
    out: list[str] = []
    for index, ch in enumerate(text):
        if "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch == "\\" and _starts_escape(text[index + 1 :]):
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)


def _starts_escape(rest: str) -> bool:
    if not rest:
        return False
    if rest[0] == "\\" or "\udc80" <= rest[0] <= "\udcff":
        return True
    return _BYTE_ESCAPE.match(rest) is not None


def unspelled(text: str) -> str:
    r"""The name `spelled` shows as `text`, as Python holds names (surrogates for bytes that
    are not UTF-8): `\xHH` (HH from 80 to ff) is that byte and `\\` one backslash; nothing
    else changes, so no ASCII character can be slipped in as an escape."""
    if "\\" not in text:
        return text
    return _SPELLED_BYTE.sub(_unspell, text)


def _unspell(match: re.Match[str]) -> str:
    byte = match.group(2)
    return "\\" if byte is None else chr(0xDC00 + int(byte, 16))
