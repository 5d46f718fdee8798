"""Key patterns: what an allowlist entry or a deny rule covers.

A pattern is `tool:action`. How `action` matches depends on the tool's key style:

* command keys (`run_command`): `run_command:git` and `run_command:git:*` cover every simple git
  command; `run_command:git:push` covers simple commands whose first argument is `push`;
  `run_command:*` covers every simple command. No wildcard ever covers a compound command: a
  compound key is covered only by an entry equal to it.
* path keys (`write_file`): a glob over the workspace-relative path, where `*` and `?` stay within
  one path segment and `**` spans any number of them: `write_file:tests/**`.
* name keys (`commit`, `run_capability:lint`): equality, or `tool:*`.

Deny rules match more eagerly than grants, because erring there only makes things stricter: a
deny `run_command:git:push` also stops `git -C repo push` and `/usr/bin/git push`, and a deny for
a program stops any compound command that mentions it.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from runtime.tool import KeyStyle, PermissionKey

T = TypeVar("T")

_WORDS = re.compile(r"[^\s;&|()<>`'\"{}$]+")


class PatternError(ValueError):
    """A pattern that cannot mean anything."""


@dataclass(frozen=True, slots=True)
class KeyPattern:
    raw: str
    tool: str
    action: str  # "" when the pattern is the bare tool name

    @classmethod
    def parse(cls, raw: str) -> KeyPattern:
        if not raw or raw != raw.strip():
            raise PatternError(f"pattern {raw!r} is empty or has surrounding whitespace")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
            raise PatternError(f"pattern {raw!r} contains control characters")
        tool, _, action = raw.partition(":")
        if not tool:
            raise PatternError(f"pattern {raw!r} names no tool")
        return cls(raw=raw, tool=tool, action=action)

    def check(self, style: KeyStyle) -> None:
        """Raise PatternError when the pattern cannot match any key of that style."""
        if self.action.startswith('"'):
            try:
                value = json.loads(self.action)
            except json.JSONDecodeError as exc:
                raise PatternError(f"{self.raw}: the quoted command is not valid JSON") from exc
            if not isinstance(value, str):
                raise PatternError(f"{self.raw}: the quoted command is not a string")
            return
        if style is KeyStyle.COMMAND and len(self.action.split(":")) > 2:
            raise PatternError(
                f"{self.raw}: a command pattern is tool:program or tool:program:subcommand"
            )

    @property
    def is_exact_compound(self) -> bool:
        return self.action.startswith('"')

    def matches(self, key: PermissionKey, *, deny: bool = False) -> bool:
        if self.tool != key.tool:
            return False
        if self.raw == key.raw:
            return True
        if key.compound:
            return deny and self._mentioned_in(key.subject)
        if self.action == "*":
            return True
        if not self.action or self.is_exact_compound:
            return False
        if key.style is KeyStyle.COMMAND:
            return self._matches_command(key, deny)
        if key.style is KeyStyle.PATH:
            return _glob_regex(self.action).fullmatch(key.action) is not None
        return False

    def _matches_command(self, key: PermissionKey, deny: bool) -> bool:
        argv = key.argv or (key.action,)
        program, _, sub = self.action.partition(":")
        if program != key.action and not (deny and program == posixpath.basename(key.action)):
            return False
        if sub in ("", "*"):
            return True
        return sub in argv[1:] if deny else len(argv) > 1 and argv[1] == sub

    def _mentioned_in(self, command: str) -> bool:
        """Deny side only: does a compound command mention this pattern's program?"""
        if not self.action or self.is_exact_compound:
            return False
        program, _, sub = self.action.partition(":")
        if program == "*":
            return True
        words = {posixpath.basename(w) for w in _WORDS.findall(command)} | set(
            _WORDS.findall(command)
        )
        return program in words and (sub in ("", "*") or sub in words)


@functools.lru_cache(maxsize=4096)
def _glob_regex(glob: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


class PatternIndex(Generic[T]):
    """Patterns with a payload each, found for a key without scanning all of them.

    A project file may hold thousands of entries; a decision must not grow with their number.
    Each pattern lives in exactly one place: exact keys (a bare tool name, a compound command)
    in a dict; command patterns in a bucket per program; path patterns in a bucket per literal
    directory prefix (`src/gen/**` under `src/gen`, a wildcard-free path under itself), found by
    looking up each ancestor of the key's path; only patterns that start with a wildcard are
    scanned.
    """

    def __init__(self) -> None:
        self._exact: dict[str, list[tuple[KeyPattern, T]]] = defaultdict(list)
        self._buckets: dict[tuple[str, str], list[tuple[KeyPattern, T]]] = defaultdict(list)
        self._scan: dict[str, list[tuple[KeyPattern, T]]] = defaultdict(list)
        self._tools: set[str] = set()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, pattern: KeyPattern, payload: T, style: KeyStyle) -> None:
        self._size += 1
        self._tools.add(pattern.tool)
        item = (pattern, payload)
        action = pattern.action
        if pattern.raw == pattern.tool or pattern.is_exact_compound:
            self._exact[pattern.raw].append(item)
            return
        if style is KeyStyle.PATH:
            literal: list[str] = []
            for segment in action.split("/"):
                if any(ch in segment for ch in "*?["):
                    break
                literal.append(segment)
            head = "/".join(literal)
        elif style is KeyStyle.COMMAND:
            head = action.split(":", 1)[0]
            head = "" if head == "*" else head
        else:
            head = "" if any(ch in action for ch in "*?[") else action
        if head:
            self._buckets[(pattern.tool, head)].append(item)
        else:
            self._scan[pattern.tool].append(item)

    def find(self, key: PermissionKey, *, deny: bool = False) -> Iterator[tuple[KeyPattern, T]]:
        """Every (pattern, payload) whose pattern matches the key."""
        for pattern, payload in self.candidates(key, deny=deny):
            if pattern.matches(key, deny=deny):
                yield pattern, payload

    def candidates(
        self, key: PermissionKey, *, deny: bool = False
    ) -> Iterable[tuple[KeyPattern, T]]:
        """The entries worth testing against `key`: a handful, however many there are.

        Each entry comes at most once, because each lives in one place only.
        """
        if key.tool not in self._tools:
            return
        yield from self._exact.get(key.raw, ())
        if key.compound:
            if deny:
                for (tool, _), items in self._buckets.items():
                    if tool == key.tool:
                        yield from items
                yield from self._scan.get(key.tool, ())
            return
        buckets = self._buckets
        if key.style is KeyStyle.PATH:
            prefix = ""
            for segment in key.action.split("/"):
                prefix = f"{prefix}/{segment}" if prefix else segment
                yield from buckets.get((key.tool, prefix), ())
        else:
            yield from buckets.get((key.tool, key.action), ())
            if deny and key.style is KeyStyle.COMMAND:
                base = posixpath.basename(key.action)
                if base != key.action:
                    yield from buckets.get((key.tool, base), ())
        yield from self._scan.get(key.tool, ())
