"""Command lines the runtime can read word for word: simple commands joined by pipes and lists.

`split_command_line("npm test 2>&1 | tail -20")` cuts a command line into its parts (each part's
words, as written, and its redirections) and the operators between them, when it is made only
of what this module admits:

* operators `|`, `|&`, `&&`, `||` and `;` between parts (none first or last);
* redirections that open no file: duplicating or closing a descriptor (`2>&1`, `>&2`, `2>&-`,
  `0<&3`) and `/dev/null`, unquoted (`>/dev/null`, `2>>/dev/null`, `&>/dev/null`,
  `</dev/null`);
* everything else is left in the parts' words, which the caller reads with the strict lexer of
  simple commands (`runtime.permissions.commandkey`), so a substitution, an assignment, a glob
  or a quote it cannot read makes the whole line unreadable there.

A background job (`&`), a subshell or group, a here-document, a newline, a file redirection
(`> out`, `>&file`, `>|`, `<>`) or an operator with nothing on one side makes it None. The
caller then checks, with `parser_agrees`, that bashlex reads the same parts, words,
redirections and operators; a disagreement is not a command line (it stays compound).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CommandLine", "Part", "parser_agrees", "split_command_line"]

OPERATORS = ("||", "|&", "&&", "|", ";")
_BOUNDARY = frozenset(" \t|&;<>")
DEV_NULL = "/dev/null"


@dataclass(frozen=True, slots=True)
class Part:
    """One simple command of a command line: its words as written (redirections cut out) and
    its redirections, canonical (`2>&1`, `>/dev/null`, `&>/dev/null`)."""

    words: str
    redirects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CommandLine:
    """Parts and the operators between them (one fewer operator than parts)."""

    parts: tuple[Part, ...]
    operators: tuple[str, ...]

    @property
    def pipeline(self) -> bool:
        """Whether it is one pipeline (`a | b | c`), not a list."""
        return all(op in ("|", "|&") for op in self.operators)


def split_command_line(command: str) -> CommandLine | None:
    """The command line's parts and operators (see the module docstring), or None."""
    parts: list[Part] = []
    operators: list[str] = []
    words: list[str] = []
    redirects: list[str] = []
    token_start = 0  # index in `words` where the current unquoted token began
    quoted = False  # the current token holds a quote: it cannot be a descriptor number
    i, n = 0, len(command)

    def finish(operator: str | None) -> bool:
        nonlocal words, redirects, token_start, quoted
        text = "".join(words).strip()
        if not text:
            return False
        parts.append(Part(text, tuple(redirects)))
        if operator is not None:
            operators.append(operator)
        words, redirects, token_start, quoted = [], [], 0, False
        return True

    while i < n:
        char = command[i]
        if char in "'\"":
            end = command.find(char, i + 1)
            if end < 0:
                return None
            words.append(command[i : end + 1])
            quoted = True
            i = end + 1
            continue
        if char in " \t":
            words.append(char)
            token_start, quoted = len(words), False
            i += 1
            continue
        operator = next((op for op in OPERATORS if command.startswith(op, i)), None)
        if operator is not None:
            if command.startswith((";;", "||&", "|||"), i) or not finish(operator):
                return None
            i += len(operator)
            continue
        if char == "&" and not command.startswith("&>", i):
            return None  # a background job
        if char in "<>&":
            digits = "".join(words[token_start:])
            if quoted or not (digits.isdigit() or not digits):
                return None  # `a2>x` is the word a2 and a redirection: keep it simple, refuse
            del words[token_start:]
            redirect, i = _redirect(command, i)
            if redirect is None:
                return None
            redirects.append(digits + redirect)
            token_start, quoted = len(words), False
            continue
        if char == "\n" or char == "\r":
            return None
        words.append(char)
        i += 1
    if not finish(None):
        return None
    return CommandLine(tuple(parts), tuple(operators))


def _redirect(command: str, i: int) -> tuple[str | None, int]:
    """The redirection at `command[i]` (after any descriptor number), canonical, and where the
    text after it starts; None for one that opens a file other than /dev/null."""
    for op in ("&>>", "&>", ">>", ">&", "<&", ">", "<"):
        if command.startswith(op, i):
            break
    else:
        return None, i
    i += len(op)
    if command.startswith(("|", ">", "<", "("), i) and op in (">", "<", ">>"):
        return None, i  # `>|`, `<>`, `<<`, `>(`
    if op in (">&", "<&"):
        end = i
        while end < len(command) and command[end] not in _BOUNDARY:
            end += 1
        target = command[i:end]
        if not (target.isdigit() or target == "-"):
            return None, i  # `>&file` writes a file
        return op + target, end
    while i < len(command) and command[i] in " \t":
        i += 1
    end = i
    while end < len(command) and command[end] not in _BOUNDARY:
        end += 1
    if command[i:end] != DEV_NULL:
        return None, i
    return op + DEV_NULL, end


# bashlex keeps its parser state on module globals (runtime.permissions.commandkey shares it).
_LOCK = threading.Lock()


def parser_agrees(
    command: str,
    line: CommandLine,
    argvs: Sequence[Sequence[str]],
    lock: Any = _LOCK,
    assignments: Sequence[Sequence[str]] | None = None,
) -> bool:
    """Whether bashlex reads `command` as the same parts (words `argvs`, after the
    `assignments` of each part, none by default), redirections and operators as `line`.
    Anything bashlex raises, or any other node, is a no."""
    import bashlex

    try:
        with lock:
            trees = bashlex.parse(command)
    except Exception:  # bashlex raises far more than ParsingError; all of it is "no"
        return False
    if len(trees) != 1:
        return False
    seen: list[_Seen] = []
    ops: list[str] = []
    if not _flatten(trees[0], seen, ops):
        return False
    firsts = assignments if assignments is not None else [()] * len(line.parts)
    expected = [
        (tuple(first), tuple(argv), part.redirects)
        for first, argv, part in zip(firsts, argvs, line.parts, strict=True)
    ]
    return seen == expected and ops == list(line.operators)


# What bashlex read of one part: its assignments, its words, its redirections.
_Seen = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _flatten(node: Any, seen: list[_Seen], ops: list[str]) -> bool:
    kind = getattr(node, "kind", None)
    if kind in ("list", "pipeline"):
        return all(_flatten(part, seen, ops) for part in node.parts)
    if kind == "operator":
        ops.append(node.op)
        return True
    if kind == "pipe":
        ops.append(node.pipe)
        return True
    if kind != "command":
        return False
    assigned: list[str] = []
    words: list[str] = []
    redirects: list[str] = []
    for part in node.parts:
        if part.kind == "assignment" and not words and not redirects:
            if getattr(part, "parts", None) or not isinstance(part.word, str):
                return False  # an expansion in its value
            assigned.append(part.word)
        elif part.kind == "word":
            if getattr(part, "parts", None) or not isinstance(part.word, str):
                return False
            words.append(part.word)
        elif part.kind == "redirect":
            shown = _redirect_of(part)
            if shown is None:
                return False
            redirects.append(shown)
        else:
            return False
    seen.append((tuple(assigned), tuple(words), tuple(redirects)))
    return True


def _redirect_of(node: Any) -> str | None:
    fd = "" if getattr(node, "input", None) is None else str(node.input)
    kind = node.type
    output = node.output
    if kind in (">&", "<&"):
        if isinstance(output, int) or output == "-":
            return f"{fd}{kind}{output}"
        return None
    word = getattr(output, "word", None)
    if word != DEV_NULL or getattr(output, "parts", None):
        return None
    return f"{fd}{kind}{word}"
