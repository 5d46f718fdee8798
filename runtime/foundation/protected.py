"""Protected paths: the runtime's own trust files and git's internals (SPEC §4, §8).

`codecoder.json` and `.codecoder/` at the workspace root hold what the runtime trusts. Any
path component that git reads as a repository or as submodule configuration holds hooks,
config and programs that a host-side git runs later: `.git` (a directory, a `gitdir:` file or a
symlink, at any depth, because git runs the hooks and `core.fsmonitor` of a nested repository
too) and `.gitmodules` (at any depth). No grant may cover a write to them beyond Once, and no
sandbox may create, write, rename onto or link them; otherwise a sandboxed tool could grant
itself trust, or plant a program the host runs.

The agents' own settings (`AGENT_SETTINGS`: `.claude/`, `.gemini/`, `.codex/`, `.mcp.json`,
`.vscode/`) are protected paths too: one write there (a hook removed, a tool allowed, a task
that runs when the folder is opened) takes codecoder out of the loop of the agent that reads
them. They are protected at every depth, for the write tools, for commands and in every
sandbox (existing ones are kept read-only), since an agent reads them where it is started, and
agents are started in subdirectories (a package of a monorepo); but not beneath a
`node_modules` directory, where dependencies ship their own (`node_modules/*/.vscode`), no
agent is started, and `rm -rf node_modules` must work. As entries no sandbox may create, only
at the top, like `codecoder.json` (`is_protected_entry`): a generator's new package
(`npm create vite app` makes `app/.vscode/`) is ordinary work; the next call finds it and
keeps it read-only. docs/decisions/protected-paths.md says why.

This module is the one definition of them, used by the keys of the write tools, by the command
keyer, and by the sandboxes (docker mounts, wasm preopens, the checks of what a sandbox left
behind):

* `is_protected_path(relpath)`: a workspace-relative path is protected, or lies under one;
* `is_protected_entry(relpath)`: the entry at a path is itself protected (what no sandbox may
  create);
* `is_protected_root(relpath)`: the entry at a path is where a protected path begins (its
  parent is not protected): what a sandbox keeps read-only as a whole, at every depth;
* `is_git_name(component)`: one path component is a name git treats as `.git`/`.gitmodules`;
* `mentions_protected_path(text)`: free text (a command line) names one;
* `mentions_runtime_directory(text)`: free text names the runtime's state directory or the
  user's configuration directory (`runtime_directories`), which hold trust records, audit
  logs and the user's own rules: a command naming them is protected like a protected path;
* `reaches_protected(words, workspace)`: a host command's words lead there once symlinks are
  followed (`g/config` where a sandbox made `g` a link to `.git`), checked when a command on
  the host is keyed, so a link planted in the workspace cannot carry a write past the rule.

Names are compared the way the most lenient file system a workspace may sit on would compare
them, so that `.GIT`, `.git.` or `.g\u200cit` (case-insensitive, NTFS and HFS+ spellings that
such file systems, and git itself, treat as `.git`) and the NTFS short names `GIT~1` /
`GITMOD~1` are protected too. A false positive costs a Once prompt; a false negative is a
planted hook.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from codecoder.foundation.state import config_directory, state_directory

__all__ = [
    "AGENT_SETTINGS",
    "GIT_NAMES",
    "PROTECTED_NAMES",
    "TOP_LEVEL_NAMES",
    "is_git_name",
    "is_protected_entry",
    "is_protected_path",
    "is_protected_root",
    "mentions_protected_path",
    "mentions_runtime_directory",
    "reaches_protected",
    "runtime_directories",
]

# Protected at the workspace root only: the runtime reads them there and nowhere else.
TOP_LEVEL_NAMES: tuple[str, ...] = ("codecoder.json", ".codecoder")
# Protected at every depth.
GIT_NAMES: tuple[str, ...] = (".git", ".gitmodules")
# Every protected name that can appear at the root, for those that mount or preopen it.
PROTECTED_NAMES: tuple[str, ...] = (*TOP_LEVEL_NAMES, *GIT_NAMES)
# The agents' own settings at the workspace root (Claude Code, Gemini CLI, Codex, MCP clients,
# VS Code's settings and tasks): one write there can take codecoder out of the loop or run a
# program when the folder is opened. SPEC §8 makes them protected paths.
AGENT_SETTINGS: tuple[str, ...] = (".claude", ".gemini", ".codex", ".mcp.json", ".vscode")

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


# Where dependencies are installed with the settings they ship: agents' settings there are not
# the project's.
_DEPENDENCIES: Final = "node_modules"


def _is_agent_settings(parts: list[str], index: int) -> bool:
    """Whether `parts[index]` names an agent's settings of the project (not of a dependency)."""
    return _normalized(parts[index]) in AGENT_SETTINGS and not any(
        _normalized(p) == _DEPENDENCIES for p in parts[:index]
    )


def is_protected_path(relpath: str) -> bool:
    """Whether a canonical workspace-relative POSIX path is a protected path or lies under one
    (an agent's settings at any depth among them, but beneath node_modules)."""
    parts = relpath.split("/")
    return _normalized(parts[0]) in TOP_LEVEL_NAMES or any(
        is_git_name(p) or _is_agent_settings(parts, i) for i, p in enumerate(parts)
    )


def is_protected_root(relpath: str) -> bool:
    """Whether the entry at a canonical workspace-relative path is where a protected path begins:
    protected itself, its parent not (`.git`, `pkg/.claude`, `codecoder.json`; not
    `.git/hooks`)."""
    parts = relpath.split("/")
    if len(parts) == 1:
        return is_protected_path(relpath)
    return is_protected_path(relpath) and not is_protected_path("/".join(parts[:-1]))


def is_protected_entry(relpath: str) -> bool:
    """Whether the entry at a canonical workspace-relative path is itself a protected path:
    `codecoder.json`, `.codecoder` and the agents' settings at the top, `.git` or `.gitmodules`
    at any depth. This is what no sandbox may create or move (what lies inside one is covered
    as a whole)."""
    parts = relpath.split("/")
    return is_git_name(parts[-1]) or (
        len(parts) == 1 and _normalized(parts[0]) in (*TOP_LEVEL_NAMES, *AGENT_SETTINGS)
    )


_MENTION = re.compile(
    # A path component: not preceded or followed by a character that could continue the name.
    # Case-insensitive because `.GIT/hooks` is `.git/hooks` on macOS and Windows file systems.
    r"(?<![A-Za-z0-9_.-])(?:"
    + "|".join(re.escape(n) for n in (*PROTECTED_NAMES, *AGENT_SETTINGS))
    + r"|(?:git|gitmod)~[0-9]+)(?![A-Za-z0-9_.-])",
    re.IGNORECASE,
)


def mentions_protected_path(text: str) -> bool:
    """Whether free text (a command line) names a protected path as a path component (an
    agent's settings included).

    `.gitignore`, `.github/` and `mycodecoder.jsonx` do not count; `.git` itself does, not only
    `.git/…`: copying a directory onto it plants hooks just as well. Invisible characters are
    removed first, so `.g\u200cit` counts too.
    """
    return _MENTION.search("".join(c for c in text if c not in _HFS_IGNORED)) is not None


# The runtime's directories as commands usually spell them (`~/.config/codecoder`,
# `$XDG_STATE_HOME/codecoder`), besides their absolute paths.
_RUNTIME_MENTION = re.compile(
    r"(?:\.config|\.local/state|XDG_CONFIG_HOME\}?|XDG_STATE_HOME\}?)/+codecoder(?![A-Za-z0-9_.-])",
    re.IGNORECASE,
)


def runtime_directories() -> tuple[str, ...]:
    """The runtime's state directory (trust records, audit logs, quarantine) and the user's
    configuration directory (the user's own rules), resolved: no tool may change them under a
    grant beyond Once, or a session grant for `cp` could trust a codecoder.json."""
    return _runtime_directories(
        os.environ.get("XDG_STATE_HOME", ""),
        os.environ.get("XDG_CONFIG_HOME", ""),
        os.environ.get("HOME", ""),
    )


@functools.lru_cache(maxsize=8)
def _runtime_directories(state: str, config: str, home: str) -> tuple[str, ...]:
    found: list[str] = []
    for directory in (state_directory(), config_directory()):
        for spelling in (str(directory), os.path.realpath(directory)):
            if spelling not in found:
                found.append(spelling)
    return tuple(found)


def mentions_runtime_directory(text: str) -> bool:
    """Whether free text names the runtime's state or the user's configuration directory."""
    if _RUNTIME_MENTION.search(text):
        return True
    return any(directory in text for directory in runtime_directories())


def reaches_protected(
    words: Iterable[str], workspace: Path, directory: Path | None = None
) -> str | None:
    """The first of `words` (a host command's arguments, with option values after `=` or a
    short option's letter) that names, once every symlink in it is followed, a protected path
    of `workspace` or a place in a runtime directory; None if none does. Said as
    `WORD (leads to WHERE)` for the prompt. Relative words lead from `directory`, where the
    command runs (the workspace itself by default).

    Only words whose first component exists are followed (what does not exist cannot be a
    link), so a command costs about one lstat per word.
    """
    root = str(workspace)
    base = str(directory) if directory is not None else root
    for word in words:
        for text in _path_candidates(word):
            where = _protected_target(text, root, base)
            if where is not None:
                return f"{text} (leads to {where})"
    return None


def _path_candidates(word: str) -> Iterator[str]:
    if word and not word.startswith("-"):
        yield word
        return
    if "=" in word:
        yield word.split("=", 1)[1]
    elif len(word) > 2 and not word.startswith("--"):
        yield word[2:]  # `-oFILE`


def _protected_target(text: str, root: str, base: str) -> str | None:
    if not text or "\x00" in text:
        return None
    if text.startswith("~"):
        text = os.path.expanduser(text)  # a compound command's words: bash expands these
    path = text if text.startswith("/") else f"{base}/{text}"
    if not text.startswith("/") and not os.path.lexists(f"{base}/{text.split('/', 1)[0]}"):
        return None
    real = os.path.realpath(path)
    if real == root or real.startswith(root + "/"):
        relative = os.path.relpath(real, root)
        return relative if relative != "." and is_protected_path(relative) else None
    for directory in runtime_directories():
        if real == directory or real.startswith(directory + "/"):
            return real
    return None
