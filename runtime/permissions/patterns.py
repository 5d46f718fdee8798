"""Key patterns: what an allowlist entry or a deny rule covers.

A pattern is `tool:action`. How `action` matches depends on the tool's key style:

* command keys (`run_command`): levels separated by `:`, matched from the left against the
  program as written and the levels the program table names (`runtime.permissions.programs`).
  `run_command:git` and `run_command:git:*` cover every simple git command;
  `run_command:git:status` covers simple `git status …` commands (whatever global options come
  first); `run_command:npm:run:test` covers `npm run test …`; `run_command:*` covers every
  simple command. A `*` level matches any one level, and a last `*` any number of them. No
  such wildcard ever covers a compound command: a compound key is covered only by an entry
  equal to it, a quoted entry (`run_command:"git status"`) covers exactly that command line,
  and `run_command:**` (`ANY_COMMAND`) any command, compound lines included: the sandbox grant,
  which the lookup chain consults only where the command runs contained and needs nothing of
  the host (a project grant never holds on @shell: its ceiling).
* path keys (`write_file`): a glob over the workspace-relative path, where `*` and `?` stay within
  one path segment, `**` spans any number of them and `[abc]`, `[!abc]`, `[a-z]` match one
  character of a set: `write_file:tests/**`. A move names two paths; `move_file:SRC -> DST`
  covers moves from SRC to DST, and a single glob covers a move only when it covers both.
* name keys (`commit`, `run_capability:lint`): equality, or `tool:*`.

The escape syntax is the glob one: a character in brackets is that character, literally
(`a[*]b.txt` is the path `a*b.txt`; `test[:]unit` one level `test:unit`). Keys recorded from the
human's answers are escaped this way (`runtime.permissions.keys.escape_literal`), so they match only
what was approved.

Deny rules match more eagerly than grants, because erring there only makes things stricter. A
deny rule for a command matches a command the parser can see anywhere in a compound string,
at any word (so `sudo git push` and `find -exec git push` are `git push` too), by canonical
program name (`/usr/bin/git`, `/usr/lib/git-core/git-push`), with its levels anywhere after the
program in order (`git -C repo push`); a subcommand the parser cannot know (`git $X`, a git
alias) counts as the one the rule names, and a word bash would expand into file names
(`/usr/bin/gi? push`, `r[m]`) as every name it matches, as many of them as the rule names
(`*` may expand into `npm publish`). A deny for a path matches either path
of a move, and a move of a directory that could hold what it covers (`move_file:secrets/**`
stops moving `secrets`; a rule starting with `**` stops every move, since any directory could
hold a match).

`never_matches` says why an entry can never match a call, and how to spell what was meant;
`codecoder check` reports it.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from codecoder.permissions.commandkey import compound_views, never_simple
from codecoder.permissions.keys import DenyView, KeyStyle, PermissionKey
from codecoder.permissions.programs import ANY, canonical_name, command_depth, is_glob

T = TypeVar("T")

MOVE_SEPARATOR = " -> "
# `run_command:**`: any command, compound lines included (see the module docstring).
ANY_COMMAND = "**"
WILDCARD = "\x00*"  # a `*` level of a command pattern (no level of a key contains NUL)
_BRACKETED = re.compile(r"\[(.)\]")
_PROGRAM_NAME = re.compile(r"[A-Za-z0-9_@%+,./-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PatternError(ValueError):
    """A pattern that cannot mean anything."""


@dataclass(frozen=True, slots=True)
class Unmatchable:
    """Why an entry can never match a call, and the spelling that would (if there is one)."""

    reason: str
    suggestion: str | None = None


@dataclass(frozen=True, slots=True)
class KeyPattern:
    """A parsed entry. `levels` are a command pattern's levels, unescaped (`npm:run:test[:]unit`
    → `("npm", "run", "test:unit")`), with `WILDCARD` for a `*` level (`[*]` is a literal star).
    """

    raw: str
    tool: str
    action: str  # "" when the pattern is the bare tool name
    levels: tuple[str, ...] = field(default=(), compare=False)
    # As a deny rule reads a command pattern: the program's canonical name (or `*`) and the
    # lower-cased levels after it, wildcards left out.
    deny_program: str = field(default="", compare=False)
    deny_levels: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, raw: str) -> KeyPattern:
        if not raw or raw != raw.strip():
            raise PatternError(f"pattern {raw!r} is empty or has surrounding whitespace")
        if _CONTROL.search(raw):
            raise PatternError(f"pattern {raw!r} contains control characters")
        tool, _, action = raw.partition(":")
        if not tool:
            raise PatternError(f"pattern {raw!r} names no tool")
        levels = tuple(
            WILDCARD if level == "*" else _BRACKETED.sub(r"\1", level) if "[" in level else level
            for level in _split_levels(action)
        )
        program = levels[0] if levels else ""
        return cls(
            raw=raw,
            tool=tool,
            action=action,
            levels=levels,
            deny_program="*" if program == WILDCARD else canonical_name(program),
            deny_levels=tuple(level.lower() for level in levels[1:] if level != WILDCARD),
        )

    def check(self, style: KeyStyle) -> None:
        """Raise PatternError when the pattern cannot be read as a pattern of that style."""
        if self.action.startswith('"'):
            try:
                value = json.loads(self.action)
            except json.JSONDecodeError as exc:
                raise PatternError(f"{self.raw}: the quoted command is not valid JSON") from exc
            if not isinstance(value, str):
                raise PatternError(f"{self.raw}: the quoted command is not a string")
            return
        if style is KeyStyle.COMMAND and self.action:
            if "[" in _BRACKETED.sub("", self.action) or "]" in _BRACKETED.sub("", self.action):
                raise PatternError(
                    f"{self.raw}: in a command pattern brackets only escape one character, "
                    "as in test[:]unit"
                )
            if "" in _split_levels(self.action):
                raise PatternError(f"{self.raw}: a command pattern has an empty level (`::`)")

    @property
    def is_exact_compound(self) -> bool:
        return self.action.startswith('"')

    def matches(self, key: PermissionKey, *, deny: bool = False) -> bool:
        if self.tool != key.tool:
            return False
        if self.raw == key.raw:
            return True
        if deny:
            return self._denies(key)
        if self.action == ANY_COMMAND and key.style is KeyStyle.COMMAND:
            # Never a command that needs the host (in @bwrap its question offers the host; in a
            # container it fails): only its own key covers it.
            return not key.needs_host
        if key.compound:
            return False
        if self.action == "*":
            return True
        if not self.action:
            return False
        if key.style is KeyStyle.COMMAND:
            if self.is_exact_compound:
                return _quoted(self.action) == key.subject
            return _levels_match(self.levels, key.path)
        if key.style is KeyStyle.PATH:
            return self._covers_paths(key, every=True)
        return False

    def _denies(self, key: PermissionKey) -> bool:
        if self.action == "*" or (self.action == ANY_COMMAND and key.style is KeyStyle.COMMAND):
            return True
        if not self.action:
            return False
        if key.style is KeyStyle.COMMAND:
            if self.is_exact_compound:
                return _quoted(self.action) == key.subject
            program, subs = self.deny_program, self.deny_levels
            # A key without views (a compound command, or a command key built elsewhere) is
            # read from its command line: what a deny rule sees never depends on the keyer.
            views = key.views or compound_views(key.subject)
            return any(_view_matches(program, subs, view) for view in views)
        if key.style is KeyStyle.PATH:
            return self._covers_paths(key, every=False)
        return False

    def _covers_paths(self, key: PermissionKey, *, every: bool) -> bool:
        paths = key.paths or (key.action,)
        source, arrow, destination = self.action.partition(MOVE_SEPARATOR)
        if arrow and len(paths) == 2:
            # A rule naming both sides (a grant or a deny) is about that very move.
            return bool(
                _glob(source).fullmatch(paths[0]) and _glob(destination).fullmatch(paths[1])
            )
        if arrow:
            return False
        if every:
            return all(_glob(self.action).fullmatch(path) is not None for path in paths)
        if len(paths) > 1:
            # A move can carry a whole directory: a deny rule for what is inside stops it too.
            return any(_covers_within(self.action, path) for path in paths)
        return _glob(self.action).fullmatch(paths[0]) is not None


def _covers_within(glob: str, path: str) -> bool:
    """Whether `glob` matches `path` or could match something inside it, were it a directory:
    the glob's literal directories lead into `path` (`secrets/**` for `secrets`), a wildcard
    tail matches below it, or the glob starts with `**` (it matches inside any directory)."""
    if glob.startswith("**") or _glob(glob).fullmatch(path):
        return True
    if _glob(glob).fullmatch(f"{path}/\x00"):
        return True
    literal: list[str] = []
    for segment in glob.split("/"):
        if any(char in segment for char in "*?["):
            break
        literal.append(segment)
    return "/".join(literal).startswith(f"{path}/")


def _split_levels(action: str) -> list[str]:
    """`a:b[:]c:d` → `["a", "b[:]c", "d"]`: split on colons outside brackets."""
    if "[" not in action:
        return action.split(":")
    levels: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(action):
        if action.startswith("[", i) and i + 2 < len(action) and action[i + 2] == "]":
            current.append(action[i : i + 3])
            i += 3
            continue
        if action[i] == ":":
            levels.append("".join(current))
            current = []
        else:
            current.append(action[i])
        i += 1
    levels.append("".join(current))
    return levels


def _levels_match(levels: tuple[str, ...], path: tuple[str, ...]) -> bool:
    for i, level in enumerate(levels):
        if level == WILDCARD:
            if i == len(levels) - 1:
                return len(path) >= i
            if i >= len(path):
                return False
            continue
        if i >= len(path) or path[i] != level:
            return False
    return True


def _view_matches(program: str, subs: tuple[str, ...], view: DenyView) -> bool:
    if view.glob and program != "*":
        # A pattern bash expands against file names: it is every program it could name,
        # a git-core binary (`git-pu?h`) included.
        if subs and program == "git" and fnmatch.fnmatchcase(f"git-{subs[0]}", view.program):
            return True
        if not fnmatch.fnmatchcase(program, view.program):
            return False
    elif program != "*" and view.program != program and view.program != ANY:
        return False
    if not subs:
        return True
    wanted = subs[1:] if view.sub_any else subs
    if view.glob:
        # One pattern may expand into several names: the program and the levels after it.
        while wanted and fnmatch.fnmatchcase(wanted[0], view.program):
            wanted = wanted[1:]
    j = 0
    words = view.words
    for k in range(view.start, len(words)):
        if j == len(wanted):
            break
        word = words[k]
        if word == wanted[j] or (is_glob(word) and fnmatch.fnmatchcase(wanted[j], word)):
            j += 1
    return j == len(wanted)


@functools.lru_cache(maxsize=4096)
def _quoted_entry(tool: str, command: str) -> str:
    """The quoted entry that covers exactly `command`: `run_command:"git status"`."""
    return f"{tool}:{json.dumps(command, ensure_ascii=True)}"


@functools.lru_cache(maxsize=4096)
def _quoted(action: str) -> str | None:
    try:
        value = json.loads(action)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


@functools.lru_cache(maxsize=4096)
def _glob(glob: str) -> re.Pattern[str]:
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
        elif glob[i] == "[" and (end := _class_end(glob, i)) > 0:
            out.append(_class_regex(glob[i + 1 : end]))
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def _class_end(glob: str, start: int) -> int:
    """Where the bracket expression opened at `start` closes, or -1 if it does not."""
    i = start + 1
    if i < len(glob) and glob[i] in "!^":
        i += 1
    if i < len(glob) and glob[i] == "]":
        i += 1  # a `]` first in the set is a member
    end = glob.find("]", i)
    return end


def _class_regex(body: str) -> str:
    negate = body[:1] in ("!", "^") and len(body) > 1
    if negate:
        body = body[1:]
    members: list[str] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            members.append(f"{re.escape(body[i])}-{re.escape(body[i + 2])}")
            i += 3
        else:
            members.append(re.escape(body[i]))
            i += 1
    return f"[^/{''.join(members)}]" if negate else f"(?!/)[{''.join(members)}]"


# --- entries that can never match ----------------------------------------------------------


def never_matches(
    pattern: KeyPattern, style: KeyStyle, *, asks: bool, deny: bool
) -> Unmatchable | None:
    """Why `pattern` can never match a call of its tool, or None when it can.

    `asks` is False for a Permission::None tool, whose calls are never checked at all.
    """
    if not asks:
        return Unmatchable(
            f"{pattern.tool} needs no permission (Permission::None): its calls are never "
            "checked against allow or deny entries"
        )
    if not pattern.action or pattern.action == "*" or pattern.is_exact_compound:
        return None
    if style is KeyStyle.COMMAND and pattern.action == ANY_COMMAND:
        return None
    if style is KeyStyle.COMMAND:
        return _command_never_matches(pattern, deny=deny)
    if style is KeyStyle.PATH:
        source, arrow, destination = pattern.action.partition(MOVE_SEPARATOR)
        for side in (source, destination) if arrow else (pattern.action,):
            problem = _path_never_matches(pattern, side)
            if problem is not None:
                return problem
    return None


def _command_never_matches(pattern: KeyPattern, *, deny: bool) -> Unmatchable | None:
    raw_levels = _split_levels(pattern.action)
    if any(level != level.strip() or " " in level or "\t" in level for level in raw_levels):
        words = [word for level in raw_levels for word in level.split()]
        return Unmatchable(
            "a level holds whitespace, which no program or subcommand in a key does: levels "
            "are separated by `:`",
            f"{pattern.tool}:{':'.join(words)}" if words else None,
        )
    levels = pattern.levels
    program = levels[0]
    if program == WILDCARD:
        return None
    if not _PROGRAM_NAME.fullmatch(program) or "=" in program:
        return Unmatchable(f"{program!r} is not a program name any simple command can have")
    if deny:
        return None
    always = never_simple(program)
    if always is not None:
        return Unmatchable(
            f"{always}: such commands are always compound, keyed by the whole command line, "
            "which a program pattern never covers"
        )
    depth = command_depth(program, [level for level in levels[1:] if level != WILDCARD])
    named = [level for level in levels[1:] if level != WILDCARD]
    if isinstance(depth, str):
        return Unmatchable(depth)
    if len(named) > depth:
        shorter = ":".join(
            [pattern.action.split(":")[0], *pattern.action.split(":")[1 : depth + 1]]
        )
        return Unmatchable(
            f"{program} commands are keyed with at most {depth} level(s) after the program",
            f"{pattern.tool}:{shorter}",
        )
    return None


def _path_never_matches(pattern: KeyPattern, glob: str) -> Unmatchable | None:
    tool = pattern.tool

    def fixed(text: str) -> str:
        return pattern.raw.replace(glob, text, 1) if text else f"{tool}:**"

    if glob.startswith("/"):
        return Unmatchable(
            "paths in keys are relative to the workspace, never absolute",
            fixed(glob.lstrip("/")) if glob.strip("/") else None,
        )
    if glob.startswith("~"):
        return Unmatchable("paths in keys are relative to the workspace; `~` is not expanded")
    parts = glob.split("/")
    if ".." in parts:
        return Unmatchable("paths in keys never leave the workspace (`..`)")
    if glob.endswith("/"):
        return Unmatchable(
            "a path in a key never ends with `/`; to cover a directory's contents, end the "
            "pattern with /**",
            fixed(glob + "**"),
        )
    if "." in parts or "" in parts:
        normal = "/".join(part for part in parts if part not in (".", ""))
        return Unmatchable(
            "paths in keys are normalised (no `.` segments, no doubled `/`)", fixed(normal)
        )
    return None


# --- the index -----------------------------------------------------------------------------


class PatternIndex(Generic[T]):
    """Patterns with a payload each, found for a key without scanning all of them.

    A project file may hold thousands of entries; a decision must not grow with their number.
    Each pattern lives in exactly one place: exact keys (a bare tool name, a quoted command) in
    a dict; command patterns in a bucket per program (its canonical name for deny rules, which
    match by it); path patterns in a bucket per literal directory prefix (`src/gen/**` under
    `src/gen`, a wildcard-free path under itself; a move pattern under its source's), found by
    looking up each ancestor of the key's paths; only patterns that start with a wildcard are
    scanned.
    """

    def __init__(self, *, deny: bool = False) -> None:
        self._deny = deny
        self._exact: dict[str, list[tuple[KeyPattern, T]]] = defaultdict(list)
        self._buckets: dict[tuple[str, str], list[tuple[KeyPattern, T]]] = defaultdict(list)
        self._scan: dict[str, list[tuple[KeyPattern, T]]] = defaultdict(list)
        self._tools: set[str] = set()
        self._quoted: set[str] = set()  # tools with a quoted command entry
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
            if pattern.is_exact_compound:
                self._quoted.add(pattern.tool)
            return
        if style is KeyStyle.PATH:
            literal: list[str] = []
            for segment in action.partition(MOVE_SEPARATOR)[0].split("/"):
                if any(ch in segment for ch in "*?["):
                    break
                literal.append(segment)
            head = "/".join(literal)
        elif style is KeyStyle.COMMAND:
            program = pattern.levels[0]
            head = "" if program == WILDCARD or action == ANY_COMMAND else program
            if head and self._deny:
                head = canonical_name(head)
        else:
            head = "" if any(ch in action for ch in "*?[") else action
        if head:
            self._buckets[(pattern.tool, head)].append(item)
        else:
            self._scan[pattern.tool].append(item)

    def find(self, key: PermissionKey) -> Iterator[tuple[KeyPattern, T]]:
        """Every (pattern, payload) whose pattern matches the key."""
        deny = self._deny
        if len(key.paths) < 2:
            for pattern, payload in self.candidates(key):
                if pattern.matches(key, deny=deny):
                    yield pattern, payload
            return
        seen: set[int] = set()
        for pattern, payload in self.candidates(key):
            if id(pattern) not in seen and pattern.matches(key, deny=deny):
                seen.add(id(pattern))
                yield pattern, payload

    def candidates(self, key: PermissionKey) -> Iterable[tuple[KeyPattern, T]]:
        """The entries worth testing against `key`: a handful, however many there are.

        Each entry comes at most once, because each lives in one place only (a key naming
        two paths may meet one twice; `find` skips the repeat).
        """
        tool = key.tool
        if tool not in self._tools:
            return
        yield from self._exact.get(key.raw, ())
        if key.style is KeyStyle.COMMAND and not key.compound and tool in self._quoted:
            # A quoted entry covers exactly its command line, simple or not.
            yield from self._exact.get(_quoted_entry(tool, key.subject), ())
        if key.compound and not self._deny:
            # Only `tool:**` among the wildcards covers a compound command.
            for item in self._scan.get(tool, ()):
                if item[0].action == ANY_COMMAND:
                    yield item
            return
        if key.compound or (
            # A command key without views, or a move (which can carry a directory holding what
            # a rule under it covers): deny rules are few, so every one is tested.
            self._deny and ((key.style is KeyStyle.COMMAND and not key.views) or len(key.paths) > 1)
        ):
            if self._deny:  # deny rules are few: every one of the tool's is tested
                for raw, items in self._exact.items():
                    if raw != key.raw and items[0][0].tool == tool:
                        yield from items
                for (bucket_tool, _), items in self._buckets.items():
                    if bucket_tool == tool:
                        yield from items
                yield from self._scan.get(tool, ())
            return
        buckets = self._buckets
        if key.style is KeyStyle.PATH:
            for path in key.paths or (key.action,):
                prefix = ""
                for segment in path.split("/"):
                    prefix = f"{prefix}/{segment}" if prefix else segment
                    yield from buckets.get((tool, prefix), ())
        elif key.style is KeyStyle.COMMAND:
            if self._deny:
                # A simple command has one view, whose program is its canonical name.
                for view in key.views:
                    yield from buckets.get((tool, view.program), ())
            else:
                yield from buckets.get((tool, key.path[0] if key.path else key.action), ())
        else:
            yield from buckets.get((tool, key.action), ())
        yield from self._scan.get(tool, ())
