"""The table's verdict on a command (`classify`), and how many levels a simple command's key can
have (`command_depth`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.git import (
    _GIT_RUNS,
    _GIT_SIMPLE,
    _git,
    _git_core_builtin,
)
from codecoder.permissions.programs.launcher_rule import _unknown
from codecoder.permissions.programs.table import (
    DEPTHS,
    PROGRAMS,
    WORKSPACE_CODE,
    canonical_name,
)


def classify(argv: Sequence[str], search_path: str | None = None) -> Form:
    """The table's verdict on `argv` (a program and literal arguments).

    `search_path` is the PATH the launcher rule looks bare names up in (default: this process's).
    """
    program = argv[0]
    name = canonical_name(program)
    rule = PROGRAMS.get(name)
    path = os.environ.get("PATH", "") if search_path is None else search_path
    if rule is None:
        git_builtin = _git_core_builtin(program)
        if git_builtin is not None:
            # /usr/lib/git-core/git-push is `git push`, with the same forms and options.
            form = _git("git", (git_builtin, *argv[1:]), path)
            return Form(form.compound, (), form.covers)
        return _unknown(program, argv[1:], path)
    form = rule(program, argv[1:], path)
    code = WORKSPACE_CODE.get(name)
    if form.compound is None and code:
        return Form(None, form.levels, form.covers, code)
    return form


def command_depth(program: str, levels: Sequence[str]) -> int | str:
    """How many levels after `program` a simple command's key can have, or why a grant naming
    `levels` can never match (a git subcommand that is never simple)."""
    name = canonical_name(program)
    if name == "git" and levels:
        sub = levels[0]
        if sub in _GIT_RUNS:
            return f"git {sub} {_GIT_RUNS[sub]}: it is always compound"
        if sub not in _GIT_SIMPLE:
            return (
                f"git {sub} is not a git builtin: an alias or an external git-{sub} is always "
                "compound"
            )
    return DEPTHS.get(name, 1)
