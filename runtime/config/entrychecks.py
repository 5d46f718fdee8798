"""The entries of a project or user file checked against the tools they name.

Each allowlist entry and deny rule is checked as every entry is, wherever it is accepted
(`runtime.permissions.entries`): one that is not a pattern for a tool the runtime has, or can
never match a call, is an error with its line and column (`invalid_pattern`, `unknown_tool`,
`matches_nothing`, `never_matches`, `unknown_program`), and grants or denies nothing; a deny
rule so is a rule lost, and the file fails closed (`runtime.config.project`). The tools are
seen through `ToolInfo`, which a `runtime.tools.base.Tool` is.

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
from typing import Any

from codecoder.config.capabilities import (
    APPROVALS_DIR,
    CAPABILITIES_DIR,
    CapabilitySet,
    is_approved,
)
from codecoder.config.projectfile import AllowEntry, Diagnostic, Severity
from codecoder.foundation.protected import AGENT_SETTINGS, PROTECTED_NAMES
from codecoder.permissions.entries import ToolInfo, check_entry
from codecoder.permissions.patterns import KeyPattern

__all__ = ["ToolInfo", "capability_entry_holds", "checked_pattern", "only_protected"]


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
    """The entry's pattern, or None when it is no pattern or can never match a call (an error
    added to `diagnostics`, at `where`)."""
    checked = check_entry(raw, tools, deny=deny)
    problem = checked.problem
    if problem is None:
        return checked.pattern
    what = "deny rule" if deny else "entry"
    diagnostics.append(
        Diagnostic("error", problem.code, problem.describe(raw, what), key=raw, **where)
    )
    return None


def only_protected(pattern: KeyPattern) -> bool:
    head = pattern.action.split("/", 1)[0]
    return head in (*PROTECTED_NAMES, *AGENT_SETTINGS) and pattern.action != head + "*"
