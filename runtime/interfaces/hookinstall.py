"""`codecoder hook install AGENT`: codecoder written into another agent's settings file.

    codecoder hook install claude-code [--user | --project [DIR]]
                                       [--sandbox docker | --host-shell] [--yes | --print]
    codecoder hook install gemini      [--user | --project [DIR]]
                                       [--sandbox docker | --host-shell] [--yes | --print]
    codecoder hook install codex       [--user | --project [DIR]] [--yes | --print]

What is written, and where (user level by default; `--project` for the project's own file):

    claude-code  ~/.claude/settings.json ($CLAUDE_CONFIG_DIR) or PROJECT/.claude/settings.json:
                 `codecoder hook claude-code` on PreToolUse, PostToolUse (every tool),
                 SessionStart and SessionEnd
    gemini       ~/.gemini/settings.json or PROJECT/.gemini/settings.json: `codecoder hook
                 gemini` on BeforeTool, AfterTool (every tool), SessionStart and SessionEnd
    codex        ~/.codex/config.toml ($CODEX_HOME) or PROJECT/.codex/config.toml: codecoder as
                 Codex's MCP server (`required`, so Codex stops rather than run without it;
                 Codex's own shell off): Codex's hooks must be trusted by hash in its own
                 config before they run, and its PreToolUse cannot ask, so the MCP server is
                 how codecoder decides there

Fail closed. Each hook names the codecoder that wrote it by its absolute path
(`interfaces.installation`), so a host started without codecoder on its PATH still runs it; and
should that file go away (an uninstall, a moved venv), the hook command ends in `|| { …; exit
2; }`: exit status 2 is how both hosts are told "blocked" (any other failure of a hook is only
a warning to them, and the call would run unjudged). At SessionStart the same command runs
once, so a missing codecoder is said at once, not at the first tool call.

Nothing is lost. The file is read first; a file that is not valid JSON (TOML for Codex) is
reported with its line and column and left as it is. Everything in it is kept: only the hook
entries that run a codecoder hook for this agent are replaced (so installing again, or with
another codecoder, leaves one), and the change is shown as a diff before it is written
(atomically, keeping the file's mode).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.errors import ConfigError

__all__ = [
    "AGENTS",
    "HOOK_EVENTS",
    "Installation",
    "hook_command",
    "plan_install",
    "settings_file",
]

Agent = Literal["claude-code", "gemini", "codex"]
Shell = Literal["bwrap", "docker", "host"]  # where the agent's own shell commands run
AGENTS: Final[tuple[Agent, ...]] = ("claude-code", "gemini", "codex")

# The events each host runs codecoder's hook on; those with a matcher take every tool.
HOOK_EVENTS: Final[Mapping[str, tuple[tuple[str, bool], ...]]] = {
    "claude-code": (
        ("PreToolUse", True),
        ("PostToolUse", True),
        ("SessionStart", False),
        ("SessionEnd", False),
    ),
    "gemini": (
        ("BeforeTool", True),
        ("AfterTool", True),
        ("SessionStart", False),
        ("SessionEnd", False),
    ),
}

# A hook entry that runs codecoder's hook for a host: `… codecoder hook claude-code …` or
# `… python -m codecoder hook gemini …`.
_OURS = re.compile(r"(?:^|[\s/'\"])codecoder'?\s+hook\s+(claude-code|gemini)\b")


def settings_file(
    agent: Agent, project: Path | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The agent's settings file: the user's (`project` None) or the project's."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME") or Path.home())
    if agent == "claude-code":
        if project is not None:
            return project / ".claude" / "settings.json"
        directory = environ.get("CLAUDE_CONFIG_DIR")
        return (Path(directory) if directory else home / ".claude") / "settings.json"
    if agent == "gemini":
        return (project if project is not None else home) / ".gemini" / "settings.json"
    if project is not None:
        return project / ".codex" / "config.toml"
    directory = environ.get("CODEX_HOME")
    return (Path(directory) if directory else home / ".codex") / "config.toml"


def hook_command(agent: Agent, program: Sequence[str], *, shell: Shell = "bwrap") -> str:
    """The shell command a host runs for codecoder's hook: the absolute program, and a
    fallback that blocks (exit 2) when it cannot run. `shell` is where the agent's shell
    commands run: contained in @bwrap (the default, no option), in @docker, or on the host."""
    where = {"bwrap": [], "docker": ["--sandbox", "docker"], "host": ["--host-shell"]}[shell]
    words = [*program, "hook", agent, *where]
    missing = shlex.quote(
        f"the permission hook of codecoder ({shlex.join(program)}) did not run: the call is "
        "blocked (codecoder doctor says why)"
    )
    return f"{shlex.join(words)} || {{ echo {missing} >&2; exit 2; }}"


def hook_program(command: str) -> tuple[str, ...] | None:
    """The program of a hook command this module wrote (or the bare `codecoder hook …` of
    the README's old recipes); None when `command` is not codecoder's hook."""
    if not _OURS.search(command):
        return None
    try:
        words = shlex.split(command.split("||", 1)[0])
    except ValueError:
        return None
    if "hook" not in words:
        return None
    return tuple(words[: words.index("hook")])


@dataclass(frozen=True, slots=True)
class Installation:
    """What installing would do to one settings file: its text before and after."""

    agent: Agent
    file: Path
    before: str | None  # None: the file does not exist yet
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        before = (self.before or "").splitlines(keepends=True)
        after = self.after.splitlines(keepends=True)
        lines = difflib.unified_diff(
            before,
            after,
            str(self.file) if self.before is not None else "/dev/null",
            str(self.file),
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

    def write(self) -> None:
        mode = 0o600
        try:
            mode = stat.S_IMODE(self.file.stat().st_mode)
        except FileNotFoundError:
            self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_atomically(self.file, self.after.encode(), mode=mode)


def plan_install(
    agent: Agent,
    program: Sequence[str],
    *,
    project: Path | None = None,
    shell: Shell = "bwrap",
    environ: Mapping[str, str] | None = None,
) -> Installation:
    """What `hook install` would write; ConfigError (file, line, column) for a settings file
    that cannot be read as it must be, which is then left untouched."""
    file = settings_file(agent, project, environ)
    try:
        before: str | None = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read it: {exc}; nothing was written", file) from None
    if agent == "codex":
        after = _codex_settings(file, before, program)
    else:
        after = _json_settings(agent, file, before, program, shell)
    return Installation(agent, file, before, after)


def _json_settings(
    agent: Agent, file: Path, before: str | None, program: Sequence[str], shell: Shell
) -> str:
    settings: Any = {}
    if before is not None and before.strip():
        try:
            settings = json.loads(before)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"not valid JSON: {exc.msg}; nothing was written (fix it, then install again)",
                file,
                exc.lineno,
                exc.colno,
            ) from None
    if not isinstance(settings, dict):
        raise ConfigError("not a JSON object; nothing was written", file, 1, 1)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError('"hooks" is not an object; nothing was written', file)
    command = hook_command(agent, program, shell=shell)
    for event, matched in HOOK_EVENTS[agent]:
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f'"hooks.{event}" is not a list; nothing was written', file)
        kept = [group for group in (_without_ours(g, agent) for g in groups) if group is not None]
        ours: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
        if matched:
            ours = {"matcher": "*", **ours}
        # First, so that codecoder judges before any other hook of the user's runs.
        hooks[event] = [ours, *kept]
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def _without_ours(group: Any, agent: str) -> Any:
    """`group` without the hook entries that run codecoder's hook for `agent`; None when
    nothing else was in it."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return group
    entries = [
        entry
        for entry in group["hooks"]
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("command"), str)
            and (found := _OURS.search(entry["command"])) is not None
            and found.group(1) == agent
        )
    ]
    if not entries:
        return None
    return {**group, "hooks": entries}


_TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def _codex_settings(file: Path, before: str | None, program: Sequence[str]) -> str:
    text = before or ""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise ConfigError(
            f"not valid TOML: {message}; nothing was written (fix it, then install again)",
            file,
            int(where.group(1)) if where else None,
            int(where.group(2)) if where else None,
        ) from None
    lines = text.splitlines()
    # Drop the tables of codecoder's server (written before, by hand or by this command).
    kept: list[str] = []
    dropping = False
    for line in lines:
        table = _TABLE.match(line)
        if table is not None:
            name = table.group(1).replace('"', "").replace(" ", "")
            dropping = name == "mcp_servers.codecoder" or name.startswith("mcp_servers.codecoder.")
        if not dropping:
            kept.append(line)
    features = document.get("features")
    if not (isinstance(features, dict) and features.get("shell_tool") is False):
        kept = _set_in_table(kept, "features", "shell_tool = false")
    command, args = program[0], [*program[1:], "serve"]
    block = [
        "[mcp_servers.codecoder]",
        f"command = {json.dumps(command)}",
        f"args = {json.dumps(args)}",
        'env_vars = ["XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"]',
        "required = true",
        'default_tools_approval_mode = "approve"',
    ]
    while kept and not kept[-1].strip():
        kept.pop()
    after = "\n".join([*kept, *([""] if kept else []), *block]) + "\n"
    server = tomllib.loads(after)["mcp_servers"]["codecoder"]
    assert server["command"] == command and tomllib.loads(after)["features"]["shell_tool"] is False
    return after


def _set_in_table(lines: list[str], table: str, setting: str) -> list[str]:
    """`lines` with `setting` (`name = value`) in `[table]`, replacing the name's line there;
    the table added at the end when there is none."""
    name = setting.split("=", 1)[0].strip()
    out: list[str] = []
    inside = placed = False
    for line in lines:
        header = _TABLE.match(line)
        if header is not None:
            inside = header.group(1).strip() == table
            out.append(line)
            if inside:
                out.append(setting)
                placed = True
            continue
        if inside and re.match(rf"^\s*{re.escape(name)}\s*=", line):
            continue
        out.append(line)
    if not placed:
        while out and not out[-1].strip():
            out.pop()
        out += [*([""] if out else []), f"[{table}]", setting]
    return out
