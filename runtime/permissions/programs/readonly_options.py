"""How the read-only table reads a command's options: an allowlist, parsed as getopt would.

The read-only table (`readonly`) names, for each program, every option its read-only forms may
use and what each takes. Anything else, whatever it is, makes the form not read-only: an option
that writes or runs something (`sort -o`, `git log --output`, `rg --pre`) is simply not in the
list, so no spelling of it can pass. The parser accepts what getopt and git's parse-options
accept and nothing more, and where it is unsure it refuses:

* `--name` and `--name=value`, exactly as listed: an abbreviation (`--out` for `--output`),
  which GNU getopt would expand, is not in the list, so it is refused;
* `-x`, `-xVALUE`, `-x VALUE` and bundles (`-la`, `-n5`): every letter of a bundle must be
  listed; a letter that takes a value takes the rest of the word, or the next word;
* `-NUMBER` where the program reads it as a count (`head -20`, `git log -5`);
* `--` ends the options; a lone `-` is an operand (standard input).

What an option takes (`Takes`): nothing, a number, any value (a pattern, a format), a file it
reads (fine for a read-only command, which may read anything the sandbox shows, but not for an
output filter on the host, which must read nothing but its input), an optional value that only
an `=` or an attached value gives (`--color`, `--color=never`, `-M50`), or git's "last argument
default" (`git branch --merged [<commit>]`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Options", "Parsed", "Takes", "parse_options"]


class Takes(enum.Enum):
    """What an option of the read-only table takes."""

    NOTHING = "nothing"
    NUMBER = "number"  # `-n 20`, `-c 1K`, `-n +5`
    VALUE = "value"  # any word: a pattern, a format, a field list
    FILE = "file"  # a file it reads: not for output filters
    OPTIONAL = "optional"  # only `--opt=value` or an attached `-xVALUE`
    NEXT_IF_ANY = "next-if-any"  # git's PARSE_OPT_LASTARG_DEFAULT: the next word, if there is one


_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]+)?[A-Za-z]{0,3}")
_DIGITS = re.compile(r"-[0-9]+")


@dataclass(frozen=True, slots=True)
class Options:
    """The options a program's read-only forms may use (`flags`: option → what it takes).

    `digits`: `-NUMBER` is a count (`head -20`). `permute`: options may follow operands, as
    GNU getopt allows (find, for one, does not: its options come first).
    """

    flags: Mapping[str, Takes]
    digits: bool = False
    permute: bool = True

    def __or__(self, other: Mapping[str, Takes]) -> Options:
        return Options({**self.flags, **other}, self.digits, self.permute)


@dataclass(frozen=True, slots=True)
class Parsed:
    """A command's arguments as the allowlist read them: each option with its value (None for
    one that takes nothing), and the operands in order."""

    options: tuple[tuple[str, str | None], ...]
    operands: tuple[str, ...]

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.options if name in names and value is not None]

    def files_by_option(self, flags: Mapping[str, Takes]) -> list[str]:
        """The options given that name a file to read (`grep -f FILE`, `wc --files0-from`)."""
        return [name for name, _ in self.options if flags.get(name) is Takes.FILE]


class NotReadOnly(Exception):
    """Why a form is not read-only (internal to the read-only table)."""


def parse_options(program: str, args: Sequence[str], options: Options) -> Parsed:
    """Read `args` against the allowlist; raises NotReadOnly for anything it does not list."""
    flags = options.flags
    found: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            operands.extend(args[i:])
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
            if not options.permute:
                operands.extend(args[i:])
                break
            continue
        if options.digits and _DIGITS.fullmatch(word):
            found.append(("-NUMBER", word[1:]))
            continue
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            takes = flags.get(name)
            if takes is None:
                raise NotReadOnly(f"{program} {name}: not an option of its read-only forms")
            if equals:
                if takes is Takes.NOTHING:
                    raise NotReadOnly(f"{program} {name} takes no value")
                _check_value(program, name, takes, value)
                found.append((name, value))
            elif takes in (Takes.NUMBER, Takes.VALUE, Takes.FILE):
                if i >= len(args):
                    raise NotReadOnly(f"{program} {name}: its value is missing")
                _check_value(program, name, takes, args[i])
                found.append((name, args[i]))
                i += 1
            elif takes is Takes.NEXT_IF_ANY and i < len(args) and not args[i].startswith("-"):
                found.append((name, args[i]))
                i += 1
            else:
                found.append((name, None))
            continue
        i = _short_bundle(program, word, args, i, flags, found)
    return Parsed(tuple(found), tuple(operands))


def _short_bundle(
    program: str,
    word: str,
    args: Sequence[str],
    i: int,
    flags: Mapping[str, Takes],
    found: list[tuple[str, str | None]],
) -> int:
    """Read one `-abc` word (at `args[i - 1]`); returns the index of the next word to read."""
    if word in flags:  # a long option spelled with one dash (`-vv`, find's `-name`)
        takes = flags[word]
        if takes in (Takes.NUMBER, Takes.VALUE, Takes.FILE, Takes.NEXT_IF_ANY):
            if i < len(args) and (takes is not Takes.NEXT_IF_ANY or not args[i].startswith("-")):
                _check_value(program, word, takes, args[i])
                found.append((word, args[i]))
                return i + 1
            if takes is not Takes.NEXT_IF_ANY:
                raise NotReadOnly(f"{program} {word}: its value is missing")
        found.append((word, None))
        return i
    for at in range(1, len(word)):
        name = "-" + word[at]
        letter = flags.get(name)
        if letter is None:
            where = f" (in {word})" if word != name else ""
            raise NotReadOnly(f"{program} {name}{where}: not an option of its read-only forms")
        takes = letter
        if takes is Takes.NOTHING:
            found.append((name, None))
            continue
        rest = word[at + 1 :]
        if rest:
            _check_value(program, name, takes, rest)
            found.append((name, rest))
            return i
        if takes in (Takes.NUMBER, Takes.VALUE, Takes.FILE) or (
            takes is Takes.NEXT_IF_ANY and i < len(args) and not args[i].startswith("-")
        ):
            if i >= len(args):
                raise NotReadOnly(f"{program} {name}: its value is missing")
            _check_value(program, name, takes, args[i])
            found.append((name, args[i]))
            return i + 1
        found.append((name, None))
    return i


def _check_value(program: str, name: str, takes: Takes, value: str) -> None:
    if takes is Takes.NUMBER and not _NUMBER.fullmatch(value):
        raise NotReadOnly(f"{program} {name} {value!r}: not a number")


def flags(spec: str, takes: Takes = Takes.NOTHING) -> dict[str, Takes]:
    """`flags("-a -l --all")` → each option taking `takes`: the table is written with this."""
    return dict.fromkeys(spec.split(), takes)
