"""The user's own allow rules in another agent's settings, which codecoder's hooks honour.

A user of Claude Code or Gemini CLI who has allowed `ls` there (`"Bash(ls:*)"` in
`~/.claude/settings.json`) expects it to stay allowed once codecoder is the agent's permission
hook: the hook's "ask" would otherwise override it. So where codecoder would ask (never where it
denies, never for a protected path), `user_grant` looks for the rule in the user's *home*
settings, and only there: a project's `.claude/settings.json` or `.gemini/settings.json` comes
with the repository, and what it says is not the user's word.

Read, and understood only as far as codecoder can hold them to its own rules:

    Claude Code   ~/.claude/settings.json ($CLAUDE_CONFIG_DIR), `permissions.allow`:
                  `Bash(npm test)` exactly that command; `Bash(git log:*)`, `Bash(git log *)`
                  every simple command starting with those words; `Bash` every simple command;
                  a bare tool name (`Read`, `Edit`, `Write`, `WebFetch`, ...) every call of it
    Gemini CLI    ~/.gemini/settings.json, `tools.allowed`: `run_shell_command(git status)`
                  (a prefix of words), a bare tool name; ~/.gemini/policies/*.toml, rules with
                  `decision = "allow"`, a `toolName` and at most a `commandPrefix` (the file
                  Gemini's "Allow for all future sessions" writes)

A shell rule covers only a *simple* command (one program, literal words: codecoder's key names
its program) whose words start with the rule's; a compound command (`ls && rm -rf x`) is never
covered, as no grant of codecoder's covers one. A rule with a condition codecoder does not read
(`argsPattern`, `commandRegex`, modes, paths in parentheses) grants nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from codecoder.foundation.regularfile import read_regular_file
from codecoder.permissions.commandkey import key_command

__all__ = ["UserGrant", "user_grant"]

Host = Literal["claude-code", "gemini"]

_SHELL_TOOLS = {"claude-code": ("Bash",), "gemini": ("run_shell_command", "ShellTool")}


@dataclass(frozen=True, slots=True)
class UserGrant:
    """The user's rule that allows a call, and the file it is in."""

    rule: str
    file: Path

    def describe(self) -> str:
        home = Path.home()
        shown = f"~/{self.file.relative_to(home)}" if self.file.is_relative_to(home) else self.file
        return f"your own {shown} ({self.rule})"


def user_grant(
    host: Host,
    host_tool: str,
    tool_input: Mapping[str, Any],
    workspace: Path,
    environ: Mapping[str, str] | None = None,
) -> UserGrant | None:
    """The rule of the user's home settings of `host` that allows this call, if one does.

    A settings file that is, or leads, into the workspace is not the user's own: whatever
    may write the workspace (a sandboxed tool) could write it, so it grants nothing."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME") or Path.home())
    rules = _claude_rules(home, environ) if host == "claude-code" else _gemini_rules(home)
    inside = workspace.resolve()
    rules = [r for r in rules if not _within(r[1], inside)]
    command = tool_input.get("command") if host_tool in _SHELL_TOOLS[host] else None
    words = _simple_words(command) if isinstance(command, str) else None
    for rule, file, tool, prefix in rules:
        if host_tool in _SHELL_TOOLS[host]:
            if tool not in _SHELL_TOOLS[host] or words is None:
                continue
            if prefix is None or _starts_with(words, prefix):
                return UserGrant(rule, file)
        elif tool == host_tool and prefix is None:
            return UserGrant(rule, file)
    return None


# (the rule as written, its file, the tool it names, the words a command must start with or
#  be: ("exact", words) is encoded as a prefix ending in a marker)
_Rule = tuple[str, Path, str, tuple[str, ...] | None]
_EXACT = "\0end"  # a prefix ending with this matches only the very words before it


def _claude_rules(home: Path, environ: Mapping[str, str]) -> list[_Rule]:
    directory = Path(environ["CLAUDE_CONFIG_DIR"]) if environ.get("CLAUDE_CONFIG_DIR") else None
    file = (directory or home / ".claude") / "settings.json"
    settings = _json(file)
    permissions = settings.get("permissions")
    allow = permissions.get("allow") if isinstance(permissions, dict) else None
    rules: list[_Rule] = []
    for rule in allow if isinstance(allow, list) else ():
        if not isinstance(rule, str):
            continue
        tool, _, spec = rule.partition("(")
        if not spec:
            rules.append((rule, file, tool.strip(), None))
            continue
        if tool != "Bash" or not spec.endswith(")"):
            continue  # paths, domains: not read here
        spec = spec[:-1]
        if spec.endswith(":*") or spec.endswith(" *"):
            words = _split(spec[:-2])
        elif "*" in spec:
            continue  # a wildcard inside a word: not read here
        else:
            exact = _split(spec)
            words = (*exact, _EXACT) if exact else ()
        if words:
            rules.append((rule, file, "Bash", words))
    return rules


def _gemini_rules(home: Path) -> list[_Rule]:
    file = home / ".gemini" / "settings.json"
    tools = _json(file).get("tools")
    allowed = tools.get("allowed") if isinstance(tools, dict) else None
    rules: list[_Rule] = []
    for rule in allowed if isinstance(allowed, list) else ():
        if not isinstance(rule, str):
            continue
        tool, _, spec = rule.partition("(")
        if not spec:
            rules.append((rule, file, tool.strip(), None))
        elif tool in _SHELL_TOOLS["gemini"] and spec.endswith(")") and _split(spec[:-1]):
            rules.append((rule, file, tool, _split(spec[:-1])))
    policies = home / ".gemini" / "policies"
    for path in sorted(policies.glob("*.toml")) if policies.is_dir() else ():
        rules += _policy_rules(path)
    return rules


_POLICY_KEYS_READ = {"toolName", "commandPrefix", "decision", "priority"}


def _policy_rules(path: Path) -> list[_Rule]:
    try:
        document = tomllib.loads(read_regular_file(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    rules: list[_Rule] = []
    for rule in document.get("rule", []) if isinstance(document.get("rule"), list) else ():
        if not isinstance(rule, dict) or rule.get("decision") != "allow":
            continue
        if set(rule) - _POLICY_KEYS_READ:
            continue  # a condition not read here narrows the rule: it grants nothing here
        names = rule.get("toolName")
        names = [names] if isinstance(names, str) else names
        prefixes = rule.get("commandPrefix")
        prefixes = [prefixes] if isinstance(prefixes, str) else prefixes
        if not isinstance(names, list) or "*" in names:
            continue
        for name in names:
            if not isinstance(name, str):
                continue
            shown = f"{path.name}: {name}"
            if prefixes is None:
                rules.append((shown, path, name, None))
                continue
            for prefix in prefixes if isinstance(prefixes, list) else ():
                words = _split(prefix) if isinstance(prefix, str) else ()
                if words and name in _SHELL_TOOLS["gemini"]:
                    rules.append((f"{shown} {prefix!r}", path, name, words))
    return rules


def _within(path: Path, directory: Path) -> bool:
    try:
        return path.resolve().is_relative_to(directory)
    except (OSError, RuntimeError):  # a loop of links: not the user's file either
        return True


def _simple_words(command: str) -> tuple[str, ...] | None:
    """The words of a simple command as codecoder keys it (one program, literal words), else
    None: a compound command is never covered by a rule of the user's."""
    try:
        key = key_command(command)
    except Exception:  # whatever the parser raises: not simple
        return None
    return tuple(key.argv) if key.argv is not None else None


def _starts_with(words: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    if prefix and prefix[-1] == _EXACT:
        return words == prefix[:-1]
    return words[: len(prefix)] == prefix


def _split(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError:
        return ()


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_regular_file(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
