"""Which templates the warm pool makes: codecoder's own hardened sandboxes, and nothing else.

The pool's server creates containers from templates its clients send. Its clients are the
user's own processes, which could run Docker themselves; still, the server is a standing
service, so it makes only what a session of this runtime would make with settings no looser
than the defaults, and refuses the rest, whoever asks:

* the agent as entrypoint, started as root with at most the agent's four capabilities;
* no network, a read-only root filesystem, tmpfs mounts that are nosuid and nodev;
* commands as a user that is not root;
* bind mounts only, and at most one egress directory (made empty by the pool for each sandbox,
  at `containers.EGRESS_MOUNT`, inside the root-only tmpfs `EGRESS_PARENT`): the workspace
  at /workspace, and read-only mounts of paths inside it at the
  same place inside /workspace, every source with its identity; a workspace that is neither
  `/`, nor the home directory or above it, nor overlapping the runtime's state or
  configuration.

A session whose settings loosen any of these (or that needs a synced volume) makes its own
sandbox; the pool is only ever an accelerator of the default shape.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from codecoder.environments.docker.containers import (
    AGENT_CAPABILITIES,
    AGENT_COMMAND,
    AGENT_USER,
    EGRESS_MOUNT,
    EGRESS_PARENT,
)
from codecoder.environments.docker.settings import WORKSPACE_MOUNT
from codecoder.environments.engineseam import SandboxTemplate
from codecoder.foundation.state import overlapping_directory

__all__ = ["refusal"]


def refusal(template: SandboxTemplate) -> str | None:
    """Why the pool will not make `template`, or None when it will."""
    if template.entrypoint != AGENT_COMMAND or template.user != AGENT_USER:
        return "its entrypoint is not the sandbox agent, started as root"
    if not set(template.capabilities) <= set(AGENT_CAPABILITIES):
        return "it adds capabilities the agent does not need"
    if 0 in template.command_user:
        return "its commands would run as root"
    if template.network != "none":
        return "it has a network"
    if not template.read_only_rootfs:
        return "its root filesystem is writable"
    for path, options in template.tmpfs:
        flags = set(options.split(","))
        if not {"nosuid", "nodev"} <= flags:
            return f"its tmpfs {path} allows setuid programs or devices"
    return _mounts_problem(template)


def _mounts_problem(template: SandboxTemplate) -> str | None:
    workspaces = [m for m in template.mounts if m.target == WORKSPACE_MOUNT]
    if len(workspaces) != 1 or workspaces[0].kind != "bind":
        return "it does not bind-mount one workspace at /workspace"
    workspace = workspaces[0]
    source = workspace.source
    if not os.path.isabs(source) or os.path.normpath(source) != source or source == "/":
        return "its workspace is not an absolute, normal path below /"
    home = Path.home()
    if Path(source) == home or Path(source) in home.parents:
        return "its workspace is the home directory or above it"
    overlap = overlapping_directory(Path(source))
    if overlap is not None:
        return "its workspace overlaps the runtime's state or configuration"
    egress = [m for m in template.mounts if m.kind == "egress"]
    if egress:
        tmpfs = dict(template.tmpfs)
        if (
            len(egress) > 1
            or egress[0].target != EGRESS_MOUNT
            or egress[0].source
            or "mode=700" not in tmpfs.get(EGRESS_PARENT, "").split(",")
        ):
            return "its egress directory is not one, inside the agent's root-only tmpfs"
    for mount in template.mounts:
        if mount.kind == "egress":
            continue
        if mount.kind != "bind" or mount.identity is None:
            return f"{mount.target} is not a bind mount of a known directory"
        if mount is workspace:
            continue
        target = mount.target
        if not target.startswith(WORKSPACE_MOUNT + "/") or os.path.normpath(target) != target:
            return f"{target} is not inside /workspace"
        relative = PurePosixPath(target).relative_to(WORKSPACE_MOUNT)
        if not mount.read_only or mount.source != os.path.join(source, str(relative)):
            return f"{mount.target} is not a read-only mount of the same path in the workspace"
    return None
