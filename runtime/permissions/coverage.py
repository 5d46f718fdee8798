"""What an allowlist entry covers, in words: what `codecoder allowlist list` says of each grant.

The words are the ones the question used when the grant was made (`GrantLevel.covers`: "only
`git status …` commands", "every simple `cp …` command, with any arguments"), found again from
the entry; a pattern written by hand is described by its shape (`run_command:git:*`, `tests/**`).
"""

from __future__ import annotations

import json

from codecoder.runtime.permissions.commandkey import key_command
from codecoder.runtime.permissions.keys import KeyStyle, literal_of
from codecoder.runtime.permissions.patterns import (
    MOVE_SEPARATOR,
    WILDCARD,
    KeyPattern,
    PatternError,
)

__all__ = ["covers"]


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
        return _path(action)
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


def _path(action: str) -> str:
    source, arrow, destination = action.partition(MOVE_SEPARATOR)
    if arrow:
        return f"only moving {_named(source)} to {_named(destination)}"
    literal = literal_of(action)
    return f"only {literal}" if literal is not None else f"paths matching {action}"


def _named(side: str) -> str:
    literal = literal_of(side)
    return literal if literal is not None else f"any path matching {side}"
