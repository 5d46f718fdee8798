"""Where the runtime keeps what must stay out of the workspace's reach, and its own directory
in the workspace.

The state directory (`$XDG_STATE_HOME/codecoder`, by default `~/.local/state/codecoder`) holds
what the tools a runtime runs must not be able to change: per-project notes, records of trust,
the audit log, quarantined plants. Each project has its own subdirectory, named by a digest of
its resolved path, never inside the project itself.

`.codecoder/` in the workspace (a protected path) holds what belongs to the project: the
capabilities an agent wrote and their approvals, which are meant to be committed, and a few
machine-local files (the lock of codecoder.json, the pid files of running servers), which are
not. `workspace_directory` creates it with a `.gitignore` that ignores everything in it but
the capabilities and their approvals, itself included, so it never shows as untracked.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from codecoder.foundation.regularfile import read_regular_file

__all__ = [
    "config_directory",
    "overlapping_directory",
    "project_state_directory",
    "state_directory",
    "workspace_directory",
]


def state_directory(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/codecoder`, by default `~/.local/state/codecoder`. A relative
    XDG_STATE_HOME is ignored, as the XDG spec says."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "codecoder"


def config_directory(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/codecoder`, by default `~/.config/codecoder`: the user's own file
    (`config.json`). A relative XDG_CONFIG_HOME is ignored, as the XDG spec says."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "codecoder"


def overlapping_directory(project: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Why `project` (resolved) cannot be a workspace, or None: it holds the runtime's state
    directory or the user's configuration directory (a project in the home directory), or lies
    inside one. Every tool that may write the workspace, sandboxed ones included, could then
    rewrite trust records, audit logs or the user's own rules (a read root for `~/.ssh`)."""
    for what, directory in (
        ("the runtime's state directory", state_directory(environ)),
        ("your codecoder configuration", config_directory(environ)),
    ):
        resolved = Path(os.path.realpath(directory))
        if resolved == project or project in resolved.parents or resolved in project.parents:
            return (
                f"the project {project} and {what} ({resolved}) overlap: the tools that write "
                "the workspace could rewrite what the runtime trusts. Choose a project directory "
                "that neither holds nor lies in it, or set "
                + ("XDG_STATE_HOME" if "state" in what else "XDG_CONFIG_HOME")
                + " to a directory outside the project"
            )
    return None


def project_state_directory(project: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The state of one project: named by a digest of its path, not inside it."""
    digest = hashlib.sha256(str(project).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return state_directory(environ) / "projects" / digest


WORKSPACE_DIRECTORY = ".codecoder"
_GITIGNORE = (
    "# Written by codecoder. Only the capabilities and their approvals belong to the project;\n"
    "# everything else here is local to this machine.\n"
    "*\n!capabilities/\n!capabilities/**\n!approvals/\n!approvals/**\n"
)
# What earlier versions wrote, replaced when found: it left .codecoder/ itself untracked.
_OLD_GITIGNORES = frozenset({"audit.jsonl\n*.lock\n"})


def workspace_directory(project: Path) -> Path:
    """`<project>/.codecoder`, created with its `.gitignore` if missing."""
    directory = project / WORKSPACE_DIRECTORY
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    try:
        current: str | None = read_regular_file(ignore, limit=64 * 1024).decode(errors="replace")
    except FileNotFoundError:
        current = None
    except OSError:
        return directory  # a .gitignore that cannot be read is the user's business
    if current is None or current in _OLD_GITIGNORES:
        ignore.write_text(_GITIGNORE)
    return directory
