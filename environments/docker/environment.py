"""The @docker environment: commands in a hardened container that stays warm between calls.

The containers are made, hardened, checked and removed by `environments.docker.containers`. A
call is one authenticated round trip on the stream to the agent running in its container
(`environments.docker.channel`), translated to and from the agent's terms by
`environments.docker.calls`. A container runs one call at a time; calls of the same mode wait
for each other. In sync mode (`environments.docker.sync`) the workspace is a volume the host
keeps in step.

The workspace mount is fixed when a container is created, so an environment keeps up to two
warm containers: one with the workspace read-only (created on the first read-only call) and one
with it read-write (created on the first writable call). A single container with both mounts
would let a read-only call reach the writable one, and a fresh container per writable call would
cost a cold start each time.

Containers come from an engine (`environments.engineseam`: `DockerEngine` here): a session's
container is claimed from the warm pool when one is warm for the same template
(`environments.docker.pool`), and created otherwise. An environment may share its engine with
others (one per runtime, for all its sessions) or own one.

Every docker SDK, requests and socket exception is mapped where it happens: callers see only
`SandboxUnavailable`, `ExecutionTimeout`, `OutOfMemory` and `ExecutionFailed`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, Self

import requests.exceptions
from docker.types import LogConfig

from codecoder.environments.apparent import call_start, hidden_bytes, hidden_in
from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.environments.docker.calls import (
    _Call,
    call_result,
    out_of_memory,
    plain_result,
    request_message,
    translate,
)
from codecoder.environments.docker.channel import Mode, _AgentChannel, _AgentGone
from codecoder.environments.docker.containers import (
    AGENT_START_SECONDS,
    SandboxContainers,
    replaced_protected,
)
from codecoder.environments.docker.engine import DockerEngine, _engine_errors
from codecoder.environments.docker.labels import LABEL_SESSION
from codecoder.environments.docker.pool.client import pool_for
from codecoder.environments.docker.settings import (
    KNOWN_RUNTIMES,
    WORKSPACE_MOUNT,
    DockerSettings,
    LooserSetting,
)
from codecoder.environments.docker.sync import WorkspaceVolume
from codecoder.environments.docker.workspacemode import workspace_mode
from codecoder.environments.placeholders import is_placeholder
from codecoder.environments.workspaceguard import new_repository_hint, quarantine
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import (
    ExecutionFailed,
    ExecutionTimeout,
    SandboxUnavailable,
)
from codecoder.foundation.hosts import Resolver

__all__ = [
    "DockerEnvironment",
    "DockerSettings",
    "LooserSetting",
]

log = logging.getLogger(__name__)

# How long past a call's own timeout the host waits for the agent before giving up on the
# container: the agent kills at the deadline, drains for 0.5 s and checks for survivors for up
# to 2 s; the rest is slack for a container starved of CPU.
HOST_GRACE_SECONDS: Final = 5.0


class DockerEnvironment(Environment[CommandRequest, CommandResult]):
    """Runs `CommandRequest`s in warm, hardened containers of the `codecoder-sandbox` image.

    Nothing touches the engine until `start()` or the first `run()`: then the container for the
    call's mode is claimed from the warm pool, or the engine and image are checked
    (`SandboxUnavailable` says what to do when either is missing), containers left behind by
    dead runtimes are removed, and the container is started. `close()` removes every container
    of this environment. Safe to use from several threads; calls of one mode run one at a time.

    `engine`: share one (a runtime's sessions do); the environment then never closes it.
    Otherwise it makes its own, from `client_factory`, with the warm pool of `settings.pool`
    unless `pool=False`.
    """

    tag = EnvironmentTag.DOCKER

    def __init__(
        self,
        workspace: Path | str,
        settings: DockerSettings | None = None,
        *,
        session_id: str | None = None,
        client_factory: Callable[[], Any] | None = None,
        resolver: Resolver | None = None,
        engine: DockerEngine | None = None,
        pool: bool = True,
        upstream: tuple[str, int] | None = None,
    ) -> None:
        """`resolver` is what the egress proxy resolves host names with (the system's by
        default; tests point names anywhere without DNS). `upstream`: where the proxy sends
        every connection it admitted (`EgressProxy`'s; a stand-in server of the tests, never
        set by the runtime)."""
        self.workspace = Path(workspace).resolve()
        self.settings = settings or DockerSettings()
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self._owns_engine = engine is None
        if engine is None:
            claims = pool_for(self.settings) if pool and client_factory is None else None
            engine = DockerEngine(client_factory, pool=claims)
        self.engine = engine
        self._prepared = False
        self._lock = threading.Lock()
        self._mode_locks: dict[Mode, threading.Lock] = {
            "ro": threading.Lock(),
            "rw": threading.Lock(),
        }
        self._channels: dict[Mode, _AgentChannel] = {}
        self._generation = itertools.count(1)
        self._closed = False
        # Sync mode (environments.docker.sync): the workspace is a volume the host keeps in
        # step, which a remote engine needs. Its calls are serialized across both modes, so that
        # what one call brings back is never mistaken for what another changed.
        # A root-owned workspace is synced too (environments.docker.workspacemode says why).
        self.sync = workspace_mode(self.settings, self.workspace).sync
        self._containers = SandboxContainers(
            self.workspace,
            self.settings,
            self.session_id,
            sync=self.sync,
            resolver=resolver,
            volume=self._ensure_volume,
            upstream=upstream,
        )
        self._volume: WorkspaceVolume | None = None
        self._sync_lock = threading.Lock()

    # -- public API --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def start(self) -> None:
        """Warm the read-only container: claim it from the warm pool, or connect, check the
        image, remove dead runtimes' leftovers and start one.

        Optional: `run()` does the same on first use.
        """
        with self._turn("ro"):
            self._channel("ro")

    def run(self, request: CommandRequest) -> CommandResult:
        mode: Mode = "rw" if request.writable else "ro"
        call = translate(self.workspace, request)
        with self._turn(mode):
            if self.sync:
                self._sync_in(mode)
            try:
                channel, response = self._exchange(mode, call, request)
                if request.output is not None and not channel.streamed:
                    # Nothing came as it ran (a short call, an older agent): all of it now.
                    for stream in ("stdout", "stderr"):
                        if response.get(stream):
                            request.output(stream, str(response[stream]).encode())
            except BaseException:
                if self.sync and mode == "rw":
                    # What the call wrote before it was cut off never comes back, and the
                    # volume no longer matches the workspace: the next call gets a fresh one.
                    with contextlib.suppress(SandboxUnavailable):
                        self._reset_volume()
                raise
            synced: dict[str, Any] | None = None
            try:
                if self.sync and mode == "rw":
                    channel.synced_generation = None
                    synced = self._sync_back(channel, call, response)
                    if synced is not None and self._volume is not None:
                        channel.synced_generation = self._volume.generation
                if response.get("survivors") or response.get("discard"):
                    # The answer stands, but a container where a process outlived its call
                    # (or that the agent gave up on) runs nothing more.
                    self._discard(channel)
            finally:
                self._guard(channel, call)
            self._check_apparent(channel, call, response)
            channel.used = True
            channel.state_grant = request.grant
            if request.snapshot is not None and "error" not in response:
                channel.snapshot_digest = request.snapshot.digest
            result = call_result(
                call,
                channel,
                request,
                response,
                self.settings,
                oom_killed=lambda: self._container_oom_killed(channel),
            )
            if synced is not None:
                result.extra["synced"] = synced
            said = str(response.get("stderr", ""))
            if request.output is not None and result.stderr.startswith(said):
                added = result.stderr[len(said) :]  # what to do about a missing program
                if added:
                    request.output("stderr", added.encode())
            if self.sync and self._volume is not None and self._volume.not_sent:
                # Files with holes stay out of the volume (environments.docker.sync, HOLE_SLACK).
                result.extra["not_in_sandbox"] = sorted(self._volume.not_sent)
            if channel.scan is not None:
                self._refuse_new_repository(result, call)
            return result

    def _refuse_new_repository(self, result: CommandResult, call: _Call) -> None:
        """A command that tried to make the workspace a repository (`git init`, `git clone URL
        .`) found its placeholder `.git` read-only: say why, and what to do instead."""
        if result.exit_code == 0 or f"{WORKSPACE_MOUNT}/.git/" not in result.stderr:
            return
        if "Read-only file system" not in result.stderr:
            return
        if not is_placeholder(self.workspace, ".git"):
            return
        raise ExecutionFailed(
            f"a writable @docker call (`{call.summary}`) could not make the workspace a git "
            "repository: it has none, and a sandbox may not create its .git"
            + new_repository_hint([".git"]),
            output=result.stdout + result.stderr,
        )

    def close(self) -> None:
        """Stop and remove every container of this environment. Never raises."""
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
        engine = self.engine
        for channel in channels:
            channel.close()
            try:
                engine.remove(channel.container_id)  # a claimed one: its pool's server does
            except SandboxUnavailable as exc:
                log.warning("closing the @docker environment: %s", exc)
        try:
            if engine.connected:
                mine = {LABEL_SESSION: self.session_id}
                for summary in engine.list(mine):
                    engine.remove(summary.id)
                for name, _ in engine.volumes(mine):
                    engine.remove_volume(name)
        except SandboxUnavailable as exc:
            log.warning("closing the @docker environment: %s", exc)
        finally:
            # The last user of the workspace's placeholders removes those still inert (the warm
            # pool's server, when it keeps a template that mounts them).
            self._containers.placeholders.release(remove=not self._containers.pooled)
            if self._owns_engine:
                engine.close()

    def containers(self) -> list[str]:
        """The ids of this environment's warm containers (what the benchmarks weigh)."""
        with self._lock:
            return [channel.container_id for channel in self._channels.values()]

    def runtime_in_use(self) -> str:
        """The engine runtime this environment's containers run under (`check`, `audit`)."""
        if self.settings.runtime is not None:
            return self.settings.runtime
        self._ensure_started()
        return str(self.engine.info().get("DefaultRuntime") or "runc")

    def engine_runtimes(self) -> list[str]:
        """The runtimes codecoder knows (runc, gVisor's runsc) that the engine offers."""
        self._ensure_started()
        offered = self.engine.info().get("Runtimes") or {}
        return [runtime for runtime in KNOWN_RUNTIMES if runtime in offered]

    def cold_run(self, request: CommandRequest) -> CommandResult:
        """Run one request in a fresh container, like a hardened `docker run --rm`.

        The baseline the warm path is measured against; no output cap beyond the request's.
        """
        call = translate(self.workspace, request)
        client = self._ensure_started()
        mode: Mode = "rw" if request.writable else "ro"
        if self.sync:
            with self._sync_lock:
                self._sync_in(mode)
                if self._volume is not None and mode == "rw":
                    self._volume.generation += 1  # written behind the agent's back
        config = self.engine.container_config(
            self._containers.template(mode),
            self._containers.name(f"cold-{next(self._generation)}"),
            self._containers.labels(mode),
        )
        config.update(
            entrypoint=call.argv,
            working_dir=call.cwd,
            user=self._containers.command_user(),
            cap_add=None,
            environment={**config["environment"], **(request.env or {})},
            stdin_open=False,
            log_config=LogConfig(type=LogConfig.types.JSON),
        )
        with _engine_errors("run a cold sandbox container"):
            container = client.containers.create(**config)
            try:
                container.start()
                try:
                    status = container.wait(timeout=request.timeout)
                except (requests.exceptions.Timeout, requests.exceptions.ConnectionError) as exc:
                    # How the SDK reports that the engine did not answer `wait` in time.
                    raise ExecutionTimeout(
                        f"`{call.summary}` did not finish within {request.timeout:g}s"
                    ) from exc
                stdout = container.logs(stdout=True, stderr=False)
                stderr = container.logs(stdout=False, stderr=True)
            finally:
                self.engine.remove(container.id)
        return plain_result(call, int(status["StatusCode"]), stdout, stderr, request)

    def exec_run(self, request: CommandRequest) -> CommandResult:
        """Run one request through the engine's exec API in the warm container.

        The second baseline for the warm path; unlike `run()` it has no timeout (the exec API
        offers none), no OOM report and no cleanup of background processes.
        """
        call = translate(self.workspace, request)
        mode: Mode = "rw" if request.writable else "ro"
        with self._mode_locks[mode]:
            channel = self._channel(mode)
        client = self._ensure_started()
        if self._volume is not None and mode == "rw":
            self._volume.generation += 1  # written behind the agent's back
        with _engine_errors("exec into the sandbox container"):
            exec_id = client.api.exec_create(
                channel.container_id,
                call.argv,
                workdir=call.cwd,
                environment=request.env,
                user=self._containers.command_user(),
            )["Id"]
            stdout, stderr = client.api.exec_start(exec_id, demux=True)
            code = client.api.exec_inspect(exec_id)["ExitCode"]
        return plain_result(call, int(code or 0), stdout or b"", stderr or b"", request)

    # -- one call ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _turn(self, mode: Mode) -> Iterator[None]:
        """Hold what a call of `mode` needs to itself: its mode's container, and in sync mode
        the volume too (taken first, always, so that the two locks never wait on each other)."""
        with self._sync_lock if self.sync else contextlib.nullcontext(), self._mode_locks[mode]:
            yield

    def _exchange(
        self, mode: Mode, call: _Call, request: CommandRequest
    ) -> tuple[_AgentChannel, dict[str, Any]]:
        """Send the request to a ready container of `mode`; the channel and the agent's answer.

        A container that could not empty what earlier calls left is replaced and the call
        sent to the new one (which holds nothing). Called with the mode's lock held.
        """
        for _ in range(2):
            channel = self._channel(mode)
            if call.compound and not channel.hello.get("bash"):
                raise ExecutionFailed(
                    f"`{call.summary}` is a compound command, and the image "
                    f"{self.settings.image!r} has no /bin/bash: compound commands are keyed as "
                    "bash parses them and run only in bash. Simple commands (one program, "
                    "literal arguments) run without a shell; or add bash to the image"
                )
            fresh = request.grant is None or request.grant != channel.state_grant
            if fresh and channel.used and not channel.hello.get("wipe_complete"):
                # The agent cannot empty every writable place (a writable root filesystem):
                # another grant gets another container.
                self._discard(channel)
                channel = self._channel(mode)
            message = request_message(
                call,
                request,
                channel,
                fresh=fresh,
                settings=self.settings,
                sync=self.sync,
                volume=self._volume,
            )
            if channel.watch is not None:
                channel.watch.reset()  # what the host changed since is not the call's
                channel.call_started_ns = call_start()
            egress = channel.proxy.call(request.network) if channel.proxy else None
            try:
                with egress or contextlib.nullcontext():
                    response = channel.call(
                        message,
                        request.timeout + HOST_GRACE_SECONDS,
                        request.max_output,
                        cancel=request.cancel,
                        output=request.output,
                    )
            except _AgentGone as gone:
                oom = self._container_oom_killed(channel)
                self._discard(channel)
                self._guard(channel, call)
                if oom:
                    raise out_of_memory(call, self.settings) from None
                raise SandboxUnavailable(
                    f"the sandbox container stopped during `{call.summary}` ({gone}); "
                    "a fresh one is started for the next call"
                ) from None
            except BaseException:
                # Cancelled or interrupted (an MCP cancel, Ctrl-C, SIGTERM): the command must not
                # go on in the sandbox, and the channel still expects its answer. The container
                # goes (so every process of the call ends with it), what it left is checked, and
                # the cancellation or interrupt goes on.
                self._discard(channel)
                try:
                    self._guard(channel, call)
                except ExecutionFailed as planted:
                    log.warning("while interrupted: %s", planted)
                raise
            if response is None:
                self._discard(channel)
                self._guard(channel, call)
                raise ExecutionTimeout(
                    f"`{call.summary}` did not finish within {request.timeout:g}s and the "
                    "sandbox agent did not answer either; the container was killed and will "
                    "be replaced"
                )
            if response.get("ran") is False and response.get("discard"):
                # The container could not be made ready (its state could not be emptied):
                # nothing ran, so the call goes to a fresh one.
                log.info("%s: %s; replacing the container", channel.name, response["error"])
                self._discard(channel)
                continue
            return channel, response
        raise SandboxUnavailable(
            f"a fresh sandbox container could not be emptied for `{call.summary}`"
        )

    def _guard(self, channel: _AgentChannel, call: _Call) -> None:
        """After a writable call: quarantine what it planted, fail the call, replace the sandbox.

        Runs once no process of the call is left: the agent answers only then, and every other
        path here removed the container first.
        """
        scan = channel.scan
        if scan is None:
            return
        changes = scan.changes()
        replaced = replaced_protected(self.workspace, channel.protected)
        if not changes and not replaced:
            return
        self._discard(channel)
        said = [changes.describe()] if changes else []
        if replaced:
            said.append("moved aside or replaced " + ", ".join(replaced))
        why = (
            f"a writable @docker call (`{call.summary}`) {'; '.join(said)} in the "
            "workspace; sandboxed tools may never create or move protected paths"
        )
        planted = [r for r in replaced if os.path.lexists(self.workspace / r)]
        moved = tuple(dict.fromkeys([*changes.appeared, *changes.unreadable, *planted]))
        where = quarantine(self.workspace, moved, why) if moved else "nothing to move"
        raise ExecutionFailed(
            f"{why}. Quarantined: {where}; the sandbox was replaced{new_repository_hint(moved)}"
        )

    def _check_apparent(
        self, channel: _AgentChannel, call: _Call, response: dict[str, Any]
    ) -> None:
        """After a writable call in bind mode: fail it when what it wrote, at apparent size,
        exceeds the disk budget (a sparse file, hard links: environments.apparent)."""
        watch = channel.watch
        if watch is None or "error" in response:
            return
        changed = watch.changed()
        if changed is None:  # the kernel could not tell: walk
            hidden = hidden_bytes([self.workspace], channel.call_started_ns)
        else:
            hidden = hidden_in(self.workspace, changed)
        # What the files it changed take, never the shared file system's growth: others may
        # write there meanwhile (environments.apparent).
        taken = hidden.occupied
        if hidden.bytes and taken + hidden.bytes > self.settings.disk_budget_bytes:
            raise ExecutionFailed(
                f"`{call.summary}` wrote more than its disk budget of "
                f"{self.settings.disk_budget} to the workspace, counting apparent sizes: what it "
                f"changed takes {taken:,} bytes, and holds {hidden.bytes:,} "
                f"bytes more that occupy no space yet (holes, more names of one file), which a "
                f"copy of it would write: {hidden.describe()}. What it wrote is still there. A "
                'project can raise "docker": {"disk_budget": ...} in codecoder.json'
            )

    # -- containers --------------------------------------------------------------------------

    def _ensure_started(self) -> Any:
        with self._lock:
            return self._start_locked()

    def _start_locked(self) -> Any:
        """The engine's client, once the workspace and the image are checked and the leftovers
        of dead runtimes removed (once per environment)."""
        if self._closed:
            raise SandboxUnavailable("this @docker environment was closed")
        if self._prepared:
            return self.engine.client
        self._containers.check_workspace()
        client = self.engine.client
        self._containers.check_image(self.engine.image_labels(self.settings.image))
        self._containers.remove_leftovers(self.engine)
        self._prepared = True
        return client

    # -- sync mode ----------------------------------------------------------------------------

    def _ensure_volume(self) -> WorkspaceVolume:
        with self._lock:
            client = self._start_locked()
            if self._volume is None:
                uid, gid = (int(part) for part in self._containers.command_user().split(":"))
                name = f"codecoder-{self.session_id}-v{next(self._generation)}"
                with _engine_errors("create the workspace volume"):
                    self._volume = WorkspaceVolume(
                        client,
                        self.workspace,
                        name,
                        self.settings.image,
                        self._containers.labels("sync"),
                        (uid, gid),
                    )
            return self._volume

    def _sync_in(self, mode: Mode) -> None:
        """Bring the workspace volume up to date before a call. Called with the sync lock and
        `mode`'s lock held."""
        volume = self._ensure_volume()
        with _engine_errors("copy the workspace into its volume"):
            deleted = volume.push()
        if not deleted:
            return
        # put_archive cannot delete: the writable container's agent removes what went.
        with self._mode_locks["rw"] if mode == "ro" else contextlib.nullcontext():
            channel = self._channel("rw")
            try:
                response = channel.call({"delete": deleted}, AGENT_START_SECONDS, 1024)
            except _AgentGone as gone:
                self._discard(channel)
                raise SandboxUnavailable(f"the sandbox stopped while syncing ({gone})") from None
        if response is None or "deleted" not in response:
            self._reset_volume()
            raise SandboxUnavailable(
                "the sandbox did not remove what was deleted from the workspace; its volume "
                "is rebuilt for the next call"
            )

    def _sync_back(
        self, channel: _AgentChannel, call: _Call, response: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Apply what a writable call changed in the volume to the workspace (sync mode)."""
        changes = response.get("changes")
        if changes is None:
            if "error" not in response:
                self._reset_volume()  # it ran, but what it changed is unknown
            return None
        budget = self.settings.disk_budget_bytes
        if changes.get("over_budget") or response.get("disk_budget_hit"):
            # Stopped at its budget (or past it at apparent size): what it wrote until then is
            # not the call's result, and comes back no more than the rest would have.
            self._reset_volume()
            raise ExecutionFailed(
                f"`{call.summary}` wrote more than its disk budget of "
                f"{self.settings.disk_budget} to the workspace; nothing of it was copied back. "
                'A project can raise "docker": {"disk_budget": ...} in codecoder.json'
            )
        if not changes.get("entries") and not changes.get("deleted"):
            return {"written": 0, "deleted": 0, "kept_in_sandbox": [], "unreadable": []}
        assert self._volume is not None
        inline = changes.get("inline")
        try:
            if inline is not None:
                report = self._volume.apply_inline(inline, budget)
            else:
                report = self._volume.pull(channel.container_id, budget)
        except ExecutionFailed as exc:
            self._reset_volume()
            raise ExecutionFailed(f"`{call.summary}`: {exc}") from None
        if report.kept:
            log.warning(
                "%s: what the call wrote that never comes back (protected paths, symlinks "
                "out of the workspace) stays in the sandbox: %s",
                channel.name,
                ", ".join(report.kept[:5]),
            )
        return report.to_json()

    def _reset_volume(self) -> None:
        """Throw the volume away (and the containers using it): the next call starts from a
        fresh copy of the workspace."""
        with self._lock:
            channels = list(self._channels.values())
            volume, self._volume = self._volume, None
            for channel in channels:
                self._discard_locked(channel)
        if volume is not None:
            volume.remove()

    def _channel(self, mode: Mode) -> _AgentChannel:
        """The ready container of `mode`, replaced first when it is gone or stale. Called with
        the mode's lock held."""
        channel = self._channels.get(mode)
        if channel is not None and channel.gone is None:
            scan = channel.scan
            if scan is None or not (
                scan.changes()
                or scan.entries != channel.protected.keys()
                or replaced_protected(self.workspace, channel.protected)
            ):
                return channel
            # A protected path appeared, went or was replaced since the container was made (on
            # the host, or a new package's settings made by a call): its mounts no longer cover
            # what exists, so it runs nothing more.
            log.info("%s: protected paths changed on the host; replacing it", channel.name)
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("this @docker environment was closed")
            if not self._prepared:
                self._containers.check_workspace()
            if channel is not None:
                self._discard_locked(channel)
        channel = self._containers.start(
            self.engine, mode, f"{mode}-{next(self._generation)}", prepare=self._ensure_started
        )
        with self._lock:
            if self._closed:
                self._discard_locked(channel)
                raise SandboxUnavailable("this @docker environment was closed")
            self._channels[mode] = channel
        return channel

    def _discard(self, channel: _AgentChannel) -> None:
        with self._lock:
            self._discard_locked(channel)

    def _discard_locked(self, channel: _AgentChannel) -> None:
        if self._channels.get(channel.mode) is channel:
            del self._channels[channel.mode]
        channel.close()
        if channel.claimed or self.engine.connected:
            try:
                self.engine.remove(channel.container_id)
            except SandboxUnavailable as exc:
                log.warning("%s (close() retries)", exc)

    def _container_oom_killed(self, channel: _AgentChannel) -> bool:
        try:
            return self.engine.inspect(channel.container_id).oom_killed
        except SandboxUnavailable:
            return False
