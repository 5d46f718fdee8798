"""The @docker environment's settings: the hardened defaults, and what loosens them.

Kept apart from environments.docker.environment so that reading codecoder.json (which may tighten or
loosen these) does not import the Docker SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final, Literal

from codecoder.environments.egress import Egress

WORKSPACE_MOUNT: Final = "/workspace"
DEFAULT_IMAGE: Final = "codecoder-sandbox"
# Engine runtimes whose containment codecoder knows: runc (Docker's default) and gVisor's
# runsc, which puts a user-space kernel between the sandbox and the host's. Choosing runsc only
# tightens the sandbox; any other runtime is whatever that runtime makes of the container.
KNOWN_RUNTIMES: Final = ("runc", "runsc")
WorkspaceMode = Literal["auto", "bind", "sync"]
# `network`'s default: a writable call reaches the network through the runtime's egress proxy,
# each host asked as `network:<host>` during the call (`Egress.asking`), as in @bwrap.
ASK: Final = "ask"
# Why the default gives no network on an engine of another machine (`containers.egress_for`),
# as `check` says it.
REMOTE_NO_NETWORK: Final = (
    "the engine is on another machine, where the egress proxy's socket cannot be mounted: "
    "commands run there with no network, and a connection fails at once"
)
# No network at all, not even the proxy (the way to opt out of `ask`). Any other string is
# handed to the engine as its network mode (`bridge`, ...), a loosening.
NO_NETWORK: Final = "none"
# Warm sandboxes of one template the pool keeps at most (environments.docker.pool.warm.MAX_SIZE).
MAX_POOL: Final = 8

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmg]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """Bytes in a size such as `512m`, `1g`, `64MiB` or `1048576` (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 512m, 1g)")
    return int(float(match[1]) * _UNITS[match[2].lower()])


@dataclass(frozen=True, slots=True)
class LooserSetting:
    """One setting that gives the sandbox more than the default does, and why that matters."""

    name: str
    value: object
    default: object
    why: str


@dataclass(frozen=True, slots=True)
class DockerSettings:
    """How the sandbox container is limited. The defaults are the hardened configuration.

    `image` is a sandbox image (the default, or one `codecoder image build` made: it carries the
    agent). `runtime` is the engine runtime to run it with (None: the engine's default; `runsc`
    for gVisor). `user` is who commands run as: `auto` (the workspace's owner, or 10001 when root
    owns it) or a `uid[:gid]`, never root (the in-container agent runs as root to stay out of
    the commands' reach). `network` is `ask` (the default: a writable call's only way out
    is the runtime's egress proxy, any host on port 443 asked as `network:<host>` during the
    call, as in @bwrap; a read-only call has no network; a remote engine, which cannot mount the
    proxy's socket, gives no network and says so), `none` (no network at all), an `Egress`
    allowlist (given as `{"allow": [...]}`: the proxy admits those hosts only), or an engine
    network mode (`bridge`: the sandbox's own network, a loosening). `workspace` is how the
    workspace reaches the container: `bind` (a bind mount), `sync` (a per-session volume
    kept in step with the workspace, which a remote engine needs), `auto` (sync when
    DOCKER_HOST names another machine, or when the workspace belongs to root and `user` is
    `auto`: `environments.docker.workspacemode`). `extra_writable_paths` are more
    size-capped tmpfs mounts inside the container (e.g. a cache directory a tool insists on);
    they never touch the host and are emptied between calls made under different grants.
    `disk_budget` is how much a writable call may write to the workspace before it is stopped
    (what it wrote, never how much a file system others share grew by; in sync mode, also how
    much may come back); what it wrote counts at apparent size (a sparse file, more names of one
    file: `environments.apparent`). `pool`
    is how many sandboxes of these settings the warm pool keeps ready for new sessions, per
    workspace and mode (0: none; `environments.docker.pool`).
    """

    image: str = DEFAULT_IMAGE
    memory: str = "1g"
    cpus: float = 1.0
    pids_limit: int = 256
    tmpfs_size: str = "64m"
    network: str | Egress = ASK
    read_only_rootfs: bool = True
    user: str = "auto"
    extra_writable_paths: tuple[str, ...] = ()
    disk_budget: str = "1g"
    runtime: str | None = None
    workspace: WorkspaceMode = "auto"
    pool: int = 2

    def __post_init__(self) -> None:
        egress = Egress.of(self.network)
        if egress is not None:
            object.__setattr__(self, "network", egress)  # frozen: normalized once, here
        elif not isinstance(self.network, str) or not self.network:
            raise ValueError('network must be "ask", "none" or {"allow": [hosts]}')
        if self.runtime is not None and not re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.runtime
        ):
            raise ValueError(f"runtime {self.runtime!r} is not a runtime name")
        if self.workspace not in ("auto", "bind", "sync"):
            raise ValueError(f"workspace {self.workspace!r} must be auto, bind or sync")
        if self.memory_bytes < 6 * 1024**2:
            raise ValueError(f"memory {self.memory} is below Docker's minimum of 6m")
        if self.tmpfs_bytes <= 0:
            raise ValueError("tmpfs_size must be positive")
        if not self.cpus > 0:
            raise ValueError("cpus must be positive")
        if self.disk_budget_bytes <= 0:
            raise ValueError("disk_budget must be positive")
        if self.runs_as_root:
            raise ValueError(
                f"user {self.user!r}: commands never run as root (uid or gid 0) in the sandbox; "
                "the agent that runs them is root, and must stay out of their reach"
            )
        if not 0 <= self.pool <= MAX_POOL:
            raise ValueError(f"pool must be between 0 (no warm pool) and {MAX_POOL}")
        if self.pids_limit < 8:
            raise ValueError("pids_limit below 8 leaves no room for the agent itself")
        for path in self.extra_writable_paths:
            pure = PurePosixPath(path)
            if not pure.is_absolute() or ".." in pure.parts:
                raise ValueError(f"extra writable path {path!r} must be absolute, without ..")
            if pure == PurePosixPath("/") or PurePosixPath(WORKSPACE_MOUNT) in (
                pure,
                *pure.parents,
            ):
                raise ValueError(f"extra writable path {path!r} would hide the root or workspace")

    @property
    def memory_bytes(self) -> int:
        return parse_size(self.memory)

    @property
    def tmpfs_bytes(self) -> int:
        return parse_size(self.tmpfs_size)

    @property
    def disk_budget_bytes(self) -> int:
        return parse_size(self.disk_budget)

    @property
    def egress(self) -> Egress | None:
        return self.network if isinstance(self.network, Egress) else None

    @property
    def asks_hosts(self) -> bool:
        """The default network: the egress proxy, each host asked (`ASK`)."""
        return self.network == ASK

    @property
    def runs_as_root(self) -> bool:
        return any(part in ("0", "root") for part in self.user.split(":"))

    def looser_than_default(self) -> list[LooserSetting]:
        """Every setting that grants more than `DockerSettings()` does (empty when none)."""
        default = DockerSettings()
        looser: list[LooserSetting] = []

        def note(name: str, why: str) -> None:
            looser.append(LooserSetting(name, getattr(self, name), getattr(default, name), why))

        if self.memory_bytes > default.memory_bytes:
            note("memory", "a larger memory limit lets a call take more of the host's memory")
        if self.cpus > default.cpus:
            note("cpus", "a larger CPU quota lets a call take more of the host's CPU")
        if self.pids_limit > default.pids_limit:
            note("pids_limit", "a higher pids limit gives a fork bomb more room")
        if self.tmpfs_bytes > default.tmpfs_bytes:
            note("tmpfs_size", "larger tmpfs mounts let a call hold more of the host's memory")
        if self.egress is not None:
            note(
                "network",
                "the sandbox can reach these hosts through the runtime's egress proxy, each "
                "asked for as network:<host>",
            )
        elif self.network not in (default.network, NO_NETWORK):
            note("network", "with a network the sandbox can reach the host, the LAN and beyond")
        if self.runtime not in (None, *KNOWN_RUNTIMES):
            note(
                "runtime",
                "an engine runtime codecoder does not know: the sandbox is whatever it makes "
                "of the container",
            )
        if not self.read_only_rootfs:
            note("read_only_rootfs", "a writable root filesystem lets a call change the image")
        if self.extra_writable_paths:
            note("extra_writable_paths", "more writable places inside the container")
        if self.disk_budget_bytes > default.disk_budget_bytes:
            note("disk_budget", "a larger disk budget lets a writable call fill more of the disk")
        return looser


# --- engine errors -----------------------------------------------------------------------------
