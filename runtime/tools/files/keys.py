"""The permission keys of the tools that change files (and of run_wasm): the workspace path,
or a move's two paths, each granted as exactly that path, and marked protected when it is one.

The question of write_file, edit_file and delete_file also offers wider entries for a file:
its directory (`edit_file:src/report/**`, where the file is not at the top) and any file in
the workspace (`edit_file:**`, `PermissionKey.widest`, for the project only). Writing and
editing are one grant there: `write_file:**` and `edit_file:**` are recorded together (each can
rewrite any file the other can, so asking twice told the human nothing). No
entry covers a protected path, however wide: such a key is marked `protected`, which the
engine never looks up in an allowlist and never grants beyond Once (foundation.protected,
permissions.chain). A move keeps its one narrow entry: a directory it carries may
hold what no wide grant should move unseen.
"""

from __future__ import annotations

import dataclasses

from codecoder.foundation.protected import is_protected_path
from codecoder.permissions.coverage import NEVER_PROTECTED, path_covers
from codecoder.permissions.keys import (
    GrantLevel,
    KeyStyle,
    Permission,
    PermissionKey,
    escape_literal,
)
from codecoder.permissions.patterns import MOVE_SEPARATOR

ANYWHERE = "**"
# The tools whose widest grant is one: any file, written whole or edited.
_EDITS = ("write_file", "edit_file")


def _path_key(tool: str, path: str, *, subject: str | None = None) -> Permission:
    """A path key whose recorded grant is the path itself, escaped: a file named `**` or
    `a*b` is granted as that file only."""
    return Permission.ask(
        PermissionKey.named(
            tool,
            path,
            style=KeyStyle.PATH,
            subject=subject or path,
            protected=is_protected_path(path),
            levels=(GrantLevel(f"{tool}:{_literal(path)}", f"only {path}"),),
        )
    )


def _write_key(tool: str, path: str) -> Permission:
    """A write tool's key for one file: the file itself, then its directory (escaped, so
    `a*/x.py` offers `a[*]/**`), then any file in the workspace (`widest`)."""
    key = _path_key(tool, path).key
    assert key is not None
    directory = path.rpartition("/")[0]
    levels = key.levels
    if directory:
        levels += (_level(tool, f"{_literal(directory)}/{ANYWHERE}"),)
    widest = _level(tool, ANYWHERE)
    if tool in _EDITS:
        others = tuple(f"{other}:{ANYWHERE}" for other in _EDITS if other != tool)
        covers = (
            f"any file in this workspace, written or edited ({' and '.join(_EDITS)}), at any "
            f"depth; {NEVER_PROTECTED}"
        )
        widest = GrantLevel(widest.entry, covers, others)
    return Permission.ask(dataclasses.replace(key, levels=levels, widest=widest))


def _level(tool: str, action: str) -> GrantLevel:
    return GrantLevel(f"{tool}:{action}", path_covers(action))


def _literal(path: str) -> str:
    """`path` as a pattern matching only itself; a ` -> ` in it, which would make the entry a
    move's, escaped too (` -[>] `)."""
    return escape_literal(path).replace(MOVE_SEPARATOR, " -[>] ")


def _move_key(tool: str, source: str, destination: str) -> Permission:
    """A move is keyed by both paths: a grant must cover the source and the destination, and
    a deny rule for either refuses it (`move_file:secrets/**` stops moving a secret out)."""
    pair = f"{source}{MOVE_SEPARATOR}{destination}"
    literal = MOVE_SEPARATOR.join(_literal(path) for path in (source, destination))
    return Permission.ask(
        PermissionKey.named(
            tool,
            pair,
            style=KeyStyle.PATH,
            subject=pair,
            protected=is_protected_path(source) or is_protected_path(destination),
            levels=(GrantLevel(f"{tool}:{literal}", f"only moving {source} to {destination}"),),
            paths=(source, destination),
        )
    )
