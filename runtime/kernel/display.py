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
import re
import unicodedata

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


def for_terminal(text: str) -> str:
    """Tool output made safe to write to a terminal: lines and tabs kept, every other control
    character, escape, bidi override and invisible character shown as in `visible()`, runs of
    `OUTPUT_SPACE_RUN` characters that render blank and of more than `OUTPUT_BLANK_LINES` blank
    lines as markers."""
    text = _shown(text.replace("\r\n", "\n"), OUTPUT_SPACE_RUN, "\n", "\t")
    return _BLANK_LINES.sub(_blank_lines_marker, text)


def _neutral(ch: str) -> str:
    if ch.isascii() and ch.isprintable():
        return ch
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
