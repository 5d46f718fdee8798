"""The sandbox containers of an environment: how each is made, started, checked and removed.

Hardening (every container, by default; `DockerSettings` can tighten, and `codecoder check`
warns about anything `DockerSettings.looser_than_default()` reports):

- no network (`network_mode=none`), read-only root filesystem, `no-new-privileges`, a pids
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
- a disk budget for writable calls (the growth of the workspace's filesystem, watched during
  the call); the Docker socket is never mounted; docker-init reaps orphans;
- labels on every container (`codecoder.runtime=1`, the session, the host process:
  `environments.docker.labels`), so the runtime can remove its own containers and the
  leftovers of runtimes that died.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import docker.errors
from docker.types import LogConfig, Mount

from codecoder.environments.changewatch import ChangeWatch
from codecoder.environments.docker.cgroups import host_limits
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT, Mode, _AgentChannel
from codecoder.environments.docker.engine import (
    SETUP_HINT,
    _engine_address,
    _engine_errors,
    engine_is_local,
)
from codecoder.environments.docker.labels import (
    LABEL_BOOT,
    LABEL_HOST,
    LABEL_MODE,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_RUNTIME,
    LABEL_SESSION,
    _boot_id,
    _owner_alive,
    _process_start,
)
from codecoder.environments.docker.settings import WORKSPACE_MOUNT, DockerSettings, parse_size
from codecoder.environments.docker.sync import OUTBOX, WorkspaceVolume
from codecoder.environments.egress import PROXY_PORT, SOCKET_NAME, EgressProxy
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.runtime.kernel.errors import ExecutionFailed, SandboxUnavailable
from codecoder.runtime.kernel.hosts import Resolver, system_resolver
from codecoder.runtime.kernel.state import workspace_directory

__all__ = ["AGENT_COMMAND", "SandboxContainers", "remove_container", "remove_volume"]

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
AGENT_START_SECONDS: Final = 20.0


def remove_container(client: Any, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass  # already gone
    except docker.errors.APIError as exc:
        # 409: another cleaner is removing it already.
        if exc.status_code != 409:
            raise


def remove_volume(client: Any, name: str) -> None:
    try:
        client.api.remove_volume(name, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # in use by a container another cleaner is removing
            raise


class SandboxContainers:
    """The containers of one @docker environment: their configuration, labels and command user;
    starting one and checking what is in force in it; removing the leftovers of dead runtimes.

    `volume` is the environment's workspace volume (sync mode), made on first use.
    """

    def __init__(
        self,
        workspace: Path,
        settings: DockerSettings,
        session_id: str,
        *,
        sync: bool,
        resolver: Resolver | None,
        volume: Callable[[], WorkspaceVolume],
    ) -> None:
        self.workspace = workspace
        self.settings = settings
        self.session_id = session_id
        self.sync = sync
        self._resolver = resolver
        self._volume = volume
        self._host = socket.gethostname()
        self._boot = _boot_id()
        self._pid = os.getpid()

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

    def config(
        self,
        mode: Mode,
        name: str,
        scan: ProtectedScan | None = None,
        proxy: EgressProxy | None = None,
    ) -> tuple[dict[str, Any], tuple[int, int]]:
        """The hardened container for `mode`, and the uid and gid its commands run as."""
        settings = self.settings
        tmpfs_options = f"rw,noexec,nosuid,nodev,size={settings.tmpfs_bytes}"
        if self.sync:
            mounts = self._volume().mounts(writable=mode == "rw")
        else:
            mounts = [
                Mount(WORKSPACE_MOUNT, str(self.workspace), type="bind", read_only=mode == "ro")
            ]
        if scan is not None:
            mounts += self._protect(scan)
        environment = {"HOME": "/tmp", "LANG": "C.UTF-8"}
        if proxy is not None:
            # The socket only: the directory holds nothing else, and the agent relays to it.
            mounts.append(Mount(EGRESS_MOUNT, str(proxy.directory), type="bind", read_only=True))
            url = f"http://127.0.0.1:{PROXY_PORT}"
            for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                environment[variable] = url
            environment["NO_PROXY"] = environment["no_proxy"] = "localhost,127.0.0.1,::1"
        labels = self.labels(mode)
        tmpfs = {path: tmpfs_options for path in ("/tmp", *settings.extra_writable_paths)}
        # Root-owned and not writable by commands: where a capability's code is put to run.
        tmpfs[SNAPSHOT_MOUNT] = f"rw,nosuid,nodev,size={parse_size(SNAPSHOT_TMPFS)},mode=755"
        if proxy is not None:
            # Root's only (mode 700): the mount point of the proxy's socket, inside it.
            tmpfs[EGRESS_PARENT] = "ro,noexec,nosuid,nodev,size=64k,mode=700"
        uid, gid = (int(part) for part in self.command_user().split(":"))
        config = {
            "image": settings.image,
            # The entrypoint, not the command: an image's own ENTRYPOINT never wraps the agent.
            "entrypoint": list(AGENT_COMMAND),
            "name": f"codecoder-{self.session_id}-{name}",
            "labels": labels,
            "user": AGENT_USER,
            "working_dir": WORKSPACE_MOUNT,
            "environment": environment,
            # With detach=False the SDK also sets StdinOnce: the agent's stdin closes when the
            # attached stream does, so the agent of a runtime that died exits on its own.
            "stdin_open": True,
            "detach": False,
            "tty": False,
            "init": True,
            # With an egress allowlist, still no network: the agent's relay to the proxy's
            # socket is the only way out.
            "network_mode": "none" if settings.egress is not None else settings.network,
            "read_only": settings.read_only_rootfs,
            "cap_drop": ["ALL"],
            "cap_add": list(AGENT_CAPABILITIES),
            "security_opt": ["no-new-privileges:true"],
            "pids_limit": settings.pids_limit,
            "mem_limit": settings.memory_bytes,
            "memswap_limit": settings.memory_bytes,
            "nano_cpus": int(settings.cpus * 1e9),
            "ipc_mode": "private",
            "shm_size": settings.tmpfs_bytes,
            "tmpfs": tmpfs,
            "mounts": mounts,
            # The agent's answers travel on stdout; a log driver would copy every command's
            # output to the host's disk for nothing.
            "log_config": LogConfig(type=LogConfig.types.NONE),
        }
        if settings.runtime is not None:
            config["runtime"] = settings.runtime
        return config, (uid, gid)

    def _protect(self, scan: ProtectedScan) -> list[Mount]:
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
                Mount(f"{WORKSPACE_MOUNT}/{relative}", str(path), type="bind", read_only=True)
            )
        return mounts

    def start(self, client: Any, mode: Mode, name: str) -> _AgentChannel:
        """Create and start the container of `mode`, and wait for its agent to be ready."""
        egress = self.settings.egress
        if mode == "rw" and not self.sync and egress is not None:
            # A connection's permission may be granted for the project while a writable call
            # runs: the runtime then writes its lock and codecoder.json. Made before the scan,
            # .codecoder/ is the runtime's own (mounted read-only over itself), not a plant.
            workspace_directory(self.workspace)
        scan = ProtectedScan(self.workspace) if mode == "rw" and not self.sync else None
        proxy = None
        if egress is not None:
            proxy = EgressProxy(egress, resolver=self._resolver or system_resolver)
        try:
            config, uid_gid = self.config(mode, name, scan, proxy)
            with _engine_errors("create the sandbox container"):
                container = client.containers.create(**config)
        except BaseException:
            if proxy is not None:
                proxy.close()
            raise
        channel: _AgentChannel | None = None
        try:
            # Attach before start, so nothing the agent writes can be missed (and nothing is
            # read ahead into the SDK's HTTP buffer, which would hide it from the raw socket).
            with _engine_errors("attach to the sandbox container"):
                attached = client.api.attach_socket(
                    container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
                channel = _AgentChannel(container.id, config["name"], mode, attached)
                channel.scan = scan
                channel.watch = ChangeWatch(self.workspace) if scan is not None else None
                channel.proxy, proxy = proxy, None
                container.start()
            relay = (
                {"port": PROXY_PORT, "socket": f"{EGRESS_MOUNT}/{SOCKET_NAME}"}
                if channel.proxy is not None
                else None
            )
            outbox = OUTBOX if self.sync and mode == "rw" else None
            channel.begin(*uid_gid, relay, outbox)
            if not channel.wait_ready(AGENT_START_SECONDS):
                detail = channel.stderr_tail or channel.gone or "no answer"
                raise SandboxUnavailable(
                    f"the agent of image {self.settings.image!r} did not start ({detail}); "
                    f"rebuild the image: {SETUP_HINT}"
                )
            hello = channel.hello
            if hello.get("hello") != AGENT_PROTOCOL:
                raise SandboxUnavailable(
                    f"image {self.settings.image!r} has an agent speaking protocol "
                    f"{hello.get('hello')!r}, this runtime speaks {AGENT_PROTOCOL}; "
                    f"rebuild the image: {SETUP_HINT}"
                )
            if hello.get("problem"):
                raise SandboxUnavailable(
                    f"the sandbox agent refused to run: {hello['problem']}; nothing ran"
                )
            channel.runtime, limits = self._enforced_limits(client, container.id, hello)
            problems = self._limit_problems(limits)
            if problems:
                raise SandboxUnavailable(
                    "the container engine did not apply the sandbox's limits ("
                    + "; ".join(problems)
                    + "), as rootless Podman on cgroup v1 silently does; refusing to run in it. "
                    "Use an engine that enforces cgroup limits (Docker, or Podman on cgroup v2)"
                )
        except BaseException:
            if channel is not None:
                channel.close()
            if proxy is not None:
                proxy.close()
            remove_container(client, container.id)
            raise
        return channel

    def _enforced_limits(
        self, client: Any, container_id: str, hello: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """The engine runtime of the container and the limits in force on it.

        The agent reports what its kernel enforces. Under gVisor (runsc) that kernel is
        gVisor's, which enforces none of them and shows none; the host's enforces them on the
        whole sandbox, so they are read from the host, from the cgroup of the container's
        process, which must therefore run on this machine.
        """
        with _engine_errors("inspect the sandbox container"):
            attrs = client.api.inspect_container(container_id)
        runtime = (attrs.get("HostConfig") or {}).get("Runtime") or "runc"
        if runtime != "runsc":
            return runtime, hello.get("limits") or {}
        if not engine_is_local():
            # The pid a remote engine reports is one of its machine (or its PID namespace):
            # whatever process has that number here is not the sandbox.
            raise SandboxUnavailable(
                "the sandbox runs under gVisor (runsc), whose limits are checked on the machine "
                f"it runs on, and the engine at {_engine_address()} is on another one; use "
                'runc there ("docker": {"runtime": "runc"})'
            )
        found = host_limits(int((attrs.get("State") or {}).get("Pid") or 0))
        if found is None:
            raise SandboxUnavailable(
                "the sandbox runs under gVisor (runsc), whose limits are checked on the host, "
                "but the container's process is not visible on this machine (a remote engine?); "
                "refusing to run in it"
            )
        return runtime, found

    def _limit_problems(self, found: dict[str, Any]) -> list[str]:
        """What the kernel enforces on the container, against what was asked for."""
        settings = self.settings
        problems = []

        def check(what: str, value: Any, wanted: float) -> None:
            shown = f"{wanted:,}" if isinstance(wanted, int) else f"{wanted:g}"
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                problems.append(f"{what}: asked for {shown}, none is in force")
            elif value > wanted * 1.0001:
                problems.append(f"{what}: asked for {shown}, {value:,} in force")

        check("memory bytes", found.get("memory"), settings.memory_bytes)
        check("pids", found.get("pids"), settings.pids_limit)
        check("cpus", found.get("cpus"), settings.cpus)
        if found.get("swap_total"):
            check("memory+swap bytes", found.get("memory_swap"), settings.memory_bytes)
        return problems

    def remove_leftovers(self, client: Any) -> list[str]:
        """Remove containers of runtimes on this machine whose process is gone."""
        removed: list[str] = []
        with _engine_errors("list leftover sandbox containers"):
            leftovers = client.api.containers(all=True, filters={"label": f"{LABEL_RUNTIME}=1"})
            for summary in leftovers:
                labels = summary.get("Labels") or {}
                if labels.get(LABEL_HOST) != self._host:
                    continue  # another machine shares this engine; its pids mean nothing here
                if _owner_alive(labels, self._boot):
                    continue
                remove_container(client, summary["Id"])
                removed.append((summary.get("Names") or [summary["Id"]])[0].lstrip("/"))
            volumes = client.api.volumes(filters={"label": f"{LABEL_RUNTIME}=1"})
            for volume in volumes.get("Volumes") or []:
                labels = volume.get("Labels") or {}
                if labels.get(LABEL_HOST) != self._host or _owner_alive(labels, self._boot):
                    continue
                remove_volume(client, volume["Name"])
                removed.append(volume["Name"])
        if removed:
            log.info("removed %d leftover sandbox container(s): %s", len(removed), removed)
        return removed
