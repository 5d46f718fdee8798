"""sqlite3's forms.

sqlite3 with SQL or dot-commands is compound unless `-safe` is given: `.shell`, `.system`,
`load_extension()`, `edit()`, `ATTACH` and `.output` make reading SQL for danger a losing
game, and `-safe` is sqlite's own switch that refuses all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form

_SQLITE_FLAGS = frozenset(
    {
        *("-append", "-ascii", "-bail", "-batch", "-box", "-column", "-csv", "-echo"),
        *("-header", "-noheader", "-html", "-interactive", "-json", "-line", "-list"),
        *("-markdown", "-memtrace", "-nofollow", "-quote", "-readonly", "-safe", "-stats"),
        *("-table", "-version", "-help"),
    }
)
_SQLITE_VALUES = frozenset({"-separator", "-newline", "-nullvalue", "-maxsize", "-mmap", "-vfs"})


def _sqlite(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command in safe mode"
    operands: list[str] = []
    safe = False
    i = 0
    while i < len(args):
        word = args[i]
        option = "-" + word.lstrip("-") if word.startswith("-") else None
        if option is None or word == "-":
            operands.append(word)
        elif option in _SQLITE_VALUES:
            i += 1
        elif option in _SQLITE_FLAGS:
            safe = safe or option == "-safe"
        else:
            return Form(f"{program} {word}: runs commands, reads them from a file, or is unknown")
        i += 1
    if len(operands) > 1 and not safe:
        return Form(
            f"{program}: SQL and dot-commands can run programs (.shell, .system, "
            "load_extension(), edit()) and write files; only -safe mode keeps them out"
        )
    return Form(None, (), covers)
