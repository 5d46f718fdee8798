"""The forms of C and C++ compilers (gcc, clang): options that run a wrapper, a plugin or another
linker, and options read from a file (`@file`), are compound.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import has_option

_COMPILER_RUNS = ("-wrapper", "-B", "-fplugin", "-specs", "--specs", "-fuse-ld", "--ld-path")


def _compiler(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word.startswith("@"):
            return Form(f"{program} {word}: options from a file the table cannot read")
    found = has_option(args, _COMPILER_RUNS, "DUIoLlWfmOgxu")
    if found is not None:
        return Form(f"{program} {found}: runs the programs or plugins it is given")
    return Form(None, (), f"every simple `{program} …` command")
