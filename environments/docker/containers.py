"""The sandbox containers of an environment: how each is made, started, checked and removed.

Hardening (every container, by default; `DockerSettings` can tighten, and `codecoder check`
warns about anything `DockerSettings.looser_than_default()` reports):

- no network (`network_mode=none`): a writable call's only way out is the runtime's egress
  proxy (`environments.egress`, each host asked as `network:<host>` during the call, or the
  hosts of an explicit `docker.network` allowlist), reached through the agent's relay on
  127.0.0.1:3128 and a Unix socket in a directory made for each sandbox (`egress_for`); by
  default a read-only call, and any call on a remote engine, has none at all, nor does any
  call with `"network": "none"`; read-only root filesystem, `no-new-privileges`, a pids
  limit, a memory limit equal to memory+swap, a CPU quota, and each of these limits checked from
  inside when the container starts (an engine that silently drops one is refused);
- commands run as an unprivileged user (the workspace's owner, or uid 10001 when root owns it)
  with no capability at all; the container itself starts as root with only the four
  capabilities its agent needs to drop privileges and end processes (see the agent);
- `/tmp` (`$HOME`), `/dev/shm` and any extra writable path as size-capped tmpfs,
  `noexec,nosuid,nodev`, emptied before a call made under another grant than the call before;
- the workspace bind-mounted at `/workspace`, read-only unless the request is writable; in a
  writable container every protected path at every depth (`codecoder.json`, `.codecoder/`,
  `.git`, `.gitmodules`) is mounted read-only over itself, and after each writable call, once
  every process of it is gone, the workspace is checked for protected paths the call created or
  moved (`workspaceguard`): any are quarantined, the call fails and the container is replaced;
- a disk budget for writable calls (what the call wrote to the workspace, watched during the
  call: never the growth of a file system others share, sandboxes/image/agent/diskbudget.py);
  the Docker socket is never mounted; docker-init reaps orphans;
- labels on every container (`codecoder=1`, the session, the host process:
  `environments.docker.labels`), so the runtime can remove its own containers and the
  leftovers of runtimes that died.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

from codecoder.environments.changewatch import ChangeWatch
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT, Mode, _AgentChannel
from codecoder.environments.docker.engine import (
    SETUP_HINT,
    DockerEngine,
    _engine_address,
    engine_is_local,
)
from codecoder.environments.docker.greeting import AGENT_START_SECONDS, greet
from codecoder.environments.docker.labels import (
    LABEL_BOOT,
    LABEL_HOST,
    LABEL_MODE,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_POOL,
    LABEL_RUNTIME,
    LABEL_SESSION,
    _boot_id,
    _owner_alive,
    _process_start,
)
from codecoder.environments.docker.settings import (
    ASK,
    WORKSPACE_MOUNT,
    DockerSettings,
    parse_size,
)
from codecoder.environments.docker.sync import OUTBOX, WorkspaceVolume
from codecoder.environments.egress import Egress, EgressProxy, client_variables
from codecoder.environments.engineseam import Sandbox, SandboxTemplate, TemplateMount
from codecoder.environments.placeholders import Placeholders
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.foundation.hosts import Resolver, system_resolver
from codecoder.foundation.scratch import scratch_directory
from codecoder.foundation.state import workspace_directory

__all__ = ["AGENT_COMMAND", "AGENT_START_SECONDS", "SandboxContainers"]

log = logging.getLogger(__name__)

# The agent runs on the interpreter bundled with it (sandboxes/image/bundle.py), through that
# interpreter's own loader: it needs nothing of the image. It is a directory of modules, run by
# its __main__.py; -B keeps the interpreter from writing their bytecode into the image.
AGENT_COMMAND: Final = (
    "/opt/codecoder/python/ld.so",
    "--library-path",
    "/opt/codecoder/python/lib",
    "/opt/codecoder/python/bin/python3",
    "-I",
    "-S",
    "-B",
    "/opt/codecoder/agent",
)
# Where the egress proxy's socket directory is mounted (environments.egress): inside a
# tmpfs that only root may enter, so that the agent's relay reaches the socket and commands,
# which run as the workspace user, do not.
EGRESS_PARENT: Final = "/opt/codecoder/relay"
EGRESS_MOUNT: Final = f"{EGRESS_PARENT}/egress"
# The agent starts as root with these and keeps SETUID, SETGID and KILL (it drops SETPCAP once
# it has emptied the bounding set); commands run as the workspace user with none.
AGENT_USER: Final = "0:0"
AGENT_CAPABILITIES: Final = ("SETUID", "SETGID", "KILL", "SETPCAP")
FALLBACK_USER: Final = "10001:10001"
SNAPSHOT_MOUNT: Final = "/opt/codecoder/capability"
# Room for a capability's files (runtime.config.capabilities.MAX_BYTES is 64 MiB); tmpfs takes
# memory only for what is written.
SNAPSHOT_TMPFS: Final = "96m"


class SandboxContainers:
    """The containers of one @docker environment: their configuration, labels and command user;
    starting one and checking what is in force in it; removing the leftovers of dead runtimes.

    `volume` makes the environment's workspace volume (sync mode only), on first use.
    """

    def __init__(
        self,
        workspace: Path,
        settings: DockerSettings,
        session_id: str,
        *,
        sync: bool,
        resolver: Resolver | None = None,
        volume: Callable[[], WorkspaceVolume] | None = None,
        upstream: tuple[str, int] | None = None,
    ) -> None:
        self.workspace = workspace
        self.settings = settings
        self.session_id = session_id
        self.sync = sync
        self._resolver = resolver
        self._volume = volume
        self._upstream = upstream
        self._host = socket.gethostname()
        self._boot = _boot_id()
        self._pid = os.getpid()
        self.placeholders = Placeholders(workspace)
        self.pooled = False  # a writable template was offered to the warm pool

    def check_workspace(self) -> None:
        """Refuse a workspace that is no directory, or one a bind mount would hand the Docker
        socket."""
        if not self.workspace.is_dir():
            raise SandboxUnavailable(f"the workspace {self.workspace} is not a directory")
        if self.sync:
            return  # copied into a volume, never mounted: what it holds stays on this side
        sockets = ["/var/run/docker.sock", "/run/docker.sock"]
        if _engine_address().startswith("unix://"):
            sockets.append(_engine_address().removeprefix("unix://"))
        for sock in sockets:
            path = Path(os.path.realpath(sock))
            if path == self.workspace or self.workspace in path.parents:
                raise SandboxUnavailable(
                    f"refusing to mount {self.workspace}: it contains the Docker socket {sock}, "
                    "which would hand the sandbox the whole machine"
                )

    def check_image(self, labels: dict[str, str]) -> None:
        """Refuse an image without this runtime's agent, and a remote engine for settings that
        need a local one."""
        image = self.settings.image
        found = labels.get(LABEL_AGENT)
        if found is None:
            raise SandboxUnavailable(
                f"image {image!r} is not a codecoder sandbox image (it has no {LABEL_AGENT} "
                f"label, so no agent to run commands): make one from it with `codecoder image "
                f"build --from {image}`"
            )
        if found != str(AGENT_PROTOCOL):
            raise SandboxUnavailable(
                f"image {image!r} has an agent speaking protocol {found}, this runtime speaks "
                f"{AGENT_PROTOCOL}: rebuild it ({SETUP_HINT}; for an image of your own, "
                "`codecoder image build --from` its base again)"
            )
        if not engine_is_local():
            if self.settings.workspace == "bind":
                raise SandboxUnavailable(
                    f"the Docker engine at {_engine_address()} is on another machine, which "
                    'cannot bind-mount this workspace: use "docker": {"workspace": "sync"} '
                    '(or "auto")'
                )
            if self.settings.egress is not None:
                raise SandboxUnavailable(
                    f"the Docker engine at {_engine_address()} is on another machine, and the "
                    "egress proxy of docker.network runs on this one: its allowlist needs a "
                    "local engine"
                )

    def labels(self, mode: str) -> dict[str, str]:
        """What every container and volume of this environment is labelled with."""
        return {
            LABEL_RUNTIME: "1",
            LABEL_SESSION: self.session_id,
            LABEL_MODE: mode,
            LABEL_HOST: self._host,
            LABEL_BOOT: self._boot,
            LABEL_PID: str(self._pid),
            LABEL_PID_START: _process_start(self._pid) or "",
        }

    def command_user(self) -> str:
        """The `uid:gid` commands run as."""
        if self.settings.user != "auto":
            uid, _, gid = self.settings.user.partition(":")
            return f"{uid}:{gid or uid}"
        info = self.workspace.stat()
        # Files the sandbox writes then belong to the workspace's owner; root never runs
        # commands (the agent is root), nor does group root.
        if info.st_uid == 0:
            return FALLBACK_USER
        return f"{info.st_uid}:{info.st_gid or info.st_uid}"

    def egress_for(self, mode: Mode) -> Egress | None:
        """What the egress proxy of a `mode` call admits, or None when it has no network.

        An explicit allowlist is every call's, read-only ones too (as before the default
        changed: the project named those hosts). The default (`ask`: every host on port 443,
        each asked) is a writable call's only, as in @bwrap, where a read-only call has no way
        out at all; and it is none on an engine of another machine, where the proxy's socket
        cannot be mounted (`check` says so; an explicit allowlist there is refused instead,
        `check_image`). `"none"` has none."""
        if self.settings.egress is not None:
            return self.settings.egress
        if mode == "rw" and self.settings.asks_hosts and engine_is_local():
            return Egress.asking()
        return None

    def template(
        self,
        mode: Mode,
        scan: ProtectedScan | None = None,
        egress: bool = False,
    ) -> SandboxTemplate:
        """The hardened sandbox of `mode`, as every engine makes it (`environments.engineseam`);
        with `egress`, a directory of its own for the egress proxy's socket, which only its
        agent can reach."""
        settings = self.settings
        tmpfs_options = f"rw,noexec,nosuid,nodev,size={settings.tmpfs_bytes}"
        mounts: list[TemplateMount]
        if self.sync:
            if self._volume is None:
                raise SandboxUnavailable("sync mode needs a workspace volume, and none was given")
            mounts = [
                TemplateMount(m["Target"], m["Source"], "volume", bool(m.get("ReadOnly")))
                for m in self._volume().mounts(writable=mode == "rw")
            ]
        else:
            mounts = [
                TemplateMount(
                    WORKSPACE_MOUNT,
                    str(self.workspace),
                    read_only=mode == "ro",
                    identity=_identity(self.workspace),
                )
            ]
        if scan is not None:
            mounts += self._protect(scan)
        environment = {"HOME": "/tmp", "LANG": "C.UTF-8"}
        if egress:
            # Made for each sandbox, empty, when it is created (a warm one's before any session
            # claimed it): the session holding it binds its proxy's socket there, and the
            # agent's relay connects to it. It never holds anything else.
            mounts.append(TemplateMount(EGRESS_MOUNT, "", "egress"))
            # HTTP(S)_PROXY, and the common clients' own settings, as in @bwrap.
            environment |= client_variables()
        tmpfs = {path: tmpfs_options for path in ("/tmp", *settings.extra_writable_paths)}
        # Root-owned and not writable by commands: where a capability's code is put to run.
        tmpfs[SNAPSHOT_MOUNT] = f"rw,nosuid,nodev,size={parse_size(SNAPSHOT_TMPFS)},mode=755"
        if egress:
            # Root's only (mode 700): the mount point of the proxy's socket, inside it.
            tmpfs[EGRESS_PARENT] = "ro,noexec,nosuid,nodev,size=64k,mode=700"
        uid, gid = (int(part) for part in self.command_user().split(":"))
        return SandboxTemplate(
            image=settings.image,
            entrypoint=AGENT_COMMAND,
            command_user=(uid, gid),
            runtime=settings.runtime,
            user=AGENT_USER,
            capabilities=AGENT_CAPABILITIES,
            working_dir=WORKSPACE_MOUNT,
            environment=tuple(environment.items()),
            mounts=tuple(mounts),
            tmpfs=tuple(tmpfs.items()),
            memory_bytes=settings.memory_bytes,
            cpus=settings.cpus,
            pids_limit=settings.pids_limit,
            shm_bytes=settings.tmpfs_bytes,
            # With the egress proxy, still no network: the agent's relay to the proxy's
            # socket is the only way out.
            network=(
                "none"
                if isinstance(settings.network, Egress) or settings.network == ASK
                else settings.network
            ),
            read_only_rootfs=settings.read_only_rootfs,
        )

    def name(self, suffix: str) -> str:
        return f"codecoder-{self.session_id}-{suffix}"

    def _protect(self, scan: ProtectedScan) -> list[TemplateMount]:
        """A read-only mount over every protected path of the workspace, at every depth.

        A symlinked protected path cannot be mounted over (the engine follows the link), and the
        link itself could be replaced from inside: refuse. A directory the runtime cannot look
        into could hide one: refuse too.
        """
        if scan.unreadable:
            raise ExecutionFailed(
                f"{', '.join(scan.unreadable)} in the workspace cannot be read by the runtime, "
                "so it cannot be checked for .git and .gitmodules; writable @docker calls are "
                "refused until it can"
            )
        mounts = []
        for relative in sorted(scan.entries):
            path = self.workspace / relative
            if path.is_symlink():
                raise ExecutionFailed(
                    f"{relative} in the workspace is a symbolic link; writable @docker calls "
                    "are refused because it could not be kept read-only inside the sandbox"
                )
            mounts.append(
                TemplateMount(f"{WORKSPACE_MOUNT}/{relative}", str(path), identity=_identity(path))
            )
        return mounts

    def start(
        self,
        engine: DockerEngine,
        mode: Mode,
        suffix: str,
        prepare: Callable[[], object] = lambda: None,
    ) -> _AgentChannel:
        """A ready sandbox of `mode`: claimed from the warm pool when the engine keeps one for
        this template, else created and started (after `prepare`: the checks of the engine and
        the image, which the pool made for what it hands out); its agent greeted either way."""
        egress = self.egress_for(mode)
        if mode == "rw" and not self.sync and self.settings.egress is not None:
            # A connection's permission may be granted for the project while a writable call
            # runs: the runtime then writes its lock and codecoder.json. Made before the scan,
            # .codecoder/ is the runtime's own (mounted read-only over itself), not a plant.
            workspace_directory(self.workspace)
        scan = None
        if mode == "rw" and not self.sync:
            # The protected names missing at the top are made inert first, and mounted read-only
            # with the rest: none can appear on the host with a call's content, even while the
            # call runs (environments.placeholders).
            self.placeholders.hold()
            scan = ProtectedScan(self.workspace)
        protected = {rel: _identity(self.workspace / rel) for rel in scan.entries} if scan else {}
        template = self.template(mode, scan, egress is not None)
        sandbox: Sandbox | None = None
        # What only this session can hold (its sync volume) is never pooled; everything else
        # is the same for every session of a workspace. A warm sandbox with an egress directory
        # gets this session's proxy in it once claimed: the pool made the directory, empty,
        # for that sandbox alone, and hands it out with it (pool.warm).
        if not self.sync:
            # The pool keeps this template warm, on the placeholders mounted in it: they are
            # left to its server when this environment closes (pool.warm).
            self.pooled = self.pooled or (scan is not None and engine.pool is not None)
            sandbox = engine.claim(template)
        if sandbox is None:
            prepare()
            directory = scratch_directory("codecoder-egress-") if egress is not None else None
            try:
                sandbox = engine.create(
                    template.resolved(directory), self.name(suffix), self.labels(mode)
                )
            except BaseException:
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
                raise
            sandbox.egress = directory
        proxy: EgressProxy | None = None
        watch: ChangeWatch | None = None
        try:
            if egress is not None:
                if sandbox.egress is None:
                    raise SandboxUnavailable(f"{sandbox.name} came without its egress directory")
                proxy = EgressProxy(
                    egress,
                    resolver=self._resolver or system_resolver,
                    directory=sandbox.egress,
                    upstream=self._upstream,
                )
            outbox = OUTBOX if self.sync and mode == "rw" else None
            # Writable in bind mode, created here or claimed: what each call changes in the
            # workspace, for the apparent size of what it wrote (environments.apparent).
            watch = ChangeWatch(self.workspace) if scan is not None else None
            channel = greet(engine, sandbox, template, mode, outbox=outbox)
        except BaseException:
            if watch is not None:
                watch.close()
            engine.remove(sandbox.id)
            if proxy is not None:
                proxy.close()
            elif sandbox.egress is not None:
                shutil.rmtree(sandbox.egress, ignore_errors=True)
            raise
        channel.scan = scan
        channel.protected = protected
        channel.watch = watch
        channel.proxy = proxy
        return channel

    def remove_leftovers(self, engine: DockerEngine) -> list[str]:
        """Remove containers of runtimes on this machine whose process is gone.

        A warm pool's container (`LABEL_POOL`) belongs to the session that claimed it once the
        pool's server handed it out: it is removed only when it no longer runs (nobody holds
        its stream any more, so its agent has exited), never while it does.
        """
        removed: list[str] = []
        for summary in engine.list({LABEL_RUNTIME: "1"}):
            labels = summary.labels
            if labels.get(LABEL_HOST) != self._host:
                continue  # another machine shares this engine; its pids mean nothing here
            if _owner_alive(labels, self._boot):
                continue
            if labels.get(LABEL_POOL) and summary.running:
                continue
            engine.remove(summary.id)
            removed.append(summary.name)
        for name, labels in engine.volumes({LABEL_RUNTIME: "1"}):
            if labels.get(LABEL_HOST) != self._host or _owner_alive(labels, self._boot):
                continue
            engine.remove_volume(name)
            removed.append(name)
        if removed:
            log.info("removed %d leftover sandbox container(s): %s", len(removed), removed)
        return removed


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def replaced_protected(workspace: Path, protected: dict[str, tuple[int, int] | None]) -> list[str]:
    """The protected paths mounted read-only in a container that are no longer the entry that
    was mounted (moved aside, removed, another made in their place), workspace-relative."""
    return sorted(rel for rel, then in protected.items() if _identity(workspace / rel) != then)
