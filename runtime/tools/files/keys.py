"""The permission keys of the tools that change files (and of run_wasm): the workspace path,
or a move's two paths, each granted as exactly that path, and marked protected when it is one."""

from __future__ import annotations

from codecoder.runtime.kernel.protected import is_protected_path
from codecoder.runtime.permissions.keys import (
    GrantLevel,
    KeyStyle,
    Permission,
    PermissionKey,
    escape_literal,
)
from codecoder.runtime.permissions.patterns import MOVE_SEPARATOR


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
            levels=(GrantLevel(f"{tool}:{escape_literal(path)}", f"only {path}"),),
        )
    )


def _move_key(tool: str, source: str, destination: str) -> Permission:
    """A move is keyed by both paths: a grant must cover the source and the destination, and
    a deny rule for either refuses it (`move_file:secrets/**` stops moving a secret out)."""
    pair = f"{source}{MOVE_SEPARATOR}{destination}"
    literal = MOVE_SEPARATOR.join(
        escape_literal(path).replace(MOVE_SEPARATOR, " -[>] ") for path in (source, destination)
    )
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
