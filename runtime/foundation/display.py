"""What a person is shown: text that cannot hide part of itself.

Everything shown to a human (a question, a key, an error, a log line) goes through `visible()`,
so a command cannot hide part of itself with control characters, ANSI escapes, bidirectional
overrides or zero-width characters, nor push its payload out of view with a long run of
characters that render blank (`renders_blank`: spaces of every width, the Braille blank,
Hangul fillers, Unicode's default-ignorable characters, and every invisible one): a run of
`SPACE_RUN` or more is shown as `[4000 spaces]`, or `[4000 × U+2800 BRAILLE PATTERN BLANK]`,
or `[4000 blank or invisible characters]` when they are mixed, and one such character alone
is shown as its code (`\\u{2800}`). Tool output written to a terminal goes through
`for_terminal()`, which keeps lines and tabs but neutralises escapes the same way, so output
cannot restyle, hide or overwrite what follows it. `lookalikes()` names non-ASCII characters
of a program name.
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
# In output, lines and indentation are content: only runs longer than any indentation, and
# more blank lines than any layout needs, are marked.
OUTPUT_SPACE_RUN = 80
OUTPUT_BLANK_LINES = 8
_BLANK_LINES = re.compile(f"(?:[ \t]*\n){{{OUTPUT_BLANK_LINES + 1},}}")


# Characters that render as nothing or as blank space in a terminal, besides the categories in
# `_HIDING` and the space separators (Zs): Unicode's Default_Ignorable_Code_Point (the ones
# whose category is not already hidden: combining grapheme joiner, Hangul fillers, Khmer
# inherent vowels, Mongolian variation selectors, variation selectors) and the glyphs fonts
# draw blank (the Braille blank, the musical-symbol nulls).
_BLANK_RANGES: tuple[tuple[int, int], ...] = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0x1D159, 0x1D159),
    (0x1D173, 0x1D17A),
    (0xE0100, 0xE01EF),
)
_BLANK_SET = frozenset(chr(c) for low, high in _BLANK_RANGES for c in range(low, high + 1))


def renders_blank(ch: str) -> bool:
    """Whether `ch` shows as nothing, or as blank space, where a person reads it: a space of
    any width, an invisible or control character, or a glyph fonts draw empty (U+2800, the
    Hangul fillers, variation selectors …)."""
    if ch == " " or ch in _BLANK_SET:
        return True
    if ch.isascii():
        return not ch.isprintable()
    category = unicodedata.category(ch)
    return category in _HIDING or category == "Zs"


def visible(text: str) -> str:
    """The text with every character that could hide or rewrite what is shown made visible,
    and every run of `SPACE_RUN` or more characters that render blank collapsed to a marker
    that says how many there are (`[N spaces]`, see the module docstring)."""
    return _shown(text, SPACE_RUN, "")


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


def _shown(text: str, threshold: int, kept: str, raw: str = "") -> str:
    """Each character made visible (`kept` ones as they are, and `raw` ones outside a long
    run), runs of `threshold` or more characters that render blank (other than `kept` ones) as
    one marker."""
    out: list[str] = []
    run_start = 0
    for i, ch in enumerate(text):
        if renders_blank(ch) and ch not in kept:
            continue
        if i - run_start:
            out.append(_blank_run(text[run_start:i], threshold, raw))
        out.append(ch if ch in kept else _ESCAPES[ch] if ch in _ESCAPES else _neutral(ch))
        run_start = i + 1
    if len(text) - run_start:
        out.append(_blank_run(text[run_start:], threshold, raw))
    return "".join(out)


def _blank_run(run: str, threshold: int, raw: str) -> str:
    """A run of characters that render blank: shown one by one when short, else counted."""
    if len(run) < threshold:
        return "".join(
            ch if ch in raw else _ESCAPES[ch] if ch in _ESCAPES else _neutral(ch) for ch in run
        )
    kinds = set(run)
    if kinds == {" "}:
        return f"[{len(run)} spaces]"
    if kinds <= {" ", "\t"}:
        return f"[{len(run)} blanks]"
    if len(kinds) == 1:
        name = unicodedata.name(run[0], "")
        return f"[{len(run)} × U+{ord(run[0]):04X}{' ' + name if name else ''}]"
    return f"[{len(run)} blank or invisible characters]"


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
    `OUTPUT_SPACE_RUN` characters that render blank and of more than `OUTPUT_BLANK_LINES` blank
    lines as markers.

    `colours` says what becomes of the output's own colour codes (SGR): `visible` shows them
    all like any escape (what a question shows of a file); `on` keeps the harmless ones as
    colours, each line ending reset, so none outlasts its line (`colours_for` a terminal);
    `off` drops them. Either way, codes that hide text (conceal, reverse, blink) stay visible,
    and every other escape too; a code between two blank characters is dropped, so that no
    colour can cut a long blank run into short ones that escape the marker."""
    text = text.replace("\r\n", "\n")
    if colours == "visible":
        shown = _neutralised(text)
    else:
        parts: list[str] = []
        done = 0
        for match in _SGR.finditer(text):
            parts.append(text[done : match.start()])
            before = text[match.start() - 1 : match.start()]
            after = text[match.end() : match.end() + 1]
            inside_blanks = bool(before and after) and _blank(before) and _blank(after)
            parts.append("" if inside_blanks else _Kept(_colour(match, colours)))
            done = match.end()
        parts.append(text[done:])
        shown = _neutralised_around(parts)
        if colours == "on" and "\x1b" in shown:
            shown = "\n".join(
                line + "\x1b[0m" if "\x1b" in line else line for line in shown.split("\n")
            )
    return _BLANK_LINES.sub(_blank_lines_marker, shown)


class _Kept(str):
    """A colour code for_terminal keeps as it is (already decided by `_colour`)."""


def _blank(ch: str) -> bool:
    return ch not in "\n" and renders_blank(ch)


def _neutralised(text: str) -> str:
    return _shown(text, OUTPUT_SPACE_RUN, "\n", "\t")


def _neutralised_around(parts: list[str]) -> str:
    """The text parts neutralised as one text (so a blank run across a dropped code is still
    one run), the kept colour codes put back where they were."""
    text = "".join(p for p in parts if not isinstance(p, _Kept))
    if not any(isinstance(p, _Kept) and p for p in parts):
        return _neutralised(text)
    out: list[str] = []
    pending: list[str] = []
    for part in parts:
        if isinstance(part, _Kept):
            out.append(_neutralised("".join(pending)))
            pending = []
            out.append(str(part))
        else:
            pending.append(part)
    out.append(_neutralised("".join(pending)))
    return "".join(out)


def _colour(match: re.Match[str], colours: Colours) -> str:
    params = set(match.group(1).split(";"))
    if params & _EXTENDED_SGR:
        return ""
    if params & _HIDING_SGR:
        return _neutralised(match.group())
    if params <= _HARMLESS_SGR:
        return match.group() if colours == "on" else ""
    return ""


def _neutral(ch: str) -> str:
    if ch.isascii() and ch.isprintable():
        return ch
    if "\udc80" <= ch <= "\udcff":  # a byte of a name that is not UTF-8: see `spelled`
        return f"\\x{ord(ch) - 0xDC00:02x}"
    if ch in _BLANK_SET:
        return f"\\u{{{ord(ch):04x}}}"
    category = unicodedata.category(ch)
    if category in _HIDING or (category == "Zs" and ch != " "):
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{{{code:04x}}}"
    return ch


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
