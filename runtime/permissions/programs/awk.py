"""awk's forms, read from its options and its program.

awk is simple only when its program is in the arguments and has no `system`, `|`, `@load`/
`@include`, network file or `print > file`; `-f`, `-i`, `-l`, `-E`, `--profile`, `-W` are
compound (code from elsewhere, or files written that the arguments do not name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from codecoder.permissions.programs.form import Form

_AWK_VALUES = frozenset({"-F", "-v", "--field-separator", "--assign"})
_AWK_FLAGS = frozenset(
    {
        *("-b", "--characters-as-bytes", "-c", "--traditional", "-C", "--copyright", "-g"),
        *("-h", "--help", "-L", "--lint", "-M", "--bignum", "-n", "--non-decimal-data"),
        *("-N", "--use-lc-numeric", "-O", "--optimize", "-P", "--posix", "-r", "--re-interval"),
        *("-s", "--no-optimize", "-S", "--sandbox", "-t", "--lint-old", "-V", "--version"),
        "--csv",
    }
)
_AWK_PRINT = re.compile(r"\bprintf?\b")


def _awk(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command whose program only reads and prints"
    programs: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            operands.extend(args[i + 1 :])
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
        elif word in _AWK_VALUES and i + 1 < len(args):
            i += 1
        elif word[:2] in ("-F", "-v") or word.split("=", 1)[0] in _AWK_VALUES:
            pass
        elif word in ("-e", "--source") and i + 1 < len(args):
            programs.append(args[i + 1])
            i += 1
        elif word.startswith("--source="):
            programs.append(word.split("=", 1)[1])
        elif word not in _AWK_FLAGS:
            return Form(
                f"{program} {word}: loads, includes or runs code from elsewhere, writes a "
                "profile or dump, or is an option the table does not know"
            )
        i += 1
    if not programs:
        if not operands:
            return Form(None, (), covers)
        programs.append(operands[0])
    problem = awk_program_problem("\n".join(programs))
    if problem is not None:
        return Form(f"{program} program: {problem}")
    return Form(None, (), covers)


def awk_program_problem(text: str) -> str | None:
    """Why an awk program is not plain, or None: `system()`, pipes to or from commands,
    output redirected to a file, gawk's `@load`/`@include` and network files."""
    if "system" in text:
        return "system() runs a command"
    if "|" in text:
        return "a pipe runs a command (print | cmd, cmd | getline)"
    if "@" in text:
        return "@load and @include run code from elsewhere"
    if "/inet" in text:
        return "a network special file"
    for statement in re.split(r"[;{}\n]", text):
        match = _AWK_PRINT.search(statement)
        if match and ">" in statement[match.end() :]:
            return "print > file writes a file"
    return None
