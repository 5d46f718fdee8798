"""Protected paths: the runtime's own trust files and git's internals (SPEC §4).

`codecoder.json` and `.codecoder/` hold what the runtime trusts; `.git/` holds hooks and config
that the host's git runs later. No grant may cover a write to them beyond Once, and no sandbox
mounts them writable; otherwise a sandboxed tool could grant itself trust, or plant a hook.
This module is the one list of them.
"""

from __future__ import annotations

import re

PROTECTED_NAMES: tuple[str, ...] = ("codecoder.json", ".codecoder", ".git")
# Protected wherever they are: git runs a nested repository's hooks and config (`.git` as a
# directory, a `gitdir:` file or a symlink), and follows a nested `.gitmodules`.
NESTED_PROTECTED_NAMES: tuple[str, ...] = (".git", ".gitmodules")

_MENTION = re.compile(
    # A path component: not preceded or followed by a character that could continue the name.
    # Case-insensitive because `.GIT/hooks` is `.git/hooks` on macOS and Windows file systems.
    r"(?<![A-Za-z0-9_.-])(?:" + "|".join(re.escape(n) for n in PROTECTED_NAMES) + r")"
    r"(?![A-Za-z0-9_.-])",
    re.IGNORECASE,
)


def is_protected_path(relpath: str) -> bool:
    """Whether a canonical workspace-relative path is a protected path or lies under one.

    Any `.git` component counts, because git runs the hooks of a nested repository too.
    """
    parts = relpath.casefold().split("/")
    return parts[0] in PROTECTED_NAMES or ".git" in parts


def is_protected_entry(relpath: str) -> bool:
    """Whether the entry at a canonical workspace-relative path is itself a protected path:
    `codecoder.json` or `.codecoder` at the top, `.git` or `.gitmodules` at any depth.

    Case-folded, like `is_protected_path`. This is what no sandbox may create (or move).
    """
    parts = relpath.casefold().split("/")
    return parts[-1] in NESTED_PROTECTED_NAMES or (len(parts) == 1 and parts[0] in PROTECTED_NAMES)


def mentions_protected_path(text: str) -> bool:
    """Whether free text (a command line) names a protected path as a path component.

    `.gitignore`, `.github/` and `mycodecoder.jsonx` do not count; `.git` itself does, not only
    `.git/…`: copying a directory onto it plants hooks just as well.
    """
    return _MENTION.search(text) is not None
