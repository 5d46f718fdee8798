"""Asking the human: what is shown, what can be answered.

An asker is any callable `AskRequest -> Answer`. The terminal prompt is one; `non_interactive`
(CI: anything not granted is denied) and `fixed(answer)` are others. Everything shown to a human
goes through `visible()` (foundation.display), so a command cannot hide part of itself; a
text of several lines (a multi-line command, a diff) is shown as that many lines, each made
visible, behind a gutter (`│ `) that no line of it can remove.

Each choice is one value, `Choice`, that every surface prints from (the terminal prompt, the
MCP elicitation form, `codecoder decide`, the hooks' messages): its answer and letter, the
scope in codecoder.json's names (`Once`, `AlwaysThisSession`, `AlwaysThisProject`, `Deny`), the
entry it records and what that entry covers ("`run_command:cp` — every simple `cp …` command,
with any arguments"), how long it lasts (this call; this `codecoder call`, this MCP server, or
this session until HH:MM with a `session_ttl`; the project until revoked) and where it is kept
(memory, the state directory, codecoder.json). `AskRequest.options()` builds them.

How a new choice plugs in: give it an `Answer` value (foundation.decision) whose `scope`
says how long it lasts, a letter in `LETTERS`, and, when it records an entry, the entry in the
request's `grants` (the engine, permissions.chain, offers it in `choices`). A choice
that runs the call somewhere else than the request's environment says so in `Choice.runs_in`.
A command that would fail contained is also offered the host, unconfined, once or for the
session (`HOST_ONCE`, `HOST_SESSION`: `Choice.runs_in` is @shell, and they name the key they
run under there); a simple one also every command of its program that would fail contained,
for the session (`HOST_SESSION_PROGRAM`: `run_command:gh` bound to @shell). The broadest
contained grant may also be offered for every project (`EVERY_PROJECT`, written to the user's
own file).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Decider, Decision, Source
from codecoder.foundation.display import (
    colours_for,
    for_terminal,
    lookalikes,
    visible,
    visible_lines,
)
from codecoder.foundation.errors import Unanswered
from codecoder.foundation.terminal import open_terminal
from codecoder.permissions.keys import GrantLevel, Preview

# What a question shows of a call's preview (a diff, a new file's head): enough to judge it.
PREVIEW_LINES = 40
PREVIEW_WIDTH = 160
GUTTER = "│ "


@dataclass(frozen=True, slots=True)
class Choice:
    """One answer as a person is offered it: what it records, covers, lasts and where it is
    kept. `entry` is None for Once and Deny, which record nothing."""

    answer: Answer
    letter: str
    scope: str  # codecoder.json's name for it: Once, AlwaysThisSession, AlwaysThisProject, Deny
    entry: str | None
    covers: str  # what the entry covers ("every simple `cp …` command, with any arguments")
    lasts: str  # "this call only", "until this `codecoder call` exits", "until revoked"
    kept: str  # "nothing is recorded", "kept in memory …", "written to /p/codecoder.json"
    runs_in: EnvironmentTag | None = None  # set when the choice runs the call elsewhere
    entry_shown: str = ""  # how the entry is shown, where not as itself (a multi-line command)
    also: tuple[str, ...] = ()  # entries recorded with `entry` (`GrantLevel.also`)

    @property
    def grant(self) -> str:
        """The entry and what it covers, one phrase: "run_command:cp — every simple …"."""
        if self.entry is None:
            return self.covers
        shown = " + ".join([self.entry_shown or visible(self.entry), *map(visible, self.also)])
        return f"{shown} — {visible(self.covers)}"

    @property
    def when(self) -> str:
        """How long, and where it is kept, one phrase."""
        return f"lasts {self.lasts}; {self.kept}"

    @property
    def title(self) -> str:
        """The whole choice on one line (an MCP form's choice, a hook's message)."""
        if self.entry is None:
            return f"{self.scope}: {self.covers}"
        return f"{self.scope}: {self.grant} ({self.when})"

    def to_json(self) -> dict[str, object]:
        return {
            "answer": self.answer.value,
            "letter": self.letter,
            "scope": self.scope,
            "entry": self.entry,
            "covers": self.covers,
            "lasts": self.lasts,
            "kept": self.kept,
            "runs_in": self.runs_in.value if self.runs_in else None,
            "also": list(self.also),
        }


_ONCE = "this call only; nothing is recorded"
_DENY = "nothing runs; nothing is recorded"
_NOTHING = "nothing is recorded"


@dataclass(frozen=True, slots=True)
class AskRequest:
    """One question to the human. `grants` says, for each "always" choice offered, the entry
    it records and what that entry covers; `session_lasts` and `session_kept` what a session
    grant means where the question is asked, `project_file` where a project grant is written."""

    tool: str
    environment: EnvironmentTag
    key: str
    subject: str  # the full command or path, shown in full
    choices: tuple[Answer, ...]
    why_not_project: str = ""  # why AlwaysThisProject is not offered, when it is not
    note: str = ""  # e.g. a CeilingViolation met on the way, an expired session grant
    grants: tuple[tuple[Answer, GrantLevel], ...] = ()
    host_key: str = ""  # the key on the host, where the host choices are offered
    notes: tuple[str, ...] = ()  # the key's remarks: where the program lives, what code it runs
    session_lasts: str = "until this session ends"
    session_kept: str = "kept in memory only (nothing is written)"
    project_file: str = "codecoder.json"
    user_file: str = "~/.config/codecoder/config.json"  # where EVERY_PROJECT writes
    subject_label: str = "runs"  # what the subject is: "runs" (a command), "path", "does"
    compound: bool = False  # the key is the whole command (runtime.permissions.commandkey)
    # What the call would change (a diff): read when the question is shown, never compared.
    preview: Callable[[], Preview] | None = field(default=None, compare=False, repr=False)

    def grant_for(self, answer: Answer) -> GrantLevel:
        """The entry `answer` records (the key itself where the request names none)."""
        for offered, level in self.grants:
            if offered is answer:
                return level
        return GrantLevel(self.key, "exactly this key")

    def option(self, answer: Answer) -> Choice:
        """`answer` as the person is offered it."""
        letter = LETTERS[answer]
        host = EnvironmentTag.SHELL if answer.on_host else None
        where = " on the host" if host else ""
        if answer.scope is Answer.ONCE:
            if host:
                covers = (
                    f"this call only, run on the host, unconfined (@shell), as "
                    f"{key_for_person(self.host_key)}; nothing is recorded"
                )
            elif self.host_key:
                covers = (
                    f"this call only, contained in {self.environment.value} (it would likely "
                    "fail); nothing is recorded"
                )
            else:
                covers = _ONCE
            return Choice(
                answer, letter, f"Once{where}", None, covers, "this call only", _NOTHING, host
            )
        if answer.scope is Answer.DENY:
            return Choice(answer, letter, "Deny", None, _DENY, "this call only", _NOTHING)
        level = self.grant_for(answer)
        label = f"{answer.label}{where}"
        if answer.scope is Answer.SESSION:
            lasts, kept = self.session_lasts, self.session_kept
        elif answer is Answer.EVERY_PROJECT:
            label = "AlwaysEveryProject"
            lasts = "until revoked, in every project where it runs contained"
            kept = f"written to your own file, {self.user_file}"
        else:
            lasts, kept = "until revoked", f"written to {self.project_file}"
        covers = f"{level.covers}, run on the host, unconfined (@shell)" if host else level.covers
        shown = _key_shown(self) if level.entry == self.key else ""
        return Choice(
            answer,
            letter,
            label,
            level.entry,
            covers,
            lasts,
            kept,
            host,
            entry_shown=shown,
            also=level.also,
        )

    def options(self) -> tuple[Choice, ...]:
        """Every choice offered, in order."""
        return tuple(self.option(answer) for answer in self.choices)

    def shown_preview(self) -> Preview | None:
        """The preview bounded for a question (its lines cut to `PREVIEW_LINES` lines of
        `PREVIEW_WIDTH` characters, each neutralised as tool output is), or None. A preview
        that fails to compute says so instead of failing the question."""
        if self.preview is None:
            return None
        try:
            found = self.preview()
        except Exception as exc:  # a question must be shown, whatever the preview met
            return Preview(f"(no preview: {type(exc).__name__}: {exc})")
        lines = [_bounded(line) for line in found.lines[:PREVIEW_LINES]]
        hidden = len(found.lines) - PREVIEW_LINES
        if hidden > 0:
            lines.append(f"… {hidden} more line{'s' if hidden != 1 else ''} not shown")
        return Preview(found.summary, tuple(lines))


def _bounded(line: str) -> str:
    shown = for_terminal(line.replace("\n", "\\n"))
    if len(shown) > PREVIEW_WIDTH:
        shown = shown[:PREVIEW_WIDTH] + f"… ({len(shown) - PREVIEW_WIDTH} more characters)"
    return shown


Asker = Callable[[AskRequest], Answer]


class _NonInteractive:
    """Nobody can be asked: whatever needs an answer is refused (by this policy, not a
    person: `Decider.NON_INTERACTIVE`)."""

    decider = Decider.NON_INTERACTIVE

    def __call__(self, request: AskRequest) -> Answer:
        return Answer.DENY


non_interactive: Asker = _NonInteractive()


def decider_of(asker: Asker) -> Decider:
    """Who answers for `asker`: a person, unless it says otherwise (`decider`)."""
    found = getattr(inspect.unwrap(asker), "decider", Decider.PERSON)  # through a traced wrapper
    return found if isinstance(found, Decider) else Decider.PERSON


def in_ci() -> bool:
    """`CI` is set true: nobody is there to answer, whatever the terminal says."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


class _Fixed:
    def __init__(self, answer: Answer, decider: Decider) -> None:
        self.answer = answer
        self.decider = decider

    def __call__(self, request: AskRequest) -> Answer:
        return self.answer


def fixed(answer: Answer, decider: Decider = Decider.GIVEN) -> Asker:
    """Always give `answer`: by default an answer given before the question (`--answer`, a
    replay line, tests: `Decider.GIVEN`); `Decider.PERSON` where a person gave it elsewhere
    (an agent framework's approval UI, resumed). The engine still checks ceilings."""
    return _Fixed(answer, decider)


class _Given:
    decider = Decider.GIVEN

    def __init__(self, asker: Asker) -> None:
        self._asker = asker

    def __call__(self, request: AskRequest) -> Answer:
        return self._asker(request)


def given(asker: Asker) -> Asker:
    """`asker` as answers given before the question (a replay's lines): `Decider.GIVEN`."""
    return _Given(asker)


def unanswered(request: AskRequest, decider: Decider, reason: str) -> Unanswered:
    """The refusal of a question nobody answered (`decider` says why: cancelled, timed out,
    nobody to ask), to be raised by an asker."""
    decision = Decision(
        False,
        Source.DENIED,
        request.tool,
        request.environment,
        request.key,
        reason=reason,
        decided_by=decider,
    )
    return Unanswered(f"{request.key} was not allowed ({reason})", decision)


LETTERS = {
    Answer.ONCE: "o",
    Answer.SESSION: "s",
    Answer.SESSION_PROGRAM: "a",
    Answer.PROJECT: "p",
    Answer.PROJECT_PROGRAM: "w",
    Answer.PROJECT_ANY: "c",
    Answer.EVERY_PROJECT: "g",
    Answer.HOST_ONCE: "h",
    Answer.HOST_SESSION: "r",
    Answer.HOST_SESSION_PROGRAM: "e",
    Answer.DENY: "d",
}


def describe(request: AskRequest) -> list[tuple[str, list[str]]]:
    """What a person is shown about a call, as (label, lines) pairs, all of it made visible;
    most values are one line, a multi-line command or a preview several.

    The terminal prompt and the MCP elicitation both print from this, each in its own layout.
    """
    rows: list[tuple[str, list[str]]] = [
        ("tool", [visible(request.tool)]),
        ("environment", [f"{request.environment.value} ({request.environment.containment})"]),
        ("key", [_key_line(request)]),
    ]
    if request.subject:
        rows.append((request.subject_label, visible_lines(request.subject)))
    if request.host_key:
        rows.append(("on the host", [f"{key_for_person(request.host_key)} (@shell, unconfined)"]))
    odd = lookalikes(request.subject or request.key)
    if odd:
        rows.append(("warning", [f"non-ASCII characters: {', '.join(odd)}"]))
    for remark in request.notes:
        rows.append(("note", visible_lines(remark)))
    if request.note:
        rows.append(("note", visible_lines(request.note)))
    preview = request.shown_preview()
    if preview is not None:
        rows.append(("changes", [visible(preview.summary), *preview.lines]))
    return rows


def key_for_person(key: str) -> str:
    """A key made visible for a line a person reads (a status line, the log, a list): a
    compound command's key of several lines, which is the whole command JSON-quoted, shown as
    its first line and how many there are, so no `\\n` is read as part of it."""
    tool, sep, action = key.partition(":")
    if sep and len(action) > 1 and action[0] == action[-1] == '"':
        try:
            command = json.loads(action)
        except ValueError:
            command = None
        if isinstance(command, str) and "\n" in command:
            lines = command.split("\n")
            return f'{visible(tool)}:"{visible(lines[0])}…" ({len(lines)} lines)'
    return visible(key)


def _key_shown(request: AskRequest) -> str:
    """The key, made visible; a compound command's key, which is the whole command
    JSON-quoted, is not repeated with its escapes where the command is shown line by line."""
    if request.compound and "\n" in request.subject:
        return f'{visible(request.tool)}:"…"'
    return visible(request.key)


def _key_line(request: AskRequest) -> str:
    shown = _key_shown(request)
    if shown != visible(request.key):
        return f"{shown} (this whole command, exactly as shown below)"
    return shown


def why_not_project(request: AskRequest) -> str:
    """Why AlwaysThisProject is not offered, made visible, the key as `_key_shown` shows it."""
    return visible(request.why_not_project).replace(visible(request.key), _key_shown(request))


def laid_out(label: str, lines: list[str], width: int) -> list[str]:
    """One described row as text lines: `label` padded to `width`, then its value; a value of
    several lines goes behind the gutter, one line each, so none can pass for a line of the
    question (a choice, a label)."""
    if len(lines) == 1:
        return [f"{label:<{width}} {lines[0]}"]
    pad = " " * width
    return [f"{label if i == 0 else pad:<{width}} {GUTTER}{line}" for i, line in enumerate(lines)]


# Rows whose value is what will run or be written, shown exactly as it is: never re-wrapped, so
# no break a terminal did not put there can pass for a line of it.
_EXACT_ROWS = frozenset({"key", "runs", "path", "does", "on the host"})
_DIFF_COLOURS = (("+++", ""), ("---", ""), ("+", "32"), ("-", "31"), ("@@", "36"))


def render(request: AskRequest, width: int | None = None, colour: bool = False) -> str:
    """The terminal prompt's text: its prose wrapped at word boundaries to `width` columns
    (what is shown exactly is not: the key, the command or path, the preview's lines), and,
    with `colour`, a diff's added and removed lines in green and red."""
    lines = ["codecoder: permission required"]
    for label, value in describe(request):
        if label == "changes" and colour:
            value = [value[0], *(_coloured(line) for line in value[1:])]
        for line in laid_out(label, value, 12):
            exact = label in _EXACT_ROWS or len(value) > 1
            lines += [f"  {line}"] if exact else _wrapped(f"  {line}", width, 15)
    lines.append("")
    options = request.options()
    column = max(len(choice.scope) for choice in options)
    for choice in options:
        start = 8 + column
        lines += _wrapped(
            f"  [{choice.letter}] {choice.scope:<{column}}  {choice.grant}", width, start
        )
        if choice.entry is not None:
            lines += _wrapped(f"      {'':<{column}}  {choice.when}", width, start)
    if request.why_not_project:
        note = f"  (AlwaysThisProject is not offered: {why_not_project(request)})"
        lines += _wrapped(note, width, 3)
    return "\n".join(lines)


def _wrapped(line: str, width: int | None, indent: int) -> list[str]:
    """`line` broken at spaces to `width` columns, its next lines indented by `indent`; a word
    longer than a line (a key, a path) is kept whole."""
    if width is None or len(line) <= width:
        return [line]
    return textwrap.wrap(
        line,
        width,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
        drop_whitespace=True,
    ) or [line]


def _coloured(line: str) -> str:
    """A diff line in its colour: added green, removed red, a hunk's header cyan (the line is
    visible already: no escape of its own reaches the terminal)."""
    for start, code in _DIFF_COLOURS:
        if line.startswith(start):
            return f"\x1b[{code}m{line}\x1b[0m" if code else line
    return line


def _columns(stream: TextIO) -> int:
    """The terminal's width in columns (COLUMNS, else the terminal's own, else 80)."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 20:
        return int(given)
    try:
        return max(os.get_terminal_size(stream.fileno()).columns, 20)
    except (OSError, ValueError, AttributeError):
        return 80


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
            os.close(open_terminal())
        except OSError:
            return False
        return True

    def __call__(self, request: AskRequest) -> Answer:
        stdin, stdout, opened = self._streams()
        try:
            stdout.write(render(request, _columns(stdout), colours_for(stdout) == "on") + "\n")
            letters = {LETTERS[a]: a for a in request.choices}
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
                    reason = "the question ended without an answer (end of input or Ctrl-C)"
                    raise unanswered(request, Decider.CANCELLED, reason)
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
        tty_in = open(open_terminal(), encoding="utf-8", errors="replace")  # noqa: SIM115
        tty_out = open(open_terminal(), "w", encoding="utf-8")  # noqa: SIM115
        return tty_in, tty_out, [tty_in, tty_out]
