"""Asking the human: what is shown, what can be answered.

An asker is any callable `AskRequest -> Answer`. The terminal prompt is one; `non_interactive`
(CI: anything not granted is denied) and `fixed(answer)` are others. Everything shown to a human
goes through `visible()`, so a command cannot hide part of itself with control characters, ANSI
escapes, bidirectional overrides or zero-width characters.
"""

from __future__ import annotations

import os
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from runtime.ceiling import EnvironmentTag
from runtime.decision import Answer

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e", "\\": "\\\\"}
_HIDING = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def visible(text: str) -> str:
    """The text with every character that could hide or rewrite what is shown made visible."""
    out: list[str] = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif unicodedata.category(ch) in _HIDING or (
            unicodedata.category(ch) == "Zs" and ch != " "
        ):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{{{code:04x}}}")
        else:
            out.append(ch)
    return "".join(out)


def lookalikes(text: str) -> list[str]:
    """Non-ASCII letters and marks, named, so a look-alike program name stands out."""
    found: list[str] = []
    for ch in dict.fromkeys(text):
        if ord(ch) > 127 and unicodedata.category(ch)[0] in "LMNS":
            found.append(f"U+{ord(ch):04X} {unicodedata.name(ch, '?')}")
    return found


@dataclass(frozen=True, slots=True)
class AskRequest:
    tool: str
    environment: EnvironmentTag
    key: str
    subject: str  # the full command or path, shown in full
    choices: tuple[Answer, ...]
    why_not_project: str = ""  # why AlwaysThisProject is not offered, when it is not
    note: str = ""  # e.g. a CeilingViolation met on the way, an expired session grant


Asker = Callable[[AskRequest], Answer]


def non_interactive(request: AskRequest) -> Answer:
    return Answer.DENY


def fixed(answer: Answer) -> Asker:
    """Always give `answer` (used by `--answer` and tests); the engine still checks ceilings."""

    def ask(request: AskRequest) -> Answer:
        return answer

    return ask


_LABELS = {
    Answer.ONCE: ("o", "allow once"),
    Answer.SESSION: ("s", "always this session"),
    Answer.PROJECT: ("p", "always this project (writes codecoder.json)"),
    Answer.DENY: ("d", "deny"),
}


def describe(request: AskRequest) -> list[tuple[str, str]]:
    """What a person is shown about a call, as (label, text) pairs, all of it made visible.

    The terminal prompt and the MCP elicitation both print from this, each in its own layout.
    """
    rows = [
        ("tool", visible(request.tool)),
        ("environment", f"{request.environment.value} ({request.environment.containment})"),
        ("key", visible(request.key)),
    ]
    if request.subject:
        rows.append(("runs", visible(request.subject)))
    odd = lookalikes(request.subject or request.key)
    if odd:
        rows.append(("warning", f"non-ASCII characters: {', '.join(odd)}"))
    if request.note:
        rows.append(("note", visible(request.note)))
    return rows


def render(request: AskRequest) -> str:
    """The terminal prompt's text."""
    lines = ["codecoder: permission required"]
    lines += [f"  {label:<12} {text}" for label, text in describe(request)]
    lines.append("")
    for answer in request.choices:
        letter, label = _LABELS[answer]
        lines.append(f"  [{letter}] {label}")
    if request.why_not_project:
        lines.append(f"  (always this project is not offered: {visible(request.why_not_project)})")
    return "\n".join(lines)


class TerminalPrompt:
    """Asks on a terminal: shows `render(request)`, reads a letter, repeats until it is valid.

    End of input or Ctrl-C counts as Deny: a prompt nobody answers must not allow anything.
    """

    def __init__(self, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self._in = stdin
        self._out = stdout

    @classmethod
    def available(cls) -> bool:
        if sys.stdin.isatty():
            return True
        try:
            with open("/dev/tty"):
                return True
        except OSError:
            return False

    def __call__(self, request: AskRequest) -> Answer:
        stdin, stdout, opened = self._streams()
        try:
            stdout.write(render(request) + "\n")
            letters = {_LABELS[a][0]: a for a in request.choices}
            choice = "/".join(letters)
            while True:
                stdout.write(f"choice [{choice}]: ")
                stdout.flush()
                try:
                    line = stdin.readline()
                except KeyboardInterrupt:
                    line = ""
                if not line:
                    stdout.write("\n(no answer: denied)\n")
                    return Answer.DENY
                picked = letters.get(line.strip().lower()[:1])
                if picked is not None:
                    return picked
                stdout.write(f"please answer one of {choice}\n")
        finally:
            for stream in opened:
                stream.close()

    def _streams(self) -> tuple[TextIO, TextIO, list[TextIO]]:
        if self._in is not None and self._out is not None:
            return self._in, self._out, []
        if sys.stdin.isatty() and sys.stderr.isatty():
            return sys.stdin, sys.stderr, []
        # stdin may carry data (a pipe): ask on the controlling terminal instead.
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        tty_in = open(fd, encoding="utf-8", errors="replace", closefd=True)  # noqa: SIM115
        tty_out = open("/dev/tty", "w", encoding="utf-8")  # noqa: SIM115
        return tty_in, tty_out, [tty_in, tty_out]
