"""The permission model's vocabulary: what a call asks for, and what a grant can record.

`Permission.none()` runs without asking; `Permission.ask(key)` goes through the lookup chain
(permissions.chain) with a `PermissionKey`: what a grant is for, the entries an
"always" answer may record (`GrantLevel`), and what deny rules see of a command (`DenyView`).
`CallSite` is where a call would run, the one thing besides its arguments a key may depend on.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecoder.foundation.ceiling import EnvironmentTag


class KeyStyle(enum.StrEnum):
    """How the action part of a tool's keys is matched by allowlist and deny patterns."""

    NAME = "name"  # the key is the tool name alone (`commit`) or an exact name
    # program and subcommand (`run_command:git:push`), see runtime.permissions.commandkey
    COMMAND = "command"
    PATH = "path"  # a workspace-relative path, matched by glob (`write_file:tests/**`)


# The characters that make a pattern more than a literal: glob characters, the `:` that
# separates the levels of a command pattern, and the `"` that starts a whole-command pattern.
_PATTERN_SYNTAX = re.compile(r'[][*?:"]')


def escape_literal(text: str) -> str:
    """`text` as a pattern that matches only itself: each special character in brackets.

    `a*b.txt` becomes `a[*]b.txt`, `test:unit` becomes `test[:]unit`. Keys recorded from the
    human's answers go through this, so a path named `**` is granted as that one path.
    """
    return _PATTERN_SYNTAX.sub(lambda match: f"[{match.group()}]", text)


def literal_of(pattern: str) -> str | None:
    """The one text `pattern` matches when it is literal under `escape_literal`'s escaping
    (each glob character alone in brackets: `a[*]b` is `a*b`), else None: a real wildcard
    (`*`, `?`), a class (`[ab]`) or a stray bracket. `:` and `"` stand for themselves."""
    literal: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "[":
            if pattern[index + 2 : index + 3] != "]" or pattern[index + 1] not in '[]*?:"':
                return None
            literal.append(pattern[index + 1])
            index += 3
            continue
        if char in "*?]":
            return None
        literal.append(char)
        index += 1
    return "".join(literal)


@dataclass(frozen=True, slots=True)
class GrantLevel:
    """One allowlist entry an "always" answer can record for a key, and what it covers.

    `entry` is a pattern that matches the key (`run_command:git:status`); `covers` says in
    words what else it matches, for the prompt ("only `git status …` commands"). `also` are
    entries recorded with it by the same answer, where one grant is several keys: a package
    index's hosts (`network:pypi.org` with `network:files.pythonhosted.org`), any file edited
    or written (`edit_file:**` with `write_file:**`).
    """

    entry: str
    covers: str
    also: tuple[str, ...] = ()

    @property
    def entries(self) -> tuple[str, ...]:
        """Every entry the answer records: `entry`, then `also`."""
        return (self.entry, *self.also)


@dataclass(frozen=True, slots=True)
class Preview:
    """What a call would change, shown with its question before the human answers: one line
    that says what and how much (`replaces src/app.py: 1,204 → 1,388 bytes`), then a few lines
    (a diff, a new file's head), already bounded. Lines are the file's text as it is: the
    question neutralises them as it shows them."""

    summary: str
    lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DenyView:
    """One command as deny rules see it: the canonical name of its program (`git` for
    `/usr/lib/git-core/git-push`; `runtime.permissions.programs.ANY` when the parser cannot know it)
    and the lower-cased words after it, `words[start:]` (views of one command share `words`).
    `sub_any`: the word in its subcommand's place could be anything (an expansion, a git
    alias), so it counts as whichever subcommand a deny rule names. `glob`: the program word
    is a pattern bash would expand against file names (`/usr/bin/gi?`, `r[m]`), so it counts
    as every program whose name it matches.
    """

    program: str
    words: tuple[str, ...]
    start: int = 0
    sub_any: bool = False
    glob: bool = False


@dataclass(frozen=True, slots=True)
class PermissionKey:
    """What a grant is for: `("run_command", "git:status", "run_command:git:status")`.

    `raw` is the whole key, shown to the human and written to the audit log. Keys of compound
    commands are collision-free: their action is the JSON-quoted command, which no program name
    can equal.

    `levels` are the entries an "always" answer may record, narrowest first: the exact key
    (escaped, so a path named `a*b` is granted as that path only), then, for a command whose
    narrow key names a subcommand, the program-wide key, for a file its directory
    (`edit_file:src/report/**`). Empty means just `raw`. `widest`, where a tool names one, is
    the widest entry offered for the project (`edit_file:**`: any file in the workspace); a
    simple command's (`run_command:*`) is named by the engine, which knows the sandbox.

    For command keys, `path` is what grants are matched against (the program as written, then
    the subcommand levels the program table names: `("git", "status")`), and `views` what deny
    rules are matched against: the program's canonical name (`git` for
    `/usr/lib/git-core/git-push`) and the words after it. A compound key's views (every command
    the parser can see in the string) are read when a deny rule needs them
    (`runtime.permissions.commandkey.compound_views`).
    A key that names several paths (a move: source and destination) lists them in `paths`.

    Command keys also say what the runtime knows of the command's form
    (`runtime.permissions.commandkey`): `read_only` names the programs of a read-only command
    or command line (it may then run with no question where it runs confined read-only),
    `filters` is what follows the argv of an output-filter pipeline (bash runs the argv, then
    this), `needs_host` why it would fail contained (its question offers the host),
    `assignments` the harmless assignments the command line starts with, set aside from the
    key (`TZ=UTC`, `runtime.permissions.assignments`): bash sets them for the argv it runs.
    """

    tool: str
    action: str
    raw: str
    style: KeyStyle = KeyStyle.NAME
    compound: bool = False
    argv: tuple[str, ...] | None = None
    protected: bool = False
    subject: str = ""  # what the call does, in full, for the human (the command, the path)
    # What the human should know besides the subject (where the program lives, the workspace
    # code it runs), one remark each.
    notes: tuple[str, ...] = ()
    # What exactly would run, for keys whose grants are pinned to it (a capability's manifest
    # and code): a project grant recorded with another digest does not cover this key.
    digest: str | None = None
    levels: tuple[GrantLevel, ...] = ()
    widest: GrantLevel | None = None
    path: tuple[str, ...] = ()
    views: tuple[DenyView, ...] = ()
    paths: tuple[str, ...] = ()
    read_only: str = ""
    filters: str = ""
    needs_host: str = ""
    assignments: tuple[str, ...] = ()
    # What the call would change, computed only when a question is shown (it reads files).
    preview: Callable[[], Preview] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def named(cls, tool: str, action: str = "", **kw: Any) -> PermissionKey:
        raw = f"{tool}:{action}" if action else tool
        return cls(tool=tool, action=action, raw=raw, **kw)

    @property
    def grant_levels(self) -> tuple[GrantLevel, ...]:
        """`levels`, or the key itself when it has none."""
        return self.levels or (GrantLevel(self.raw, "exactly this key"),)


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where a call would run: what a key may depend on besides the call's arguments."""

    workspace: Path
    environment: EnvironmentTag
    # Hosts (host, port) whose git smart-HTTP requests the credential broker serves in this
    # project's sandboxes: routed in the user's configuration and admitted by the egress
    # allowlist (`runtime.config.project.ProjectConfig.credential_hosts`).
    credential_hosts: tuple[tuple[str, int], ...] = ()
    # Where the caller stands in the workspace ("." for the workspace itself), where a command
    # runs and its relative words lead from (runtime.tools.files.paths).
    standing: str = "."

    @property
    def directory(self) -> Path:
        """The directory a command runs in."""
        return self.workspace if self.standing == "." else self.workspace / self.standing


@dataclass(frozen=True, slots=True)
class Permission:
    """`Permission.none()` runs without asking; `Permission.ask(key)` goes through the chain.

    `Permission.read_only(key)` is a read-only command that will run confined read-only: deny
    rules still apply to it, then it runs with no question (SPEC §5), where its environment
    confines it read-only (`EnvironmentTag.confines_read_only`); anywhere else it is asked as
    `ask(key)` would be. `host`, for a command that would fail contained, is its key where it
    would run on the host: the question offers that as an explicit choice. With
    `host_after_contained` (a command that may well work contained, with the network: `npm
    install`, `git fetch` of an https remote), the host is offered only by a later question
    in the session, once the contained route was: until then it is a contained command like
    any other.
    """

    key: PermissionKey | None = None
    reads_only: bool = False
    host: PermissionKey | None = None
    host_after_contained: bool = False

    @classmethod
    def none(cls) -> Permission:
        return cls(None)

    @classmethod
    def ask(
        cls,
        key: PermissionKey,
        *,
        host: PermissionKey | None = None,
        host_after_contained: bool = False,
    ) -> Permission:
        return cls(key, host=host, host_after_contained=host_after_contained and host is not None)

    @classmethod
    def read_only(cls, key: PermissionKey) -> Permission:
        return cls(key, reads_only=True)

    @property
    def needs_asking(self) -> bool:
        return self.key is not None
