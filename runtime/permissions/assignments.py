"""Harmless variable assignments before a command: what `TZ=UTC python -m pytest` is keyed as.

`split_assignments("TZ=UTC python -m pytest")` is `(("TZ=UTC",), "python -m pytest")`: the
assignments at the start of a command line are set aside when **every** one of them is
harmless, and the command after them is keyed as if they were not there
(`runtime.permissions.commandkey`). bash still sets them for the command when it runs, and the
question still shows the whole line.

An assignment is harmless when both hold, and the rule fails closed (None: the line is keyed
as today, by the whole string) on anything else:

* its name is in `HARMLESS`, a closed list of names that change how a program formats or
  reports what it does, never which code it runs or which files it reads: locale, time zone,
  colour and width of output, Python's buffering, a Rust backtrace, cgo on or off. Names
  that look alike are other names (`LC_ALL_X`, `TZDIR`, `lang`): only the exact spellings
  listed count, so nothing near the list (`PATH`, `LD_*`, `PYTHONPATH`, `NODE_OPTIONS`,
  `GIT_*`, `PAGER`, `EDITOR`, `BASH_ENV`, `HOME`, `IFS`, `PS4`, any `*_PROXY`, anything with
  OPTS/OPTIONS/FLAGS/ARGS) is ever set aside. `GOOS` and `GOARCH` are left out on purpose:
  for another platform `go test` and `go run` run the program `go_$GOOS_$GOARCH_exec` found
  on PATH;
* its value is a plain word: unquoted, of `[A-Za-z0-9_.,:+@%=-]` only (no `$`, backtick, glob,
  tilde, quote, backslash, space or control character: nothing bash expands, and nothing a
  program could read as a path), followed by a space or tab. `TZ` alone may hold `/` between
  names (`Europe/Paris`), never first, and no value may hold `..`: a zone or a locale is then
  looked up only where the system keeps them, never in a file the value names. A value does
  not start with `=` nor hold `:=` either: zsh expands `=ls` there to the program's path.

The assignments must come first, with a command after them: an assignment after the command
name is an argument (`python TZ=UTC`), `env X=1 cmd` runs `env`, `export X=1` is a builtin, and
a lone assignment (`TZ=UTC`) runs nothing; each stays what it was.
"""

from __future__ import annotations

import re
from types import MappingProxyType

__all__ = ["HARMLESS", "harmless_value", "split_assignments"]

_LOCALE = "a locale name: how text, dates and numbers are shown and sorted"

# Why each name cannot widen a grant: what a program does with it.
HARMLESS = MappingProxyType(
    {
        "TZ": "the time zone dates are shown in (a zone under the system's zoneinfo)",
        "LANG": _LOCALE,
        "LANGUAGE": "the languages of messages, in order of preference",
        "LC_ALL": _LOCALE,
        "LC_CTYPE": _LOCALE,
        "LC_COLLATE": _LOCALE,
        "LC_MESSAGES": _LOCALE,
        "LC_NUMERIC": _LOCALE,
        "LC_TIME": _LOCALE,
        "LC_MONETARY": _LOCALE,
        "LC_PAPER": _LOCALE,
        "LC_NAME": _LOCALE,
        "LC_ADDRESS": _LOCALE,
        "LC_TELEPHONE": _LOCALE,
        "LC_MEASUREMENT": _LOCALE,
        "LC_IDENTIFICATION": _LOCALE,
        "NO_COLOR": "turns colour off in the output",
        "FORCE_COLOR": "turns colour on in the output",
        "CLICOLOR": "turns colour on or off in the output",
        "CLICOLOR_FORCE": "turns colour on in the output",
        "COLORTERM": "says the terminal shows colours",
        "TERM": "the terminal type (an entry of the system's terminfo)",
        "COLUMNS": "the width of the output",
        "LINES": "the height of the output",
        "CI": "says the command runs unattended (no prompts, plain output)",
        "PYTHONUNBUFFERED": "Python writes its output unbuffered",
        "PYTHONDONTWRITEBYTECODE": "Python writes no .pyc files",
        "PYTHONHASHSEED": "the seed of Python's string hashing",
        "PYTHONFAULTHANDLER": "Python prints a traceback on a crash",
        "PYTHONUTF8": "Python's UTF-8 mode",
        "PYTHONNOUSERSITE": "Python leaves the user's site-packages out (less code, not more)",
        "PYTHONSAFEPATH": "Python leaves the script's directory off sys.path (less code)",
        "NODE_ENV": "the mode a Node program runs in (development, test, production)",
        "RUST_BACKTRACE": "a Rust program prints a backtrace when it panics",
        "RUST_LOG": "which log messages a Rust program prints",
        "RUST_TEST_THREADS": "how many threads Rust tests run on",
        "CARGO_TERM_COLOR": "colour in cargo's output",
        "CARGO_INCREMENTAL": "whether cargo compiles incrementally",
        "CGO_ENABLED": "whether Go builds with cgo (the C compiler the build would use anyway)",
        "SOURCE_DATE_EPOCH": "the timestamp reproducible builds write",
    }
)

# An assignment bash reads as one: a name, `=`, an unquoted value of plain characters.
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_.,:+@%=/-]*)")
_PLAIN = re.compile(r"[A-Za-z0-9_.,:+@%=-]*")
_ZONE = re.compile(r"[A-Za-z0-9_.,:+@%=-]+(?:/[A-Za-z0-9_.,:+@%=-]+)*")
_BLANKS = " \t"


def harmless_value(name: str, value: str) -> bool:
    """Whether `value` is a plain word `name` may hold (see the module docstring)."""
    if ".." in value or value.startswith("=") or ":=" in value:
        # zsh (the user's own shell, where a host runs the line itself) expands `=cmd` to a
        # program's path at the start of a value and after each `:`.
        return False
    if name == "TZ":
        return value == "" or (_ZONE.fullmatch(value) is not None and not value.startswith(":"))
    return _PLAIN.fullmatch(value) is not None


def split_assignments(command: str) -> tuple[tuple[str, ...], str] | None:
    """The harmless assignments `command` starts with, as written, and the rest of the line
    from its first other word; None when it starts with none, with one that is not harmless,
    or has nothing after them."""
    found: list[str] = []
    i = len(command) - len(command.lstrip(_BLANKS))
    while (match := _ASSIGNMENT.match(command, i)) is not None:
        end = match.end()
        if end == len(command) or command[end] not in _BLANKS:
            # What follows the value is not a blank: a character the value may not hold
            # (`$`, a quote, `;`, a newline), or the end of a lone assignment.
            return None
        name, value = match.groups()
        if name not in HARMLESS or not harmless_value(name, value):
            return None
        found.append(match.group())
        i = end + len(command[end:]) - len(command[end:].lstrip(_BLANKS))
    rest = command[i:]
    if not found or not rest:
        return None
    return tuple(found), rest
