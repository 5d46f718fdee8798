"""Protected paths: the runtime's own trust files and git's internals (SPEC §4, §8).

`codecoder.json` and `.codecoder/` at the workspace root hold what the runtime trusts. Any
path component that git reads as a repository or as submodule configuration holds hooks,
config and programs that a host-side git runs later: `.git` (a directory, a `gitdir:` file or a
symlink, at any depth, because git runs the hooks and `core.fsmonitor` of a nested repository
too) and `.gitmodules` (at any depth). No grant may cover a write to them beyond Once, and no
sandbox may create, write, rename onto or link them; otherwise a sandboxed tool could grant
itself trust, or plant a program the host runs.

This module is the one definition of them, used by the keys of the write tools, by the command
keyer, and by the sandboxes (docker mounts, wasm preopens, the checks of what a sandbox left
behind):

* `is_protected_path(relpath)`: a workspace-relative path is protected, or lies under one;
* `is_protected_entry(relpath)`: the entry at a path is itself protected (what no sandbox may
  create);
* `is_git_name(component)`: one path component is a name git treats as `.git`/`.gitmodules`;
* `mentions_protected_path(text)`: free text (a command line) names one.

Names are compared the way the most lenient file system a workspace may sit on would compare
them, so that `.GIT`, `.git.` or `.g\u200cit` (case-insensitive, NTFS and HFS+ spellings that
such file systems, and git itself, treat as `.git`) and the NTFS short names `GIT~1` /
`GITMOD~1` are protected too. A false positive costs a Once prompt; a false negative is a
planted hook.
"""

from __future__ import annotations

import re

__all__ = [
    "GIT_NAMES",
    "PROTECTED_NAMES",
    "TOP_LEVEL_NAMES",
    "is_git_name",
    "is_protected_entry",
    "is_protected_path",
    "mentions_protected_path",
]

# Protected at the workspace root only: the runtime reads them there and nowhere else.
TOP_LEVEL_NAMES: tuple[str, ...] = ("codecoder.json", ".codecoder")
# Protected at every depth.
GIT_NAMES: tuple[str, ...] = (".git", ".gitmodules")
# Every protected name that can appear at the root, for those that mount or preopen it.
PROTECTED_NAMES: tuple[str, ...] = (*TOP_LEVEL_NAMES, *GIT_NAMES)

# Code points HFS+ ignores when it compares names (git's is_hfs_dotgit list): `.g\u200cit`
# names the same directory as `.git` there.
_HFS_IGNORED = frozenset(
    "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e"
    "\u206f\ufeff"
)
_SHORT_NAME = re.compile(r"(git|gitmod)~[0-9]+")


def _normalized(component: str) -> str:
    """A name as a lenient file system compares it: case folded, HFS+ ignorables removed, an
    NTFS stream suffix (`:$DATA`) and trailing dots and spaces dropped."""
    name = "".join(c for c in component if c not in _HFS_IGNORED).casefold()
    return name.split(":", 1)[0].rstrip(". ")


def is_git_name(component: str) -> bool:
    """Whether one path component is `.git` or `.gitmodules` in any spelling a file system or
    git may take for it."""
    name = _normalized(component)
    return name in GIT_NAMES or _SHORT_NAME.fullmatch(name) is not None


def is_protected_path(relpath: str) -> bool:
    """Whether a canonical workspace-relative POSIX path is a protected path or lies under one."""
    parts = relpath.split("/")
    return _normalized(parts[0]) in TOP_LEVEL_NAMES or any(is_git_name(p) for p in parts)


def is_protected_entry(relpath: str) -> bool:
    """Whether the entry at a canonical workspace-relative path is itself a protected path:
    `codecoder.json` or `.codecoder` at the top, `.git` or `.gitmodules` at any depth. This is
    what no sandbox may create or move (what lies inside one is covered as a whole)."""
    parts = relpath.split("/")
    return is_git_name(parts[-1]) or (len(parts) == 1 and _normalized(parts[0]) in TOP_LEVEL_NAMES)


_MENTION = re.compile(
    # A path component: not preceded or followed by a character that could continue the name.
    # Case-insensitive because `.GIT/hooks` is `.git/hooks` on macOS and Windows file systems.
    r"(?<![A-Za-z0-9_.-])(?:"
    + "|".join(re.escape(n) for n in PROTECTED_NAMES)
    + r"|(?:git|gitmod)~[0-9]+)(?![A-Za-z0-9_.-])",
    re.IGNORECASE,
)


def mentions_protected_path(text: str) -> bool:
    """Whether free text (a command line) names a protected path as a path component.

    `.gitignore`, `.github/` and `mycodecoder.jsonx` do not count; `.git` itself does, not only
    `.git/…`: copying a directory onto it plants hooks just as well. Invisible characters are
    removed first, so `.g\u200cit` counts too.
    """
    return _MENTION.search("".join(c for c in text if c not in _HFS_IGNORED)) is not None
