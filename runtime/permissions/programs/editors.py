"""The forms of editors and pagers.

Editors (vim, ex, emacs, nano, …) are simple only with plain file operands: any option or
`+cmd` can run commands. `less`/`more` likewise for `+cmd` and log files.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import has_option


def _editor(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word.startswith(("-", "+")):
            return Form(f"{program} {word}: an editor given commands or options can run anything")
    return Form(None, (), f"every simple `{program} …` command that opens files")


def _pager(program: str, args: Sequence[str], search_path: str) -> Form:
    for word in args:
        if word.startswith("+") or has_option((word,), ("-o", "-O", "--log-file", "--LOG-FILE")):
            return Form(f"{program} {word}: runs pager commands or writes a log file")
    return Form(None, (), f"every simple `{program} …` command")
