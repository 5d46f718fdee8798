"""The launcher rule: how a command whose program the table does not know is judged.

It is compound when any of its operands or option values (or a word inside one) could name a
program (a word containing `/`, or a bare name found on PATH) or looks like code; otherwise it is
simple, keyed by its first argument when that is a plain word (see the package docstring for why).

Every spelling an option parser accepts for a value is judged (`_values`): `--opt=VALUE`, and a
short option's value attached after any number of bundled letters (`-HVALUE`, `-vxHVALUE`:
each tail of the word). Each value is judged as written and again after a second quote removal
(`to''uch`, `t\\ouch`): an unknown program that hands a value to a shell gets that shell's
reading of it, so a name split by quotes inside a value is still the name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from codecoder.permissions.programs.form import Form

_CODE_LIKE = re.compile(r"[(){}<>;|&$`!\n]")
_TOKEN_SPLIT = re.compile(r"[\s=,;:&|()<>'\"`$!@]+")
_PLAIN_LEVEL = re.compile(r"[a-z][a-z0-9._-]*")


def _unknown(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command, with any arguments"
    for word in args:
        for value in _values(word):
            if _CODE_LIKE.search(value):
                return Form(f"{program} is not in the program table and {value!r} looks like code")
            for token in _TOKEN_SPLIT.split(value):
                if token and _names_program(token, search_path):
                    return Form(
                        f"{program} is not in the program table and {token!r} names a program "
                        "it could run (the launcher rule)"
                    )
    first = args[0] if args else ""
    levels = (first,) if _PLAIN_LEVEL.fullmatch(first) else ()
    return Form(
        None, levels, covers, f"whatever {program} reads there (the table does not know it)"
    )


_QUOTES = re.compile(r"[\\'\"]")


def _values(word: str) -> list[str]:
    """What a program could take from `word` as data it might run: an operand itself; the
    value of `--opt=VALUE`; every tail of a short-option word (`-HVALUE`, with any letters
    bundled before it). Each also with its quotes and backslashes removed, as a shell given it
    would read it."""
    if word == "-" or not word.startswith("-"):
        found = [word]
    elif word.startswith("--"):
        found = [word.split("=", 1)[1]] if "=" in word else []
    else:
        found = [word[k:] for k in range(2, len(word))]
    return [
        reading for value in found for reading in dict.fromkeys((value, _QUOTES.sub("", value)))
    ]


def _names_program(token: str, search_path: str) -> bool:
    if "/" in token:
        return True  # a path may name an executable; without a file system to ask, it does
    if token in (".", ".."):
        return False
    for directory in search_path.split(os.pathsep):
        if not directory or not directory.startswith("/"):
            return True  # a relative PATH entry finds names in whatever directory it runs in
        candidate = os.path.join(directory, token)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return True
    return False
