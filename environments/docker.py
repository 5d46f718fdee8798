"""The @docker environment: commands in a hardened container that stays warm between calls.

Hardening (every container, by default; `DockerSettings` can tighten, and `codecoder check`
warns about anything `DockerSettings.looser_than_default()` reports):

- no network (`network_mode=none`), read-only root filesystem, all capabilities dropped,
  `no-new-privileges`, a pids limit, a memory limit equal to memory+swap, a CPU quota;
- a non-root user (the workspace's owner, or uid 10001 when root owns the workspace);
- `/tmp` (and `/dev/shm`) as size-capped tmpfs, `noexec,nosuid,nodev`;
- the workspace bind-mounted at `/workspace`, read-only unless the request is writable; the
  protected paths `codecoder.json`, `.codecoder/` and `.git/` are never writable from inside
  (see `_protect`); the Docker socket is never mounted; docker-init reaps orphans;
- labels on every container (`codecoder.runtime=1`, the session, the host process), so the
  runtime can remove its own containers and the leftovers of runtimes that died.

Speed: a warm container runs `sandboxes/image/agent.py` as its main process. The runtime keeps
the container's attached stdin/stdout open and writes one JSON line per call; the agent runs the
command as a subprocess and answers with one JSON line (protocol in the agent's docstring). A
call therefore costs one round trip on an open stream, not an exec through the engine API.

The workspace mount is fixed when a container is created, so an environment keeps up to two
warm containers: one with the workspace read-only (created on the first read-only call) and one
with it read-write (created on the first writable call). A single container with both mounts
would let a read-only call reach the writable one, and a fresh container per writable call would
cost a cold start each time.

Every docker SDK, requests and socket exception is mapped where it happens: callers see only
`SandboxUnavailable`, `ExecutionTimeout`, `OutOfMemory` and `ExecutionFailed`.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal, Self

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig, Mount

from environments.base import CommandRequest, CommandResult, Environment
from environments.dockersettings import (
    WORKSPACE_MOUNT,
    DockerSettings,
    LooserSetting,
)
from runtime.ceiling import EnvironmentTag
from runtime.errors import (
    Cancelled,
    ExecutionFailed,
    ExecutionTimeout,
    OutOfMemory,
    SandboxUnavailable,
)
from runtime.prompt import visible
from runtime.protected import PROTECTED_NAMES
from runtime.state import state_directory

__all__ = [
    "PROTECTED_PATHS",
    "DockerEnvironment",
    "DockerSettings",
    "LooserSetting",
]

log = logging.getLogger(__name__)

PROTECTED_PATHS: Final = PROTECTED_NAMES
AGENT_COMMAND: Final = ("python3", "-I", "-S", "/opt/codecoder/agent.py")
AGENT_PROTOCOL: Final = 1
FALLBACK_USER: Final = "10001:10001"

LABEL_RUNTIME: Final = "codecoder.runtime"
LABEL_SESSION: Final = "codecoder.session"
LABEL_MODE: Final = "codecoder.mode"
LABEL_HOST: Final = "codecoder.host"
LABEL_BOOT: Final = "codecoder.boot"
LABEL_PID: Final = "codecoder.pid"
LABEL_PID_START: Final = "codecoder.pid-start"

# How long past a call's own timeout the host waits for the agent before giving up on the
# container: the agent kills at the deadline and drains for 0.5 s, the rest is slack for a
# container starved of CPU (a fork bomb shares the CPU quota with the agent).
HOST_GRACE_SECONDS: Final = 5.0
AGENT_START_SECONDS: Final = 20.0
ENGINE_TIMEOUT_SECONDS: Final = 60

SETUP_HINT: Final = (
    "run scripts/docker-setup.sh as root (it installs docker.io, starts dockerd and builds "
    "the codecoder-sandbox image)"
)

Mode = Literal["ro", "rw"]


# --- settings ----------------------------------------------------------------------------------


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@contextlib.contextmanager
def _engine_errors(action: str) -> Iterator[None]:
    """Map everything the docker SDK and its transport raise to `SandboxUnavailable`."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise SandboxUnavailable(
            f"cannot {action}: the image is missing ({_explain(exc)}); {SETUP_HINT}, "
            "or `docker build -t codecoder-sandbox .` in the codecoder repository"
        ) from exc
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(
            f"cannot {action}: the Docker engine answered {_explain(exc)}"
        ) from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise SandboxUnavailable(
            f"cannot {action}: no Docker engine answers at {_engine_address()} "
            f"({_explain(exc)}); start one (`dockerd &` as root) or {SETUP_HINT}"
        ) from exc


def _explain(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc).strip() or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "…"


def _client_from_env() -> Any:
    return docker.from_env(timeout=ENGINE_TIMEOUT_SECONDS)


# --- host identity (for telling our leftovers from other runtimes' live containers) ------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _process_start(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot, which tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after it do not.
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(labels: dict[str, str], boot: str) -> bool:
    if labels.get(LABEL_BOOT) != boot:
        return False  # the machine rebooted since: its creator is certainly gone
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    recorded = labels.get(LABEL_PID_START)
    if recorded and Path("/proc/self/stat").exists():
        return _process_start(pid) == recorded
    # Without /proc (or a start time) only existence can be checked; a reused pid then keeps
    # a leftover alive until the next start, which errs on the side of not killing live work.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- the stream to the agent -------------------------------------------------------------------


class _AgentGone(Exception):
    """The attached stream closed: the container stopped or the engine dropped us."""


class _Pending:
    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.response: dict[str, Any] | None = None


class _AgentChannel:
    """One warm container and the attached stream to the agent running in it."""

    def __init__(self, container_id: str, name: str, mode: Mode, attached: Any) -> None:
        self.container_id = container_id
        self.name = name
        self.mode = mode
        # The SDK's socket wrapper keeps the HTTP response alive; the raw socket does the I/O.
        self._attached = attached
        self._sock: socket.socket = getattr(attached, "_sock", attached)
        # The SDK sets the client timeout on the socket; an idle warm container must not time out.
        self._sock.settimeout(None)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._hello = threading.Event()
        self.hello: dict[str, Any] = {}
        self.gone: str | None = None
        self._stderr_tail = bytearray()
        # Filled in for read-write containers: protected paths absent when it was created.
        self.unprotected: tuple[str, ...] = ()
        self._reader = threading.Thread(
            target=self._read_frames, name=f"codecoder-{name}", daemon=True
        )
        self._reader.start()

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode(errors="replace").strip()

    def wait_ready(self, timeout: float) -> bool:
        return self._hello.wait(timeout) and self.gone is None

    def call(
        self, message: dict[str, Any], wait: float, cancel: threading.Event | None = None
    ) -> dict[str, Any] | None:
        """Send one request; its answer, or None when none came within `wait` seconds.

        Raises Cancelled as soon as `cancel` is set (the caller then discards the container)."""
        pending = _Pending()
        with self._lock:
            if self.gone is not None:
                raise _AgentGone(self.gone)
            request_id = next(self._ids)
            self._pending[request_id] = pending
        message["id"] = request_id
        # JSON escapes every control character, so the engine's detach sequence (ctrl-p ctrl-q)
        # can never appear in what we write to the attached stdin.
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        try:
            with self._send_lock:
                self._sock.sendall(data)
        except OSError as exc:
            self._fail(f"writing to the sandbox agent failed: {exc}")
        if not _wait_or_cancel(pending.done, wait, cancel):
            with self._lock:
                self._pending.pop(request_id, None)
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled: the sandbox container running it was killed")
            return None
        if pending.response is None:
            raise _AgentGone(self.gone or "the sandbox agent stopped")
        return pending.response

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._fail("the sandbox was closed")

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self.gone is None:
                self.gone = reason
            pending, self._pending = self._pending, {}
        for waiter in pending.values():
            waiter.done.set()
        self._hello.set()

    def _read_frames(self) -> None:
        # Without a TTY the engine multiplexes the streams: each frame is an 8-byte header
        # (stream id, three zero bytes, big-endian payload length) and the payload.
        frames = bytearray()
        lines = bytearray()
        reason = "the sandbox container stopped"
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                frames += chunk
                while len(frames) >= 8:
                    size = int.from_bytes(frames[4:8], "big")
                    if len(frames) < 8 + size:
                        break
                    stream, payload = frames[0], bytes(frames[8 : 8 + size])
                    del frames[: 8 + size]
                    if stream == 1:
                        lines += payload
                        *complete, rest = lines.split(b"\n")
                        lines = bytearray(rest)
                        for line in complete:
                            self._dispatch(line)
                    else:
                        self._stderr_tail += payload
                        del self._stderr_tail[:-4096]
        except OSError as exc:
            reason = f"the stream to the sandbox broke: {exc}"
        self._fail(reason)

    def _dispatch(self, line: bytes | bytearray) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("%s: unreadable line from the agent: %.200r", self.name, line)
            return
        if "hello" in message:
            self.hello = message
            self._hello.set()
            return
        with self._lock:
            waiter = self._pending.pop(message.get("id"), None)
        if waiter is None:
            log.warning("%s: answer for no pending call: %.200r", self.name, line)
            return
        waiter.response = message
        waiter.done.set()


# --- the environment ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    """What the environment knows about a request once it is translated for the container."""

    argv: list[str]
    cwd: str
    summary: str
    started: float = field(default_factory=time.monotonic)


class DockerEnvironment(Environment[CommandRequest, CommandResult]):
    """Runs `CommandRequest`s in warm, hardened containers of the `codecoder-sandbox` image.

    Nothing touches the engine until `start()` or the first `run()`: then the engine and image
    are checked (`SandboxUnavailable` says what to do when either is missing), containers left
    behind by dead runtimes are removed, and the container for the call's mode is started.
    `close()` removes every container of this environment. Safe to use from several threads.
    """

    tag = EnvironmentTag.DOCKER

    def __init__(
        self,
        workspace: Path | str,
        settings: DockerSettings | None = None,
        *,
        session_id: str | None = None,
        client_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.workspace = Path(workspace).resolve()
        self.settings = settings or DockerSettings()
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self._client_factory = client_factory or _client_from_env
        self._client: Any = None
        self._lock = threading.Lock()
        self._channels: dict[Mode, _AgentChannel] = {}
        self._generation = itertools.count(1)
        self._closed = False
        self._host = socket.gethostname()
        self._boot = _boot_id()
        self._pid = os.getpid()

    # -- public API --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def start(self) -> None:
        """Connect, check the image, remove dead runtimes' leftovers, warm the read-only container.

        Optional: `run()` does the same on first use.
        """
        self._channel("ro")

    def run(self, request: CommandRequest) -> CommandResult:
        mode: Mode = "rw" if request.writable else "ro"
        call = self._translate(request)
        channel = self._channel(mode)
        present = self._present_protected(channel)
        message: dict[str, Any] = {
            "argv": call.argv,
            "cwd": call.cwd,
            "env": dict(request.env or {}),
            "stdin": base64.b64encode(request.stdin).decode(),
            "timeout": request.timeout,
            "max_output": request.max_output,
        }
        try:
            response = channel.call(
                message, wait=request.timeout + HOST_GRACE_SECONDS, cancel=request.cancel
            )
        except Cancelled:
            self._discard(channel)  # the only way to stop the call: a fresh container follows
            raise
        except _AgentGone as gone:
            oom = self._container_oom_killed(channel)
            self._discard(channel)
            if oom:
                raise self._out_of_memory(call) from None
            raise SandboxUnavailable(
                f"the sandbox container stopped during `{call.summary}` ({gone}); "
                "a fresh one is started for the next call"
            ) from None
        finally:
            if mode == "rw":
                self._guard_protected(channel, present)
        if response is None:
            self._discard(channel)
            raise ExecutionTimeout(
                f"`{call.summary}` did not finish within {request.timeout:g}s and the sandbox "
                "agent did not answer either; the container was killed and will be replaced"
            )
        return self._result(call, channel, request, response)

    def close(self) -> None:
        """Stop and remove every container of this environment. Never raises."""
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
            client, self._client = self._client, None
        for channel in channels:
            channel.close()
        if client is None:
            return
        try:
            with _engine_errors("remove the sandbox containers"):
                for summary in client.api.containers(
                    all=True, filters={"label": f"{LABEL_SESSION}={self.session_id}"}
                ):
                    self._remove(client, summary["Id"])
                client.close()
        except SandboxUnavailable as exc:
            log.warning("closing the @docker environment: %s", exc)

    def cold_run(self, request: CommandRequest) -> CommandResult:
        """Run one request in a fresh container, like a hardened `docker run --rm`.

        The baseline the warm path is measured against; no output cap beyond the request's.
        """
        call = self._translate(request)
        client = self._ensure_started()
        mode: Mode = "rw" if request.writable else "ro"
        config, _ = self._container_config(mode, f"cold-{next(self._generation)}")
        config.update(
            command=call.argv,
            working_dir=call.cwd,
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
                self._remove(client, container.id)
        return self._plain_result(call, int(status["StatusCode"]), stdout, stderr, request)

    def exec_run(self, request: CommandRequest) -> CommandResult:
        """Run one request through the engine's exec API in the warm container.

        The second baseline for the warm path; unlike `run()` it has no timeout (the exec API
        offers none), no OOM report and no cleanup of background processes.
        """
        call = self._translate(request)
        channel = self._channel("rw" if request.writable else "ro")
        client = self._ensure_started()
        with _engine_errors("exec into the sandbox container"):
            exec_id = client.api.exec_create(
                channel.container_id, call.argv, workdir=call.cwd, environment=request.env
            )["Id"]
            stdout, stderr = client.api.exec_start(exec_id, demux=True)
            code = client.api.exec_inspect(exec_id)["ExitCode"]
        return self._plain_result(call, int(code or 0), stdout or b"", stderr or b"", request)

    # -- containers --------------------------------------------------------------------------

    def _ensure_started(self) -> Any:
        with self._lock:
            return self._start_locked()

    def _start_locked(self) -> Any:
        if self._closed:
            raise SandboxUnavailable("this @docker environment was closed")
        if self._client is not None:
            return self._client
        self._check_workspace()
        with _engine_errors("connect to the Docker engine"):
            client = self._client_factory()
            client.ping()
        try:
            with _engine_errors(f"find the sandbox image {self.settings.image!r}"):
                client.images.get(self.settings.image)
            self._remove_leftovers(client)
        except BaseException:
            with contextlib.suppress(Exception):
                client.close()
            raise
        self._client = client
        return client

    def _channel(self, mode: Mode) -> _AgentChannel:
        # Fast path without the lock, so calls to a warm container never wait for another
        # mode's container to be created.
        channel = self._channels.get(mode)
        if channel is not None and channel.gone is None and not self._stale(channel):
            return channel
        with self._lock:
            client = self._start_locked()
            channel = self._channels.get(mode)
            if channel is not None and channel.gone is None and not self._stale(channel):
                return channel
            if channel is not None:
                self._discard_locked(channel)
            channel = self._create_channel(client, mode)
            self._channels[mode] = channel
            return channel

    def _create_channel(self, client: Any, mode: Mode) -> _AgentChannel:
        name = f"{mode}-{next(self._generation)}"
        config, unprotected = self._container_config(mode, name)
        with _engine_errors("create the sandbox container"):
            container = client.containers.create(**config)
        channel: _AgentChannel | None = None
        try:
            # Attach before start, so nothing the agent writes can be missed (and nothing is
            # read ahead into the SDK's HTTP buffer, which would hide it from the raw socket).
            with _engine_errors("attach to the sandbox container"):
                attached = client.api.attach_socket(
                    container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
                channel = _AgentChannel(container.id, config["name"], mode, attached)
                channel.unprotected = unprotected
                container.start()
            if not channel.wait_ready(AGENT_START_SECONDS):
                detail = channel.stderr_tail or channel.gone or "no answer"
                raise SandboxUnavailable(
                    f"the agent of image {self.settings.image!r} did not start ({detail}); "
                    f"rebuild the image: {SETUP_HINT}"
                )
            if channel.hello.get("hello") != AGENT_PROTOCOL:
                raise SandboxUnavailable(
                    f"image {self.settings.image!r} has an agent speaking protocol "
                    f"{channel.hello.get('hello')!r}, this runtime speaks {AGENT_PROTOCOL}; "
                    f"rebuild the image: {SETUP_HINT}"
                )
        except BaseException:
            if channel is not None:
                channel.close()
            self._remove(client, container.id)
            raise
        return channel

    def _container_config(self, mode: Mode, name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The hardened container for `mode`, and the protected paths it leaves unmounted."""
        settings = self.settings
        tmpfs_options = f"rw,noexec,nosuid,nodev,size={settings.tmpfs_bytes}"
        mounts = [Mount(WORKSPACE_MOUNT, str(self.workspace), type="bind", read_only=mode == "ro")]
        unprotected: tuple[str, ...] = ()
        if mode == "rw":
            protect, unprotected = self._protect()
            mounts += protect
        labels = {
            LABEL_RUNTIME: "1",
            LABEL_SESSION: self.session_id,
            LABEL_MODE: mode,
            LABEL_HOST: self._host,
            LABEL_BOOT: self._boot,
            LABEL_PID: str(self._pid),
            LABEL_PID_START: _process_start(self._pid) or "",
        }
        config = {
            "image": settings.image,
            "command": list(AGENT_COMMAND),
            "name": f"codecoder-{self.session_id}-{name}",
            "labels": labels,
            "user": self._user(),
            "working_dir": WORKSPACE_MOUNT,
            "environment": {"HOME": "/tmp", "LANG": "C.UTF-8"},
            # With detach=False the SDK also sets StdinOnce: the agent's stdin closes when the
            # attached stream does, so the agent of a runtime that died exits on its own.
            "stdin_open": True,
            "detach": False,
            "tty": False,
            "init": True,
            "network_mode": settings.network,
            "read_only": settings.read_only_rootfs,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"],
            "pids_limit": settings.pids_limit,
            "mem_limit": settings.memory_bytes,
            "memswap_limit": settings.memory_bytes,
            "nano_cpus": int(settings.cpus * 1e9),
            "ipc_mode": "private",
            "shm_size": settings.tmpfs_bytes,
            "tmpfs": {path: tmpfs_options for path in ("/tmp", *settings.extra_writable_paths)},
            "mounts": mounts,
            # The agent's answers travel on stdout; a log driver would copy every command's
            # output to the host's disk for nothing.
            "log_config": LogConfig(type=LogConfig.types.NONE),
        }
        return config, unprotected

    def _protect(self) -> tuple[list[Mount], tuple[str, ...]]:
        """Read-only mounts over the protected paths that exist, and the names that do not.

        A mount needs its mount point to exist, and creating one would change the user's
        workspace, so an absent protected path is guarded after each writable call instead
        (`_guard_protected`). A symlinked protected path cannot be mounted over (the engine
        follows the link), and the link itself could be replaced from inside: refuse.
        """
        mounts: list[Mount] = []
        absent: list[str] = []
        for name in PROTECTED_PATHS:
            path = self.workspace / name
            if path.is_symlink():
                raise ExecutionFailed(
                    f"{name} in the workspace is a symbolic link; writable @docker calls are "
                    "refused because it could not be kept read-only inside the sandbox"
                )
            if path.exists():
                target = f"{WORKSPACE_MOUNT}/{name}"
                mounts.append(Mount(target, str(path), type="bind", read_only=True))
            else:
                absent.append(name)
        return mounts, tuple(absent)

    def _present_protected(self, channel: _AgentChannel) -> set[str]:
        return {n for n in channel.unprotected if os.path.lexists(self.workspace / n)}

    def _stale(self, channel: _AgentChannel) -> bool:
        # A protected path created on the host after the read-write container started has no
        # read-only mount in it yet: replace the container before it runs anything else.
        return bool(self._present_protected(channel))

    def _guard_protected(self, channel: _AgentChannel, present_before: set[str]) -> None:
        created = sorted(self._present_protected(channel) - present_before)
        if not created:
            return
        self._discard(channel)
        quarantine = self._quarantine_dir()
        quarantine.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in created:
            with contextlib.suppress(OSError):
                shutil.move(str(self.workspace / name), str(quarantine / name))
        raise ExecutionFailed(
            f"a writable @docker call created {', '.join(created)} in the workspace; sandboxed "
            f"tools may never write protected paths. Moved to {quarantine}; the sandbox was "
            "restarted"
        )

    def _quarantine_dir(self) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        return state_directory() / "quarantine" / f"{self.session_id}-{stamp}"

    def _user(self) -> str:
        if self.settings.user != "auto":
            return self.settings.user
        info = self.workspace.stat()
        # Files the sandbox writes then belong to the workspace's owner; root never runs inside.
        return f"{info.st_uid}:{info.st_gid}" if info.st_uid != 0 else FALLBACK_USER

    def _check_workspace(self) -> None:
        if not self.workspace.is_dir():
            raise SandboxUnavailable(f"the workspace {self.workspace} is not a directory")
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

    def _discard(self, channel: _AgentChannel) -> None:
        with self._lock:
            self._discard_locked(channel)

    def _discard_locked(self, channel: _AgentChannel) -> None:
        if self._channels.get(channel.mode) is channel:
            del self._channels[channel.mode]
        channel.close()
        if self._client is not None:
            try:
                with _engine_errors("remove a sandbox container"):
                    self._remove(self._client, channel.container_id)
            except SandboxUnavailable as exc:
                log.warning("%s (close() retries)", exc)

    @staticmethod
    def _remove(client: Any, container_id: str) -> None:
        try:
            client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass  # already gone
        except docker.errors.APIError as exc:
            # 409: another cleaner is removing it already.
            if exc.status_code != 409:
                raise

    def _remove_leftovers(self, client: Any) -> list[str]:
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
                self._remove(client, summary["Id"])
                removed.append((summary.get("Names") or [summary["Id"]])[0].lstrip("/"))
        if removed:
            log.info("removed %d leftover sandbox container(s): %s", len(removed), removed)
        return removed

    def _container_oom_killed(self, channel: _AgentChannel) -> bool:
        if self._client is None:
            return False
        try:
            with _engine_errors("inspect the sandbox container"):
                state = self._client.api.inspect_container(channel.container_id)["State"]
        except SandboxUnavailable:
            return False
        return bool(state.get("OOMKilled"))

    # -- requests and results ----------------------------------------------------------------

    def _translate(self, request: CommandRequest) -> _Call:
        if request.argv is not None:
            argv = list(request.argv)
            summary = shlex.join(argv)
        else:
            assert request.script is not None  # CommandRequest guarantees one of the two
            argv = ["/bin/bash", "-c", request.script]
            summary = request.script
        cwd = Path(os.path.normpath(self.workspace / request.cwd))
        try:
            relative = cwd.relative_to(self.workspace)
        except ValueError:
            raise ExecutionFailed(
                f"working directory {request.cwd} is outside the workspace {self.workspace}, "
                "which is all the sandbox can see"
            ) from None
        inside = PurePosixPath(WORKSPACE_MOUNT, relative.as_posix())
        return _Call(argv=argv, cwd=str(inside), summary=_visible(summary))

    def _result(
        self,
        call: _Call,
        channel: _AgentChannel,
        request: CommandRequest,
        response: dict[str, Any],
    ) -> CommandResult:
        if "error" in response:
            raise ExecutionFailed(f"`{call.summary}` could not run: {response['error']}")
        pids_note = (
            f"; it also reached the pids limit ({self.settings.pids_limit})"
            if response.get("pids_limit_hit")
            else ""
        )
        if response.get("oom_killed") or (
            not channel.hello.get("oom_counter")
            and response.get("exit_code") == 137
            and not response.get("timed_out")
            and self._container_oom_killed(channel)
        ):
            raise self._out_of_memory(call)
        if response.get("timed_out"):
            raise ExecutionTimeout(
                f"`{call.summary}` did not finish within {request.timeout:g}s and was killed "
                f"with all its processes{pids_note}"
            )
        signal_number = response.get("signal")
        return CommandResult(
            exit_code=int(response["exit_code"]),
            stdout=response["stdout"],
            stderr=response["stderr"],
            duration=time.monotonic() - call.started,
            truncated=bool(response["truncated"]),
            killed_by=_signal_name(signal_number) if signal_number else None,
            extra={
                "container": channel.name,
                "stdout_bytes": response["stdout_bytes"],
                "stderr_bytes": response["stderr_bytes"],
                "pids_limit_hit": bool(response.get("pids_limit_hit")),
            },
        )

    def _out_of_memory(self, call: _Call) -> OutOfMemory:
        return OutOfMemory(
            f"`{call.summary}` was killed at the sandbox's memory limit "
            f"({self.settings.memory}, swap included)"
        )

    def _plain_result(
        self, call: _Call, code: int, stdout: bytes, stderr: bytes, request: CommandRequest
    ) -> CommandResult:
        out, out_cut = _cap(stdout, request.max_output)
        err, err_cut = _cap(stderr, request.max_output)
        return CommandResult(
            exit_code=code,
            stdout=out,
            stderr=err,
            duration=time.monotonic() - call.started,
            truncated=out_cut or err_cut,
        )


def _wait_or_cancel(done: threading.Event, wait: float, cancel: threading.Event | None) -> bool:
    """Wait for `done` up to `wait` seconds, looking at `cancel` every 50 ms; True when done."""
    if cancel is None:
        return done.wait(wait)
    deadline = time.monotonic() + wait
    while not done.wait(min(0.05, max(deadline - time.monotonic(), 0.0))):
        if cancel.is_set() or time.monotonic() >= deadline:
            return False
    return True


def _cap(data: bytes, limit: int) -> tuple[str, bool]:
    if len(data) <= limit:
        return data.decode(errors="replace"), False
    head, tail = limit // 2, limit - limit // 2
    dropped = len(data) - head - tail
    text = (
        data[:head].decode(errors="replace")
        + f"\n[... {dropped} bytes truncated ...]\n"
        + data[len(data) - tail :].decode(errors="replace")
    )
    return text, True


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _visible(text: str, limit: int = 120) -> str:
    """The text made visible (runtime.prompt.visible) and shortened for a message."""
    shown = visible(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
