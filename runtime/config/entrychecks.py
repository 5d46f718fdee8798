"""The entries of a project or user file checked against the tools they name.

Each allowlist entry and deny rule must be a pattern (`KeyPattern`) for a tool the runtime has,
read the way that tool's keys read; otherwise it is reported (`invalid_pattern`,
`unknown_tool`) and grants or denies nothing. A pattern that names a tool alone
(`matches_nothing`) or can never match a call (`never_matches`: an error for a deny rule, which
would protect nothing while looking as if it did) is reported too. The tools are seen through
`ToolInfo`, which a `runtime.tools.base.Tool` is.

Grants for capabilities (`run_capability:<name>`) are checked against the capability they name
(`runtime.config.capabilities`): its environment gives the ceiling (a @shell capability's entry is a
ceiling_violation), and the entry's digest must be one the runtime recorded when the human
approved it. So:

    capability_not_pinned  warning  no digest: grants nothing, the capability asks again
    digest_not_approved    error    a digest the runtime never recorded as approved (edited or
                                    copied by hand): grants nothing
    capability_changed     warning  an approved digest, but the capability changed since: it
                                    asks again (the entry holds again if the code is restored)
    unknown_capability     warning  no such capability is loaded
    capability_wildcard    warning  `run_capability:*` cannot be pinned to one capability's code
    invalid_capability     error    a capability directory that cannot be loaded (bad manifest,
                                    ...): it is not offered as a tool
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from codecoder.config.capabilities import (
    APPROVALS_DIR,
    CAPABILITIES_DIR,
    CapabilitySet,
    is_approved,
)
from codecoder.config.projectfile import AllowEntry, Diagnostic, Severity
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.protected import AGENT_SETTINGS, PROTECTED_NAMES
from codecoder.permissions.keys import KeyStyle
from codecoder.permissions.patterns import KeyPattern, PatternError, never_matches

__all__ = ["ToolInfo", "capability_entry_holds", "checked_pattern", "only_protected"]


class ToolInfo(Protocol):
    """What the configuration needs to know of a tool to check an entry for it (a
    `runtime.tools.base.Tool` is one): where it runs, where it may be bound, how its keys read."""

    @property
    def environment(self) -> EnvironmentTag: ...
    @property
    def bindable(self) -> frozenset[EnvironmentTag]: ...
    @property
    def key_style(self) -> KeyStyle: ...
    @property
    def asks(self) -> bool: ...


def capability_entry_holds(
    root: Path,
    entry: AllowEntry,
    pattern: KeyPattern,
    capabilities: CapabilitySet,
    diagnostics: list[Diagnostic],
) -> bool:
    """Report what is wrong with a `run_capability:` entry; False if it must grant nothing."""
    name, digest = pattern.action, entry.digest

    def report(severity: Severity, code: str, message: str) -> None:
        diagnostics.append(
            Diagnostic(
                severity, code, message, key=entry.pattern, line=entry.line, column=entry.column
            )
        )

    if not name or "*" in name:
        report(
            "warning",
            "capability_wildcard",
            f"{entry.pattern} names no single capability, but a capability grant holds only "
            "for the approved code of one: the entry grants nothing",
        )
        return False
    capability = capabilities.get(name)
    if capability is None:
        report(
            "warning",
            "unknown_capability",
            f"{entry.pattern}: there is no capability {name!r} in {CAPABILITIES_DIR}/ (or it "
            "cannot be loaded); the entry grants nothing until there is",
        )
    if digest is None:
        report(
            "warning",
            "capability_not_pinned",
            f"{entry.pattern} has no digest, but a capability grant holds only for the code "
            "that was approved: it grants nothing, and the capability is asked for again",
        )
        return False
    if not is_approved(root, name, digest):
        report(
            "error",
            "digest_not_approved",
            f"{entry.pattern} carries the digest {digest!r}, which the runtime never recorded "
            f"as approved (no record in {APPROVALS_DIR}/{name}/): it was edited or written by "
            "hand. The entry grants nothing; to trust the capability as it is, run it and "
            "answer AlwaysThisProject",
        )
        return False
    if capability is not None and capability.digest != digest:
        report(
            "warning",
            "capability_changed",
            f"{entry.pattern} was approved for {digest}, but {name} is now "
            f"{capability.digest}: its manifest or code changed since, so it is asked for again",
        )
    return True


def checked_pattern(
    raw: str,
    tools: Mapping[str, ToolInfo],
    diagnostics: list[Diagnostic],
    where: dict[str, Any],
    *,
    deny: bool,
) -> KeyPattern | None:
    try:
        pattern = KeyPattern.parse(raw)
    except PatternError as exc:
        diagnostics.append(Diagnostic("error", "invalid_pattern", str(exc), key=raw, **where))
        return None
    tool = tools.get(pattern.tool)
    if tool is None:
        diagnostics.append(
            Diagnostic(
                "error",
                "unknown_tool",
                f"{raw}: there is no tool named {pattern.tool!r}; known tools: "
                + ", ".join(sorted(tools)),
                key=raw,
                **where,
            )
        )
        return None
    try:
        pattern.check(tool.key_style)
    except PatternError as exc:
        diagnostics.append(Diagnostic("error", "invalid_pattern", str(exc), key=raw, **where))
        return None
    if not pattern.action and tool.asks and tool.key_style is not KeyStyle.NAME:
        diagnostics.append(
            Diagnostic(
                "warning",
                "matches_nothing",
                f"{raw} names the tool alone, which matches no call; did you mean {raw}:* ?",
                key=raw,
                **where,
            )
        )
        return pattern
    problem = never_matches(pattern, tool.key_style, asks=tool.asks, deny=deny)
    if problem is not None:
        # A deny rule that can never match protects nothing while looking as if it did: an
        # error. An allow entry that can never match only grants nothing: a warning.
        what = "deny rule" if deny else "entry"
        suggestion = f"; to mean that, write {problem.suggestion}" if problem.suggestion else ""
        diagnostics.append(
            Diagnostic(
                "error" if deny else "warning",
                "never_matches",
                f"{raw}: this {what} can never match a call: {problem.reason}{suggestion}",
                key=raw,
                **where,
            )
        )
    return pattern


def only_protected(pattern: KeyPattern) -> bool:
    head = pattern.action.split("/", 1)[0]
    return head in (*PROTECTED_NAMES, *AGENT_SETTINGS) and pattern.action != head + "*"
