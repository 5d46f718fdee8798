"""Asking the human: what is shown, what can be answered.

An asker is any callable `AskRequest -> Answer`. The terminal prompt is one; `non_interactive`
(CI: anything not granted is denied) and `fixed(answer)` are others. Everything shown to a human
goes through `visible()` (runtime.kernel.display), so a command cannot hide part of itself.

Each "always" choice records one entry (`AskRequest.grants`), and its label says what that
entry covers: the narrowest key naming what the human saw (`run_command:git:status`) unless
the human picks the program-wide choice, whose label says it covers every simple command of
that program, or, for a command in a sandbox, every simple command there (`run_command:*`).
A command that would fail contained is also offered the host, unconfined, once or for the
session: those choices say so, and name the key they run under there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.decision import Answer
from codecoder.runtime.kernel.display import lookalikes, visible
from codecoder.runtime.permissions.keys import GrantLevel


@dataclass(frozen=True, slots=True)
class AskRequest:
    """One question to the human. `grants` says, for each "always" choice offered, the entry
    it records and what that entry covers."""

    tool: str
    environment: EnvironmentTag
    key: str
    subject: str  # the full command or path, shown in full
    choices: tuple[Answer, ...]
    why_not_project: str = ""  # why AlwaysThisProject is not offered, when it is not
    note: str = ""  # e.g. a CeilingViolation met on the way, an expired session grant
    grants: tuple[tuple[Answer, GrantLevel], ...] = ()
    host_key: str = ""  # the key on the host, where the host choices are offered

    def grant_for(self, answer: Answer) -> GrantLevel:
        """The entry `answer` records (the key itself where the request names none)."""
        for offered, level in self.grants:
            if offered is answer:
                return level
        return GrantLevel(self.key, "exactly this key")


Asker = Callable[[AskRequest], Answer]


def non_interactive(request: AskRequest) -> Answer:
    return Answer.DENY


def in_ci() -> bool:
    """`CI` is set true: nobody is there to answer, whatever the terminal says."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def fixed(answer: Answer) -> Asker:
    """Always give `answer` (used by `--answer` and tests); the engine still checks ceilings."""

    def ask(request: AskRequest) -> Answer:
        return answer

    return ask


_LETTERS = {
    Answer.ONCE: "o",
    Answer.SESSION: "s",
    Answer.SESSION_PROGRAM: "a",
    Answer.PROJECT: "p",
    Answer.PROJECT_PROGRAM: "w",
    Answer.PROJECT_ANY: "c",
    Answer.HOST_ONCE: "h",
    Answer.HOST_SESSION: "r",
    Answer.DENY: "d",
}
_SCOPES = {
    Answer.SESSION: "always this session",
    Answer.SESSION_PROGRAM: "always this session",
    Answer.PROJECT: "always this project",
    Answer.PROJECT_PROGRAM: "always this project",
    Answer.PROJECT_ANY: "always this project",
    Answer.HOST_SESSION: "on the host, unconfined (@shell), for the rest of this session",
}
# Choices whose entry is worth naming whenever they are offered, and that make the narrow
# choices name theirs too.
_NAMED = (Answer.SESSION_PROGRAM, Answer.PROJECT_PROGRAM, Answer.PROJECT_ANY)


def choice_label(request: AskRequest, answer: Answer) -> str:
    """What choosing `answer` does, in words, including the entry it records and what that
    covers when the request has a choice between a narrow and a program-wide entry."""
    if answer is Answer.ONCE:
        if request.host_key:
            return f"allow once, contained in {request.environment.value} (it would likely fail)"
        return "allow once"
    if answer is Answer.DENY:
        return "deny"
    if answer is Answer.HOST_ONCE:
        return f"run it on the host, unconfined (@shell), once [{visible(request.host_key)}]"
    writes = " (writes codecoder.json)" if answer.scope is Answer.PROJECT else ""
    detail = choice_detail(request, answer)
    return f"{_SCOPES[answer]}{': ' + detail if detail else ''}{writes}"


def choice_detail(request: AskRequest, answer: Answer) -> str:
    """What an "always" choice's entry covers and the entry itself, where the request offers
    a wider choice than the key (program-wide, any command in the sandbox) or the host for the
    session (otherwise the key shown is what is recorded: "")."""
    named = answer in (*_NAMED, Answer.HOST_SESSION) or any(
        offered in _NAMED for offered in request.choices
    )
    if not named or answer.scope not in (Answer.SESSION, Answer.PROJECT):
        return ""
    level = request.grant_for(answer)
    return f"{visible(level.covers)} [{visible(level.entry)}]"


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
    if request.host_key:
        rows.append(("on the host", f"{visible(request.host_key)} (@shell, unconfined)"))
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
        lines.append(f"  [{_LETTERS[answer]}] {choice_label(request, answer)}")
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
            letters = {_LETTERS[a]: a for a in request.choices}
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
