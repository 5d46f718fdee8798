"""How the workspace reaches the @docker sandbox, and why: a bind mount, or a per-session volume
the host keeps in step (sync mode, `environments.docker.sync`).

`"workspace": "auto"` (the default) binds it, except

* when the engine is on another machine (DOCKER_HOST over TCP or SSH): it cannot see this one's
  directories;
* when the workspace belongs to root (and is not writable by everyone) and commands run as its
  owner (`"user": "auto"`). Commands
  never run as root in the sandbox, so they run as uid 10001, which a root-owned directory
  refuses through a bind mount (`touch x`: Permission denied). In sync mode they write the
  volume, which is theirs, and what they change comes back into the workspace as root's, through
  the same checks as every copy-back (protected paths, symlinks, the disk budget).

Why commands do not simply run as uid 0 (without capabilities, with no-new-privileges) in a
root-owned workspace: uid 0 still *owns* everything root owns, and ownership needs no capability.
In the container that is the in-container agent (root: a command could signal or stop it), the
root-only directory of the egress proxy's socket (a command could reach the proxy without the
agent's relay) and the root-owned tmpfs a capability's approved code is run from (a command
could rewrite it before the next run). On the host, the owner may set the set-uid bit on its own
files without any capability (`chmod u+s`): a file a command left in the workspace would be a
set-uid-root program for every local user who can reach it. What a command in a synced
root-owned workspace can do instead is attacked in tests/environments/docker/test_root_workspace.py:
it runs as uid 10001 without capabilities, cannot reach the agent, and what it leaves comes back
without set-uid or set-gid bits (`environments.docker.swap` keeps only the permission bits).

`"workspace": "bind"` with a root-owned workspace is obeyed, and `codecoder check` warns that
commands cannot write it.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from codecoder.environments.docker.engine import engine_is_local
from codecoder.environments.docker.settings import DockerSettings

__all__ = ["FALLBACK_UID", "WorkspaceMode", "workspace_mode"]

# Who commands run as when the workspace belongs to root (the image's user `sandbox`).
FALLBACK_UID: Final = 10001


@dataclass(frozen=True, slots=True)
class WorkspaceMode:
    """`mode` and why (`reason`, None for the plain default); `warning` when commands will not
    be able to write the workspace."""

    mode: Literal["bind", "sync"]
    reason: str | None = None
    warning: str | None = None

    @property
    def sync(self) -> bool:
        return self.mode == "sync"


def _root_owned(workspace: Path | None) -> bool:
    """Whether `workspace` belongs to root and is closed to other users: uid 10001 could not
    write it through a bind mount (one that anyone may write, as the audit's pool layer makes
    them, it could)."""
    if workspace is None:
        return False
    try:
        info = workspace.stat()
    except OSError:
        return False
    return info.st_uid == 0 and not info.st_mode & stat.S_IWOTH


def workspace_mode(settings: DockerSettings, workspace: Path | None) -> WorkspaceMode:
    """How `workspace` reaches the sandbox under `settings` (see the module docstring)."""
    if settings.workspace == "sync":
        return WorkspaceMode("sync", "as configured")
    root_owned = _root_owned(workspace) and settings.user == "auto"
    if settings.workspace == "bind":
        warning = (
            f"the workspace belongs to root and commands run as uid {FALLBACK_UID} (never as "
            'root): they cannot write it through a bind mount. Use "docker": {"workspace": '
            '"auto"} (a volume kept in step, changes copied back as root\'s), or a workspace '
            "owned by a user"
            if root_owned
            else None
        )
        return WorkspaceMode("bind", "as configured", warning)
    if not engine_is_local():
        return WorkspaceMode("sync", "the engine is on another machine")
    if root_owned:
        return WorkspaceMode(
            "sync",
            f"the workspace belongs to root, and commands run as uid {FALLBACK_UID}, never as "
            "root: they write a volume of their own, copied back as root's",
        )
    return WorkspaceMode("bind")
