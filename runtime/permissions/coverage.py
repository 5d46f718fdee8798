"""What an allowlist entry covers, in words: what `codecoder allowlist list` says of each grant.

The words are the ones the question used when the grant was made (`GrantLevel.covers`: "only
`git status …` commands", "every simple `cp …` command, with any arguments", "any file under
src/report/ …"), found again from the entry; a pattern written by hand is described by its shape
(`run_command:git:*`, `tests/*.py`). `path_covers` is where the question of a write tool takes
its words from.
"""

from __future__ import annotations

import json

from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import KeyStyle, literal_of
from codecoder.permissions.patterns import (
    MOVE_SEPARATOR,
    WILDCARD,
    KeyPattern,
    PatternError,
)

__all__ = ["NEVER_PROTECTED", "covers", "path_covers"]

# What no path grant covers, however wide (foundation.protected): said with every wide one.
NEVER_PROTECTED = (
    "never a protected path (codecoder.json, .codecoder/, any .git or .gitmodules, the agents' "
    "settings such as .claude/): those are asked every time"
)


def covers(entry: str, style: KeyStyle) -> str:
    """What `entry`, an allowlist entry for a tool whose keys read as `style`, covers."""
    try:
        pattern = KeyPattern.parse(entry)
    except PatternError:
        return "nothing: it is not a valid entry"
    action = pattern.action
    if not action:
        return f"every call of {pattern.tool}"
    if action == "*":
        what = "simple command" if style is KeyStyle.COMMAND else "call"
        return f"every {what} of {pattern.tool}" + (
            ", but never a compound one" if style is KeyStyle.COMMAND else ""
        )
    if style is KeyStyle.COMMAND:
        return _command(pattern)
    if style is KeyStyle.PATH:
        return path_covers(action)
    return "exactly this key" if literal_of(action) is not None else f"names matching {action}"


def _command(pattern: KeyPattern) -> str:
    if pattern.is_exact_compound:
        return "exactly this command"
    levels = pattern.levels
    if WILDCARD in levels:
        named = " ".join(level for level in levels if level != WILDCARD)
        return f"every simple `{named} …` command, at any level after the ones named"
    command = " ".join(json.dumps(level) if " " in level else level for level in levels)
    try:
        key = key_command(command).permission_key(pattern.tool)
    except Exception:  # a pattern the parser cannot read still gets words
        key = None
    for level in key.grant_levels if key is not None else ():
        if level.entry == f"{pattern.tool}:{pattern.action}":
            return level.covers
    return f"every simple `{command} …` command"


def path_covers(action: str) -> str:
    """What the action of a path entry covers: `src/app.py` only that file, `src/report/**`
    any file under that directory, `**` any file in the workspace (these two say that protected
    paths are never covered), another glob the paths it matches."""
    source, arrow, destination = action.partition(MOVE_SEPARATOR)
    if arrow:
        return f"only moving {_named(source)} to {_named(destination)}"
    literal = literal_of(action)
    if literal is not None:
        return f"only {literal}"
    if action == "**":
        return f"any file in this workspace, at any depth; {NEVER_PROTECTED}"
    directory = literal_of(action[:-3]) if action.endswith("/**") else None
    if directory is not None:
        return f"any file under {directory}/, at any depth; {NEVER_PROTECTED}"
    return f"paths matching {action}"


def _named(side: str) -> str:
    literal = literal_of(side)
    return literal if literal is not None else f"any path matching {side}"
