"""What deny rules see of a command (`deny_view`), and whether bash could expand a word into
file names (`is_glob`).
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.keys import DenyView
from codecoder.permissions.programs.form import ANY
from codecoder.permissions.programs.git import _GIT_KNOWN, _git_core_builtin, git_subcommand
from codecoder.permissions.programs.table import canonical_name


def deny_view(argv: Sequence[str], start: int = 0) -> DenyView:
    """What deny rules see of the command `argv[start:]` (argv lower-cased, `ANY` for words the
    parser could not read literally).

    A git-core binary is git with its subcommand first (`git-push origin` → `git`, `push
    origin`). The subcommand's place (git's after its global options, another program's first
    word that is not an option) holding `ANY`, or for git a word that is not a builtin (an
    alias, an external `git-foo`), makes `sub_any`: it could be the subcommand a rule names.
    """
    program = argv[start]
    git_builtin = _git_core_builtin(program) if program != ANY else None
    if git_builtin is not None:
        return DenyView("git", (git_builtin, *argv[start + 1 :]))
    name = ANY if program == ANY else canonical_name(program)
    words = argv[start + 1 :]
    if name == "git":
        found = git_subcommand(words)
        sub_any = found is not None and (found[0] == ANY or found[0] not in _GIT_KNOWN)
    else:
        first = next((word for word in words if not word.startswith("-")), None)
        sub_any = first == ANY or (first is not None and is_glob(first))
    glob = name != ANY and is_glob(name)
    return DenyView(name, tuple(argv), start + 1, sub_any, glob)


def is_glob(word: str) -> bool:
    """Whether bash could expand `word` into file names (it has `*`, `?` or `[`)."""
    return any(char in word for char in "*?[")
