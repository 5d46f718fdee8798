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

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.keys import KeyStyle, PermissionKey
from codecoder.permissions.patterns import KeyPattern, PatternIndex

NEVER = -1.0

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Lifetime:
    """What "this session" is where a session grant is made, in words for the human who
    grants: how long it lasts (`until` ends a sentence: "lasts until this `codecoder call`
    exits") and where its grants are kept. Each interface says its own
    (`runtime.session.Runtime.session`)."""

    until: str = "until this session ends"
    kept: str = "kept in memory only (nothing is written)"
    # The session holds one call and ends with it (`codecoder call`, `exec`): a session grant
    # would mean the same as Once, so the question does not offer one.
    one_call: bool = False


@dataclass(frozen=True, slots=True)
class SessionGrant:
    """One session grant as `codecoder allowlist list` shows it: the entry, the tool, the
    environment it was approved in, when it expires (NEVER: with the session), how it came
    (`answer`: the human's AlwaysThisSession; `--allow`: the command line) and when."""

    tool: str
    entry: str
    environment: EnvironmentTag
    expiry: float
    origin: str
    granted: float


class SessionAllowlist:
    def __init__(
        self, ttl: float = NEVER, clock: Clock | None = None, lifetime: Lifetime | None = None
    ) -> None:
        self._grants: dict[tuple[str, str, EnvironmentTag], float] = {}
        self._digests: dict[tuple[str, str, EnvironmentTag], str | None] = {}
        self._origins: dict[tuple[str, str, EnvironmentTag], tuple[str, float]] = {}
        self._ttl = ttl
        self._clock = clock or time.time
        self.lifetime = lifetime or Lifetime()
        # Told after every change (a grant, a revocation, an expiry): an interface that
        # publishes its grants (runtime.interfaces.livegrants) republishes them.
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    @property
    def ttl(self) -> float:
        """Seconds a grant made now lasts (`session_ttl`), or NEVER."""
        return self._ttl

    def lasts(self) -> str:
        """How long a grant made now lasts, in words: the session's lifetime, and the time it
        expires at when the project sets a `session_ttl`."""
        if self._ttl < 0:
            return self.lifetime.until
        expiry = self._clock() + self._ttl
        shape = "%H:%M" if self._ttl >= 120 else "%H:%M:%S"
        at = time.strftime(shape, time.localtime(expiry))
        return f"{self.lifetime.until}, and at most until {at} (session_ttl {self._ttl:g} s)"

    def grant(
        self,
        key: PermissionKey,
        environment: EnvironmentTag,
        ttl: float | None = None,
        digest: str | None = None,
        entry: str | None = None,
        origin: str = "answer",
    ) -> float:
        """Record a grant for `entry` (one of the key's grant levels; by default its narrowest)
        and digest, in `environment`; returns its expiry (-1 = never). `origin` says how it
        came: `answer` (the human's), `--allow`, `hook`."""
        ttl = self._ttl if ttl is None else ttl
        now = self._clock()
        expiry = NEVER if ttl < 0 else now + ttl
        level = entry if entry is not None else key.grant_levels[0].entry
        recorded = (key.tool, level, environment)
        self._grants[recorded] = expiry
        self._digests[recorded] = digest
        self._origins[recorded] = (origin, now)
        self._changed()
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
            self._grants.pop(recorded, None)
            expired = (level.entry, False, expiry)
            self._changed()
        return expired

    def revoke(self, raw: str) -> bool:
        """Drop every grant of this key, in every environment."""
        found = [k for k in list(self._grants) if k[1] == raw]
        for k in found:
            self._grants.pop(k, None)
        if found:
            self._changed()
        return bool(found)

    def clear(self) -> None:
        had = bool(self._grants)
        self._grants.clear()
        if had:
            self._changed()

    def granted(self) -> list[SessionGrant]:
        """Every grant still held (an expired one until a lookup drops it), described."""
        found = []
        for (tool, entry, environment), expiry in sorted(self._grants.items()):
            origin, when = self._origins.get((tool, entry, environment), ("answer", 0.0))
            found.append(SessionGrant(tool, entry, environment, expiry, origin, when))
        return found

    def entries(self) -> list[tuple[str, str, EnvironmentTag, float]]:
        """(tool, key, environment approved in, expiry) of every grant."""
        return [
            (tool, raw, environment, expiry)
            for (tool, raw, environment), expiry in sorted(self._grants.items())
        ]


@dataclass(frozen=True, slots=True)
class Grant:
    """One usable allowlist entry or deny rule, and the file it came from (codecoder.json, or
    the user's own file for a deny rule), so that a decision names the file it really read."""

    pattern: KeyPattern
    line: int | None = None
    column: int | None = None
    digest: str | None = None
    file: str | None = None  # None: the project's codecoder.json

    @property
    def where(self) -> str:
        """The rule's file and line, as a person finds it: `/p/codecoder.json line 4`."""
        name = self.file or "codecoder.json"
        return f"{name} line {self.line}" if self.line else name


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
