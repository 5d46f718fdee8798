"""The two allowlists of the lookup chain.

* `SessionAllowlist`: in memory, `(tool, entry) → expiry` (a timestamp, or -1 for never), dropped
  with the session. An entry is one of a key's grant levels (`PermissionKey.grant_levels`): the
  exact key, or for a command the program-wide key the human chose; a lookup tries each level
  of the key, narrowest first.
* `ProjectAllowlist`: the grants and deny rules of codecoder.json as last loaded. Edits to the file
  are not picked up until `Runtime.reload()`; grants made by this process are added as they are
  written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from runtime.patterns import KeyPattern, PatternIndex
from runtime.tool import KeyStyle, PermissionKey

NEVER = -1.0

Clock = Callable[[], float]


class SessionAllowlist:
    def __init__(self, ttl: float = NEVER, clock: Clock | None = None) -> None:
        self._grants: dict[tuple[str, str], float] = {}
        self._digests: dict[tuple[str, str], str | None] = {}
        self._ttl = ttl
        self._clock = clock or time.time

    def grant(
        self,
        key: PermissionKey,
        ttl: float | None = None,
        digest: str | None = None,
        entry: str | None = None,
    ) -> float:
        """Record a grant for `entry` (one of the key's grant levels; by default its narrowest)
        and digest; returns its expiry (-1 = never)."""
        ttl = self._ttl if ttl is None else ttl
        expiry = NEVER if ttl < 0 else self._clock() + ttl
        recorded = (key.tool, entry if entry is not None else key.grant_levels[0].entry)
        self._grants[recorded] = expiry
        self._digests[recorded] = digest
        return expiry

    def lookup(self, key: PermissionKey, digest: str | None = None) -> tuple[bool, float] | None:
        """None when no level of the key is granted (for this digest); otherwise (still valid,
        expiry) of the narrowest one that is."""
        found = self.find(key, digest)
        return None if found is None else found[1:]

    def find(self, key: PermissionKey, digest: str | None = None) -> tuple[str, bool, float] | None:
        """Like `lookup`, with the entry that matched first: (entry, still valid, expiry).
        A valid grant at any level wins over an expired one (which is dropped)."""
        expired: tuple[str, bool, float] | None = None
        for level in key.grant_levels:
            recorded = (key.tool, level.entry)
            expiry = self._grants.get(recorded)
            if expiry is None or self._digests.get(recorded) != digest:
                continue
            if expiry == NEVER or self._clock() < expiry:
                return level.entry, True, expiry
            del self._grants[recorded]
            expired = (level.entry, False, expiry)
        return expired

    def revoke(self, raw: str) -> bool:
        found = [k for k in self._grants if k[1] == raw]
        for k in found:
            del self._grants[k]
        return bool(found)

    def clear(self) -> None:
        self._grants.clear()

    def entries(self) -> list[tuple[str, str, float]]:
        return [(tool, raw, expiry) for (tool, raw), expiry in sorted(self._grants.items())]


@dataclass(frozen=True, slots=True)
class Grant:
    """One usable allowlist entry of codecoder.json."""

    pattern: KeyPattern
    line: int | None = None
    column: int | None = None
    digest: str | None = None


class ProjectAllowlist:
    def __init__(self, style_of: Callable[[str], KeyStyle]) -> None:
        self._style_of = style_of
        self._grants: PatternIndex[Grant] = PatternIndex()
        self._denies: PatternIndex[Grant] = PatternIndex(deny=True)

    @classmethod
    def build(
        cls, grants: Iterable[Grant], denies: Iterable[Grant], style_of: Callable[[str], KeyStyle]
    ) -> ProjectAllowlist:
        allowlist = cls(style_of)
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
