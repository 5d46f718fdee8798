"""The launcher rule: how a command whose program the table does not know is judged.

It is compound when any of its operands or option values (or a word inside one) could name a
program (a word containing `/`, or a bare name found on PATH) or looks like code; otherwise it is
simple, keyed by its first argument when that is a plain word (see the package docstring for why).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from codecoder.runtime.permissions.programs.form import Form

_CODE_LIKE = re.compile(r"[(){}<>;|&$`!\n]")
_TOKEN_SPLIT = re.compile(r"[\s=,;:&|()<>'\"`$!@]+")
_PLAIN_LEVEL = re.compile(r"[a-z][a-z0-9._-]*")


def _unknown(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command, with any arguments"
    for word in args:
        if word.startswith("-"):
            value = word.split("=", 1)[1] if "=" in word else None
            if value is None:
                continue
            word = value
        if _CODE_LIKE.search(word):
            return Form(f"{program} is not in the program table and {word!r} looks like code")
        for token in _TOKEN_SPLIT.split(word):
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
