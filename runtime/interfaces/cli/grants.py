"""`codecoder allowlist`: every live grant of the project, where it came from, what it covers and
when it expires, and any of them revoked.

    list      codecoder.json's entries and deny rules, the user's file's deny rules, the session
              grants of the project's running processes (`codecoder serve`, `session`, a `call`
              or `replay` still running: answers and `--allow`), and the grants that hooks keep
              for Claude Code's and Gemini CLI's sessions
    revoke    KEY removed from codecoder.json, dropped by every running process that holds it
              (which confirms), and from every hook session
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecoder.foundation.errors import ConfigError
from codecoder.interfaces.cli.exit_codes import EXIT_FAILED, EXIT_OK
from codecoder.interfaces.cli.inputs import usage
from codecoder.interfaces.cli.output import prefixed, print_json
from codecoder.interfaces.cli.project import project_runtime

if TYPE_CHECKING:
    from codecoder.session import Runtime

_HOST_NAMES = {"claude-code": "Claude Code", "gemini": "Gemini CLI"}


@dataclass(frozen=True, slots=True)
class LiveGrant:
    """One grant in force, as `allowlist list` shows it."""

    key: str
    source: str  # project, session, hook
    origin: str  # where it is kept and how it came
    covers: str
    lasts: str  # in words: "until revoked", "while codecoder serve (pid 12) runs", "until 14:05"
    expiry: float | None  # a timestamp, or None when it ends with its file, process or session
    environment: str | None = None  # the environment a session grant holds in
    holds: bool = True  # False: the entry grants nothing (why: `problem`)
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "source": self.source,
            "origin": self.origin,
            "covers": self.covers,
            "lasts": self.lasts,
            "expiry": self.expiry,
            "environment": self.environment,
            "grants": self.holds,
            "problem": self.problem,
        }


def allowlist(args: argparse.Namespace) -> int:
    runtime = project_runtime(args)
    if args.action == "revoke":
        if not args.key:
            usage(
                "allowlist revoke needs the KEY to revoke (`codecoder allowlist list` shows them)"
            )
        return _revoke(runtime, args.key, args.json)
    grants = live_grants(runtime)
    file = runtime.config.file
    problems = _problems(runtime)
    entries = [
        {
            "key": e.pattern,
            "scope": e.scope,
            "line": e.line,
            "grants": e.grants and e.pattern not in problems,
            "problem": problems.get(e.pattern) if e.pattern in problems else None,
        }
        for e in file.allowlist
    ]
    denies = [
        {"key": rule.value, "line": rule.line, "file": rule.file}
        for rule in runtime.config.rules
        if rule.kind == "deny"
    ]
    # A rules file that cannot be read holds rules nobody knows: never listed as "none".
    unreadable = runtime.config.unreadable_reason
    if args.json:
        print_json(
            {
                "file": str(runtime.project_file),
                "allowlist": entries,
                "deny": denies,
                "grants": [g.to_json() for g in grants],
                **({"unreadable": unreadable} if unreadable else {}),
            }
        )
        return EXIT_FAILED if unreadable else EXIT_OK
    if unreadable:
        print(prefixed(unreadable), file=sys.stderr)
        return EXIT_FAILED
    _print_list(runtime, grants, denies)
    return EXIT_OK


def live_grants(runtime: Runtime) -> list[LiveGrant]:
    """Every grant in force for the project: codecoder.json's, the running processes' and the
    hooks' (deny rules are listed apart)."""
    from codecoder.interfaces.hooks import HOSTS, HookSessions
    from codecoder.interfaces.livegrants import live_sessions

    problems = _problems(runtime)
    found: list[LiveGrant] = []
    for entry in runtime.config.file.allowlist:
        holds = entry.grants and entry.pattern not in problems
        where = f"{runtime.project_file}" + (f" line {entry.line}" if entry.line else "")
        found.append(
            LiveGrant(
                entry.pattern,
                "project",
                where,
                _covers(runtime, entry.pattern),
                "until revoked",
                None,
                holds=holds,
                problem=None if holds else (problems.get(entry.pattern) or "scope"),
            )
        )
    for process in live_sessions(runtime.project_dir):
        name = f"{process.kind} (pid {process.pid})"
        for grant in process.grants:
            held = str(grant.get("entry"))
            origin = "--allow" if grant.get("origin") == "--allow" else "answered AlwaysThisSession"
            expiry = _expiry(grant.get("expiry"))
            runs = f"while {name} runs"
            found.append(
                LiveGrant(
                    held,
                    "session",
                    f"{name}, {origin}",
                    _covers(runtime, held),
                    runs if expiry is None else _until(expiry, runs),
                    expiry,
                    str(grant.get("environment")),
                )
            )
    for host in HOSTS:
        for session_id, grant in HookSessions(runtime.project_dir, host).every_grant():
            key = str(grant.get("key"))
            expiry = _expiry(grant.get("expiry"))
            session = f"the {_HOST_NAMES[host]} session {session_id[:12]}"
            ends = f"until {session} ends"
            found.append(
                LiveGrant(
                    key,
                    "hook",
                    f"{session}, approved at its prompt (codecoder hook {host})",
                    _covers(runtime, key),
                    ends if expiry is None else _until(expiry, ends),
                    expiry,
                    str(grant.get("environment")),
                )
            )
    return found


def _expiry(value: object) -> float | None:
    """A published expiry as a timestamp; None for "with its session" (-1) or none given."""
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def _problems(runtime: Runtime) -> dict[str, str]:
    return {
        **dict.fromkeys(runtime.config.ignored, "untrusted"),
        **{
            d.key: d.code
            for d in runtime.diagnostics
            if d.key and (d.severity == "error" or d.code == "untrusted") and d.file is None
        },
    }


def _covers(runtime: Runtime, entry: str) -> str:
    from codecoder.permissions.coverage import covers
    from codecoder.permissions.keys import KeyStyle

    tool = runtime.tools.get(entry.partition(":")[0])
    return covers(entry, tool.key_style if tool is not None else KeyStyle.NAME)


def _until(expiry: float, otherwise: str) -> str:
    shape = "%H:%M" if time.localtime(expiry)[:3] == time.localtime()[:3] else "%Y-%m-%d %H:%M"
    return f"{otherwise}, at most until {time.strftime(shape, time.localtime(expiry))}"


def _print_list(runtime: Runtime, grants: list[LiveGrant], denies: list[dict[str, Any]]) -> None:
    from codecoder.foundation.display import visible
    from codecoder.permissions.prompt import key_for_person

    if not grants and not denies:
        print(f"no grant and no deny rule for {runtime.project_dir}")
    for grant in grants:
        state = "" if grant.holds else f"  [grants nothing: {grant.problem}]"
        where = f" in {grant.environment}" if grant.environment else ""
        print(f"allow  {key_for_person(grant.key)}{state}")
        print(f"       covers {visible(grant.covers)}")
        print(f"       from {visible(grant.origin)}{where}; lasts {visible(grant.lasts)}")
    for deny in denies:
        where = "codecoder.json" if Path(deny["file"]) == runtime.project_file else deny["file"]
        line = f" line {deny['line']}" if deny["line"] else ""
        print(f"deny   {visible(str(deny['key']))}  ({visible(where)}{line})")
    if grants:
        print("(codecoder allowlist revoke KEY takes a grant back, wherever it is kept)")


def _revoke(runtime: Runtime, key: str, as_json: bool) -> int:
    from codecoder.config.writing import remove_allow_entry
    from codecoder.foundation.display import visible
    from codecoder.interfaces.hooks import HOSTS, HookSessions
    from codecoder.interfaces.livegrants import revoke_live

    done: list[str] = []
    failed: list[str] = []
    try:
        if remove_allow_entry(runtime.project_file, key):
            done.append(str(runtime.project_file))
    except ConfigError as exc:
        failed.append(f"{runtime.project_file} was left as it is: {exc}")
    confirmed, silent = revoke_live(runtime.project_dir, key)
    done += [f"{p.kind} (pid {p.pid})" for p in confirmed]
    failed += [f"{p.kind} (pid {p.pid}) did not confirm it dropped the grant" for p in silent]
    for host in HOSTS:
        for session_id in HookSessions(runtime.project_dir, host).revoke(key):
            done.append(f"the {_HOST_NAMES[host]} session {session_id[:12]}")
    meant, why = _not_granted(runtime, key) if not done and not failed else (None, "")
    if as_json:
        print_json(
            {"revoked": bool(done), "key": key, "from": done, "failed": failed, "meant": meant}
        )
    else:
        for where in done:
            print(f"revoked {visible(key)} from {visible(where)}")
        for problem in failed:
            print(prefixed(problem), file=sys.stderr)
        if why:
            print(prefixed(why), file=sys.stderr)
    return EXIT_OK if done and not failed else EXIT_FAILED


def _not_granted(runtime: Runtime, key: str) -> tuple[str | None, str]:
    """A key that nothing grants, as `revoke` says it: the granted key probably meant, or why
    it could never have been granted (checked as every entry is: `permissions.entries`)."""
    from codecoder.foundation.display import visible
    from codecoder.permissions.entries import ToolInfo, check_entry
    from codecoder.permissions.spellings import close_names
    from codecoder.tools.network import NETWORK

    granted = dict.fromkeys(grant.key for grant in live_grants(runtime))
    close = close_names(key, granted)
    why = f"{visible(key)} is not granted anywhere (`codecoder allowlist list`)"
    if close:
        return close[0], f"{why}; did you mean {visible(close[0])}?"
    tools: dict[str, ToolInfo] = {**runtime.tools, NETWORK.name: NETWORK}
    problem = check_entry(key, tools, deny=False).problem
    if problem is None:
        return None, why
    meant = f"; did you mean {problem.meant}?" if problem.meant and problem.unmatchable else ""
    return problem.meant, f"{why}, nor could it be: {visible(problem.reason)}{visible(meant)}"
