"""Another agent's tool call, as the codecoder call that does the same thing (`map_call`).

The hooks (`runtime.interfaces.hooks`) judge a host's call by the codecoder call it maps to, so
the mapping must read the call exactly as the host will carry it out, and fail closed where it
cannot tell:

* Tool names. Claude Code names an MCP tool `mcp__<server>__<tool>` (both with every character
  outside `[A-Za-z0-9_-]` replaced by `_`): a server named `codecoder__tools` and codecoder's
  own tool `tools__run` give the same `mcp__codecoder__tools__run`, so a name whose tool part
  holds `__` (or starts with `_`) is ambiguous and is not taken for codecoder's own. Gemini CLI
  names MCP tools `mcp_<server>_<tool>`, where `_` cannot separate the two at all, and says
  which server and tool a call is for in the event's `mcp_context`: only that is believed.
  A tool of codecoder's own server is `own_server` (the server asks for it itself); the hook
  then checks that codecoder has such a tool.
* Paths are resolved as the host will open them (`..`, symlinks; a relative one from the
  agent's working directory, the `cwd` of the hook's event, when that is in the workspace); a
  path outside the workspace is never mapped. A shell command runs in that directory too.
* URLs: every URL the host will fetch is judged (`urls`), not only the first: Gemini's
  `web_fetch` fetches each token of its prompt that holds `://`, Claude Code's `WebFetch` its
  `url`. Where URL parsers disagree (a backslash, which browsers read as `/`; userinfo;
  percent-escapes in the host), each reading is judged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import unquote

__all__ = ["HOST_INTERNAL", "Mapped", "map_call"]

Sandbox = Literal["docker", "bwrap"]

# Tools of the host that act only inside the host's own conversation (plans, to-do lists,
# sub-agents whose calls come through this hook themselves): the host decides them.
HOST_INTERNAL: Final = frozenset(
    {
        "TodoWrite",
        "Task",
        "Agent",
        "ExitPlanMode",
        "EnterPlanMode",
        "AskUserQuestion",
        "write_todos",
        "ask_user",
        "activate_skill",
        "get_internal_docs",
        "save_memory",
    }
)
_CLAUDE_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class Mapped:
    """The codecoder call that does what the host's call does; `tool` None: no mapping, and
    `problem` says why: `refused`, a call codecoder would refuse (a path outside the workspace
    and its read roots, a command run elsewhere, input no call can take), denied as codecoder
    denies it; otherwise (a tool codecoder does not know) asked, never allowed.
    `host_internal`: the host decides alone. `urls`: every URL the host's call fetches, each
    to be judged."""

    tool: str | None
    args: dict[str, Any]
    problem: str = ""
    refused: bool = False
    host_internal: bool = False
    shell: bool = False  # a shell command: the one thing `--sandbox` rewrites
    own_server: bool = False  # a tool of codecoder's MCP server, which asks for itself
    urls: tuple[str, ...] = ()
    # Where a shell command runs, in the workspace (its paths are made workspace-relative).
    standing: str = "."


def map_call(
    host_tool: str,
    tool_input: Mapping[str, Any],
    workspace: Path,
    *,
    sandbox: Sandbox | None = None,
    mcp_server: str = "codecoder",
    mcp_context: object = None,
    read_roots: Mapping[str, Path] | None = None,
    cwd: Path | None = None,
) -> Mapped:
    """Map one host tool call (either host's names) onto a codecoder call. `mcp_context` is
    what Gemini CLI's event says of an MCP tool's server and tool; `read_roots` the project's
    extra read roots (a read there is `@name/path`, as codecoder's read tools take it); `cwd`,
    the agent's working directory, which relative paths are read from when it is in the
    workspace (otherwise, as by default, the workspace itself: where the agent's file tools read
    them from)."""
    roots = dict(read_roots or {})
    here = workspace
    if cwd is not None and Path(os.path.realpath(cwd)).is_relative_to(workspace):
        here = Path(os.path.realpath(cwd))
    if host_tool in HOST_INTERNAL:
        return Mapped(None, {}, host_internal=True)
    own = _own_server_tool(host_tool, mcp_server, mcp_context)
    if own is not None:
        name, problem = own
        if name is None:
            return Mapped(None, {}, problem)
        return Mapped(name, dict(tool_input), own_server=True)
    text = _text_fields(tool_input)
    if host_tool in ("Bash", "run_shell_command"):
        command = text.get("command")
        if command is None:
            return _refused(f"{host_tool} without a command")
        where = text.get("dir_path") or text.get("directory") or str(here)
        standing = _inside(workspace, where, here)
        if standing is None:
            return _refused(
                f"the command runs in {where}, outside the workspace {workspace}: codecoder "
                "runs commands in the workspace only"
            )
        tool = "run_container" if sandbox == "docker" else "run_command"
        return Mapped(tool, {"command": command}, shell=True, standing=standing)
    if host_tool in ("Read", "read_file"):
        path = text.get("file_path") or text.get("absolute_path")
        return _on_path("read_file", path, workspace, here, roots)
    if host_tool in ("Write", "write_file"):
        mapped = _on_path("write_file", text.get("file_path"), workspace, here)
        return _with(mapped, content=text.get("content", ""))
    if host_tool in ("Edit", "MultiEdit", "replace", "NotebookEdit"):
        path = text.get("file_path") or text.get("notebook_path")
        # The key of an edit is its path; the strings only have to make a valid edit.
        return _with(_on_path("edit_file", path, workspace, here), old_string="a", new_string="b")
    if host_tool in ("LS", "list_directory"):
        listed = text.get("path") or text.get("dir_path") or "."
        return _on_path("list_dir", listed, workspace, here, roots)
    if host_tool in ("Glob", "glob", "Grep", "grep_search", "grep", "search_file_content"):
        base = text.get("path") or text.get("dir_path") or "."
        tool = "glob" if host_tool in ("Glob", "glob") else "grep"
        # The pattern is codecoder's to judge (a glob reaching out with `/` or `..` is refused
        # by its validation, as `codecoder decide glob` refuses it).
        return _with(_on_path(tool, base, workspace, here, roots), pattern=text.get("pattern", ""))
    if host_tool in ("WebFetch", "web_fetch"):
        fetched = [text["url"]] if "url" in text else []
        if host_tool == "web_fetch":
            # Each whitespace-separated token with `://` whose scheme is http(s), as Gemini
            # CLI's web_fetch picks the URLs of its prompt.
            fetched += [
                token
                for token in text.get("prompt", "").split()
                if token.lower().startswith(("http://", "https://"))
            ]
        if not fetched:
            return _refused("no URL to fetch")
        urls = tuple(dict.fromkeys(u for url in fetched for u in _readings(url)))
        return Mapped("web_fetch", {"url": fetched[0]}, urls=urls)
    if host_tool in ("WebSearch", "google_web_search"):
        return Mapped("web_search", {"query": text.get("query") or "?"})
    return Mapped(None, {}, f"codecoder does not know the tool {host_tool!r}")


def _own_server_tool(
    host_tool: str, mcp_server: str, mcp_context: object
) -> tuple[str | None, str] | None:
    """None: not a tool of codecoder's server. Otherwise (its tool name, "") or, when the
    name could as well be another server's, (None, why)."""
    if isinstance(mcp_context, Mapping):
        server, tool = mcp_context.get("server_name"), mcp_context.get("tool_name")
        if server != mcp_server:
            return None
        if not isinstance(tool, str) or not tool:
            return None, f"{host_tool}: the host names no tool of the {mcp_server} server"
        return tool, ""
    prefix = f"mcp__{_CLAUDE_NAME.sub('_', mcp_server)}__"
    if not host_tool.startswith(prefix):
        return None
    tool = host_tool[len(prefix) :]
    if not tool or "__" in tool or tool.startswith("_"):
        return None, (
            f"{host_tool} could be a tool of another MCP server whose name starts with "
            f"{mcp_server}__ (the host joins server and tool names with __): ambiguous, so "
            "it is not taken for codecoder's own"
        )
    return tool, ""


def _readings(url: str) -> list[str]:
    """`url` as each parser involved could read it: as written; with `\\` as `/` (browsers
    and Node read it so in http URLs); with percent-escapes in its authority decoded."""
    readings = [url]
    slashed = url.replace("\\", "/")
    scheme, sep, rest = slashed.partition("://")
    if sep:
        authority, cut, tail = _split_authority(rest)
        # Userinfo ends at the last `@` of the authority; what follows is the host.
        decoded = unquote(authority.rpartition("@")[2])
        readings += [slashed, f"{scheme}://{decoded}{cut}{tail}"]
    return readings


def _split_authority(rest: str) -> tuple[str, str, str]:
    match = re.search(r"[/?#]", rest)
    if match is None:
        return rest, "", ""
    return rest[: match.start()], match.group(), rest[match.end() :]


def _text_fields(tool_input: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in tool_input.items() if isinstance(k, str) and isinstance(v, str)}


def _with(mapped: Mapped, **args: Any) -> Mapped:
    if mapped.tool is None:
        return mapped
    return Mapped(mapped.tool, {**mapped.args, **args})


def _refused(problem: str) -> Mapped:
    return Mapped(None, {}, problem, refused=True)


_READS = frozenset({"read_file", "list_dir", "glob", "grep"})


def _on_path(
    tool: str,
    path: str | None,
    workspace: Path,
    base: Path,
    roots: Mapping[str, Path] | None = None,
) -> Mapped:
    if not path:
        return _refused(f"{tool} without a path")
    relative = _inside(workspace, path, base)
    if relative is not None:
        return Mapped(tool, {"path": relative})
    absolute = os.path.isabs(os.path.expanduser(path))
    for name, root in (roots or {}).items() if tool in _READS and absolute else ():
        within = _inside(Path(os.path.realpath(root)), path, base)
        if within is not None:
            return Mapped(tool, {"path": f"@{name}" + ("" if within == "." else f"/{within}")})
    readable = "the workspace and the read roots codecoder.json names" if roots else "the workspace"
    return _refused(
        f"{path} is outside the workspace {workspace}: codecoder's {tool} reaches {readable} "
        "only, so it never allows this"
    )


def _inside(workspace: Path, path: str, base: Path) -> str | None:
    """`path` (relative ones read from `base`) relative to the workspace, after resolving `..`
    and symlinks; None outside it."""
    if "\x00" in path:
        return None
    candidate = Path(os.path.expanduser(path))
    if not candidate.is_absolute():
        candidate = base / candidate
    resolved = Path(os.path.realpath(candidate))
    try:
        relative = resolved.relative_to(workspace)
    except ValueError:
        return None
    return relative.as_posix() or "."
