"""Whether an allowlist entry or a deny rule can ever match a call: the one check made wherever
an entry is accepted (codecoder.json's allowlist and deny rules, the user's file's deny rules,
`--allow`, `allowlist revoke`), so an entry that can never match is refused the same way
everywhere, with the spelling that was probably meant.

An entry that can never match is an error wherever it is, trusted file or not, allow or deny:
a grant that can never match grants nothing while looking as if it did, a deny rule protects
nothing while looking as if it did. `check_entry` says why (`EntryProblem.code`):

    invalid_pattern   not a pattern at all (empty, control characters, a bracket that escapes
                      nothing, a quoted command that is not JSON …)
    unknown_tool      no tool of that name (`run_comand:ls`: did you mean run_command?)
    matches_nothing   the tool alone, where a call's key always names more (`run_command`)
    never_matches     a key of the tool never reads so (`run_command:npm test`, `write_file:./x`,
                      a Permission::None tool, `git stauts` …: `patterns.never_matches`)
    unknown_program   a program that is on no PATH here and that codecoder does not know, one
                      keystroke from one it knows (`run_command:gti`: did you mean git?)
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.keys import KeyStyle
from codecoder.permissions.patterns import WILDCARD, KeyPattern, PatternError, never_matches
from codecoder.permissions.programs import PROGRAMS, canonical_name
from codecoder.permissions.programs.git import GIT_BUILTINS
from codecoder.permissions.spellings import close_names, did_you_mean, one_keystroke_apart

__all__ = ["CheckedEntry", "EntryProblem", "ToolInfo", "check_entry"]


class ToolInfo(Protocol):
    """What checking an entry needs to know of its tool (a `runtime.tools.base.Tool` is one):
    where it runs, where it may be bound, how its keys read, whether it asks."""

    @property
    def environment(self) -> EnvironmentTag: ...
    @property
    def bindable(self) -> frozenset[EnvironmentTag]: ...
    @property
    def key_style(self) -> KeyStyle: ...
    @property
    def asks(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class EntryProblem:
    """Why an entry can never match a call. `reason` is said without the entry; `meant` is the
    entry that was probably meant, when there is one."""

    code: str
    reason: str
    meant: str | None = None

    @property
    def unmatchable(self) -> bool:
        """A readable entry of a known tool that matches no call (said "can never match")."""
        return self.code in ("matches_nothing", "never_matches", "unknown_program")

    def describe(self, raw: str, what: str = "entry") -> str:
        """As a file's diagnostic says it: `run_comand:ls: there is no tool named …`."""
        if self.code == "invalid_pattern":
            return self.reason
        if not self.unmatchable:
            return f"{raw}: {self.reason}"
        meant = f"; to mean that, write {self.meant}" if self.meant else ""
        return f"{raw}: this {what} can never match a call: {self.reason}{meant}"

    def as_option(self, option: str, raw: str) -> str:
        """As a command-line option's error says it: `--allow 'run_comand:ls': …`."""
        if not self.unmatchable:
            return f"{option} {raw!r}: {self.reason}"
        meant = f"; did you mean {option} {self.meant!r}?" if self.meant else ""
        return f"{option} {raw!r} can never match a call: {self.reason}{meant}"


@dataclass(frozen=True, slots=True)
class CheckedEntry:
    """An entry read: its pattern (None when it is not one), and why it can never match."""

    raw: str
    pattern: KeyPattern | None
    problem: EntryProblem | None = None


def check_entry(raw: str, tools: Mapping[str, ToolInfo], *, deny: bool) -> CheckedEntry:
    """Read `raw` as an entry for one of `tools` (a deny rule when `deny`), and say why it can
    never match a call, if it cannot."""
    try:
        pattern = KeyPattern.parse(raw)
    except PatternError as exc:
        return CheckedEntry(raw, None, EntryProblem("invalid_pattern", str(exc)))
    tool = tools.get(pattern.tool)
    if tool is None:
        close = close_names(pattern.tool, tools)
        reason = (
            f"there is no tool named {pattern.tool!r}{did_you_mean(pattern.tool, tools)}; "
            "known tools: " + ", ".join(sorted(tools))
        )
        meant = close[0] + raw[len(pattern.tool) :] if close else None
        return CheckedEntry(raw, None, EntryProblem("unknown_tool", reason, meant))
    try:
        pattern.check(tool.key_style)
    except PatternError as exc:
        return CheckedEntry(raw, None, EntryProblem("invalid_pattern", str(exc)))
    if not pattern.action and tool.asks and tool.key_style is not KeyStyle.NAME:
        reason = "it names the tool alone, which matches no call (a key names what is done)"
        return CheckedEntry(raw, pattern, EntryProblem("matches_nothing", reason, f"{raw}:*"))
    found = never_matches(pattern, tool.key_style, asks=tool.asks, deny=deny)
    if found is not None:
        meant = found.suggestion or _git_subcommand_meant(pattern)
        return CheckedEntry(raw, pattern, EntryProblem("never_matches", found.reason, meant))
    if tool.key_style is KeyStyle.COMMAND and not pattern.is_exact_compound:
        problem = _misspelt_program(pattern)
        if problem is not None:
            return CheckedEntry(raw, pattern, problem)
    return CheckedEntry(raw, pattern)


def _git_subcommand_meant(pattern: KeyPattern) -> str | None:
    """`run_command:git:status` for `run_command:git:stauts`: the git builtin one keystroke or
    so from a level that is none."""
    levels = pattern.levels
    if len(levels) < 2 or canonical_name(levels[0]) != "git" or levels[1] == WILDCARD:
        return None
    close = close_names(levels[1], GIT_BUILTINS)
    if not close:
        return None
    parts = pattern.action.split(":")
    return ":".join([pattern.tool, parts[0], close[0], *parts[2:]])


def _misspelt_program(pattern: KeyPattern) -> EntryProblem | None:
    """A program that is nowhere (on no PATH here, unknown to the program table) but one
    keystroke from one codecoder knows: `gti` for `git`. A program merely not installed
    (`terraform` on a laptop without it) is a fine entry: it matches when it is."""
    program = pattern.levels[0] if pattern.levels else WILDCARD
    if program == WILDCARD or "/" in program or canonical_name(program) in PROGRAMS:
        return None
    close = _known_program_near(program)
    if close is None or shutil.which(program) is not None:
        return None
    parts = pattern.action.split(":")
    meant = ":".join([pattern.tool, close, *parts[1:]])
    reason = f"{program} is no program on this PATH, nor one codecoder knows"
    return EntryProblem("unknown_program", reason, meant)


@functools.cache
def _programs_by_variant() -> dict[str, tuple[str, ...]]:
    """The program table's names by each of their one-letter-shorter variants and themselves:
    two names one keystroke apart always share one (symmetric deletion), so a name's
    neighbours are found in a few lookups, however long the table."""
    found: dict[str, set[str]] = {}
    for name in PROGRAMS:
        for variant in (name, *(name[:i] + name[i + 1 :] for i in range(len(name)))):
            found.setdefault(variant, set()).add(name)
    return {variant: tuple(sorted(names)) for variant, names in found.items()}


@functools.lru_cache(maxsize=4096)
def _known_program_near(name: str) -> str | None:
    """The program the table knows one keystroke from `name` (3 letters or more), or None:
    checked for every command entry of a file that may hold thousands."""
    if len(name) < 3:
        return None
    index = _programs_by_variant()
    variants = (name, *(name[:i] + name[i + 1 :] for i in range(len(name))))
    near = {known for variant in variants for known in index.get(variant, ())}
    return next((known for known in sorted(near) if one_keystroke_apart(name, known)), None)
