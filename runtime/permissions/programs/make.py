"""make's forms: the target it is given is its level.

make runs the project's recipes (that is what a grant for make means, as for `npm test` or
`pytest`); recipes or makefiles from elsewhere (`-f`, `-C`, `-I`, `--eval`) and command-line
variables (`SHELL=…`, `CC=…`, which replace any recipe's commands) are compound.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import _options_and_operands, has_option

_MAKE_RUNS = (
    *("-f", "--file", "--makefile", "-C", "--directory", "--eval", "-E", "-I"),
    *("--include-dir",),
)
_MAKE_VALUES = "fCEIjlOW"


def _make(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command: any target of the project's makefile"
    found = has_option(args, _MAKE_RUNS, _MAKE_VALUES)
    if found is not None:
        return Form(f"{program} {found}: recipes or makefiles from outside the project's own")
    _, operands = _options_and_operands(args, ("-j", "-l", "-o", "-W", "--jobs", "--load-average"))
    for word in operands:
        if "=" in word:
            return Form(
                f"{program} {word}: a variable given on the command line can replace any "
                "recipe's commands (SHELL, CC, …)"
            )
    return Form(None, tuple(operands[:1]), covers)
