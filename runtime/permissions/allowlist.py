"""The two allowlists of the lookup chain.

* `SessionAllowlist`: in memory, `(tool, entry, environment) → expiry` (a timestamp, or -1 for
  never), dropped with the session. An entry is one of a key's grant levels
  (`PermissionKey.grant_levels`): the exact key, or for a command the program-wide key the human
  chose; a lookup tries each level of the key, narrowest first. A grant covers calls in the
  environment it was approved in only: approved while `run_command` was bound to @docker, it does
  not cover the same command on @shell after the binding changed and the file was reloaded.
* `ProjectAllowlist`: the grants and deny rules of codecoder.json as last loaded. Edits to the file
  are not picked up until `Runtime.reload()`; grants made by this process are added as they are
  written. While a file whose rules it holds cannot be read, it is `unreadable` (the reason, with
  the file, line and column): the rules are unknown, so the engine refuses every call that needs
  permission instead of deciding with what could be read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.permissions.keys import KeyStyle, PermissionKey
from codecoder.runtime.permissions.patterns import KeyPattern, PatternIndex

NEVER = -1.0

Clock = Callable[[], float]


class SessionAllowlist:
    def __init__(self, ttl: float = NEVER, clock: Clock | None = None) -> None:
        self._grants: dict[tuple[str, str, EnvironmentTag], float] = {}
        self._digests: dict[tuple[str, str, EnvironmentTag], str | None] = {}
        self._ttl = ttl
        self._clock = clock or time.time

    def grant(
        self,
        key: PermissionKey,
        environment: EnvironmentTag,
        ttl: float | None = None,
        digest: str | None = None,
        entry: str | None = None,
    ) -> float:
        """Record a grant for `entry` (one of the key's grant levels; by default its narrowest)
        and digest, in `environment`; returns its expiry (-1 = never)."""
        ttl = self._ttl if ttl is None else ttl
        expiry = NEVER if ttl < 0 else self._clock() + ttl
        level = entry if entry is not None else key.grant_levels[0].entry
        recorded = (key.tool, level, environment)
        self._grants[recorded] = expiry
        self._digests[recorded] = digest
        return expiry

    def lookup(
        self, key: PermissionKey, environment: EnvironmentTag, digest: str | None = None
    ) -> tuple[bool, float] | None:
        """None when no level of the key is granted (in this environment, for this digest);
        otherwise (still valid, expiry) of the narrowest one that is."""
        found = self.find(key, environment, digest)
        return None if found is None else found[1:]

    def find(
        self, key: PermissionKey, environment: EnvironmentTag, digest: str | None = None
    ) -> tuple[str, bool, float] | None:
        """Like `lookup`, with the entry that matched first: (entry, still valid, expiry).
        A valid grant at any level wins over an expired one (which is dropped)."""
        expired: tuple[str, bool, float] | None = None
        for level in key.grant_levels:
            recorded = (key.tool, level.entry, environment)
            expiry = self._grants.get(recorded)
            if expiry is None or self._digests.get(recorded) != digest:
                continue
            if expiry == NEVER or self._clock() < expiry:
                return level.entry, True, expiry
            del self._grants[recorded]
            expired = (level.entry, False, expiry)
        return expired

    def revoke(self, raw: str) -> bool:
        """Drop every grant of this key, in every environment."""
        found = [k for k in self._grants if k[1] == raw]
        for k in found:
            del self._grants[k]
        return bool(found)

    def clear(self) -> None:
        self._grants.clear()

    def entries(self) -> list[tuple[str, str, EnvironmentTag, float]]:
        """(tool, key, environment approved in, expiry) of every grant."""
        return [
            (tool, raw, environment, expiry)
            for (tool, raw, environment), expiry in sorted(self._grants.items())
        ]


@dataclass(frozen=True, slots=True)
class Grant:
    """One usable allowlist entry of codecoder.json."""

    pattern: KeyPattern
    line: int | None = None
    column: int | None = None
    digest: str | None = None


class ProjectAllowlist:
    def __init__(self, style_of: Callable[[str], KeyStyle], unreadable: str | None = None) -> None:
        self._style_of = style_of
        # Why the rules are unknown (a broken file), or None: see the module docstring.
        self.unreadable = unreadable
        self._grants: PatternIndex[Grant] = PatternIndex()
        self._denies: PatternIndex[Grant] = PatternIndex(deny=True)

    @classmethod
    def build(
        cls,
        grants: Iterable[Grant],
        denies: Iterable[Grant],
        style_of: Callable[[str], KeyStyle],
        unreadable: str | None = None,
    ) -> ProjectAllowlist:
        allowlist = cls(style_of, unreadable)
        for grant in grants:
            allowlist.add_grant(grant)
        for deny in denies:
            allowlist._denies.add(deny.pattern, deny, style_of(deny.pattern.tool))
        return allowlist

    def add_grant(self, grant: Grant) -> None:
        self._grants.add(grant.pattern, grant, self._style_of(grant.pattern.tool))

    def denied_by(self, key: PermissionKey) -> Grant | None:
        return next((deny for _, deny in self._denies.find(key)), None)

    def granted_by(self, key: PermissionKey) -> list[Grant]:
        return [grant for _, grant in self._grants.find(key)]

    def __len__(self) -> int:
        return len(self._grants)
