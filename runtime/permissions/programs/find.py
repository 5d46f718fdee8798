"""find's forms: the actions that run a command, delete or write files are compound."""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form

_FIND_RUNS = (
    *("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf"),
    "-fls",
)


def _find(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word in _FIND_RUNS:
            return Form(f"{program} {word}: runs a command, deletes or writes files")
    return Form(None, (), f"every simple `{program} …` command that only lists")
