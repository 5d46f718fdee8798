"""The @docker environment: commands in a hardened container that stays warm between calls.

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
- labels on every container (`codecoder.runtime=1`, the session, the host process), so the
  runtime can remove its own containers and the leftovers of runtimes that died.

Speed: a warm container runs the agent (`sandboxes/image/agent/`) as its main process. The runtime
keeps the container's attached stdin/stdout open and writes one authenticated line per call; the
agent runs the command and answers with one line (protocol in the agent's `channel.py`). A call
therefore costs one round trip on an open stream, not an exec through the engine API. A
container runs one call at a time: that is what lets the agent end every process of a call
before it answers. Calls of the same mode wait for each other.

The workspace mount is fixed when a container is created, so an environment keeps up to two
warm containers: one with the workspace read-only (created on the first read-only call) and one
with it read-write (created on the first writable call). A single container with both mounts
would let a read-only call reach the writable one, and a fresh container per writable call would
cost a cold start each time.

The stream from the agent is read with bounded buffers: a frame larger than `MAX_FRAME` or a
line longer than the answer to the pending request can be, an answer with a wrong MAC or for
no pending request, ends the container.

Every docker SDK, requests and socket exception is mapped where it happens: callers see only
`SandboxUnavailable`, `ExecutionTimeout`, `OutOfMemory` and `ExecutionFailed`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import ipaddress
import itertools
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal, Self

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig, Mount

from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.environments.docker.cgroups import host_limits
from codecoder.environments.docker.egress import PROXY_PORT, SOCKET_NAME, EgressProxy
from codecoder.environments.docker.settings import (
    KNOWN_RUNTIMES,
    WORKSPACE_MOUNT,
    DockerSettings,
    LooserSetting,
    parse_size,
)
from codecoder.environments.docker.sync import OUTBOX, WorkspaceVolume
from codecoder.environments.workspaceguard import ProtectedScan, quarantine
from codecoder.runtime.kernel.ceiling import EnvironmentTag
from codecoder.runtime.kernel.display import visible
from codecoder.runtime.kernel.errors import (
    Cancelled,
    ExecutionFailed,
    ExecutionTimeout,
    OutOfMemory,
    SandboxUnavailable,
)
from codecoder.runtime.kernel.hosts import Resolver, system_resolver
from codecoder.runtime.kernel.state import workspace_directory

__all__ = [
    "DockerEnvironment",
    "DockerSettings",
    "LooserSetting",
]

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
AGENT_PROTOCOL: Final = 3
# Every sandbox image carries it (the Dockerfile, `codecoder image build`): the protocol of its
# agent. An image without it is not a sandbox image.
LABEL_AGENT: Final = "codecoder.agent"
# Where the egress proxy's socket directory is mounted (environments.docker.egress).
EGRESS_MOUNT: Final = "/opt/codecoder/egress"
# The agent starts as root with these and keeps SETUID, SETGID and KILL (it drops SETPCAP once
# it has emptied the bounding set); commands run as the workspace user with none.
AGENT_USER: Final = "0:0"
AGENT_CAPABILITIES: Final = ("SETUID", "SETGID", "KILL", "SETPCAP")
FALLBACK_USER: Final = "10001:10001"
SNAPSHOT_MOUNT: Final = "/opt/codecoder/capability"
# Room for a capability's files (runtime.config.capabilities.MAX_BYTES is 64 MiB); tmpfs takes
# memory only for what is written.
SNAPSHOT_TMPFS: Final = "96m"

LABEL_RUNTIME: Final = "codecoder.runtime"
LABEL_SESSION: Final = "codecoder.session"
LABEL_MODE: Final = "codecoder.mode"
LABEL_HOST: Final = "codecoder.host"
LABEL_BOOT: Final = "codecoder.boot"
LABEL_PID: Final = "codecoder.pid"
LABEL_PID_START: Final = "codecoder.pid-start"

# How long past a call's own timeout the host waits for the agent before giving up on the
# container: the agent kills at the deadline, drains for 0.5 s and checks for survivors for up
# to 2 s; the rest is slack for a container starved of CPU.
HOST_GRACE_SECONDS: Final = 5.0
AGENT_START_SECONDS: Final = 20.0
ENGINE_TIMEOUT_SECONDS: Final = 60
# The engine copies a container's output in chunks of 32 KiB; a larger frame is not its.
MAX_FRAME: Final = 1024 * 1024
# Before any request: the hello. During a call: what its answer can take (both streams at the
# cap, each byte at worst a six-character JSON escape) and room for the rest.
HELLO_LINE: Final = 1024 * 1024

SETUP_HINT: Final = (
    "run scripts/docker-setup.sh as root (it installs docker.io, starts dockerd and builds "
    "the codecoder-sandbox image)"
)

Mode = Literal["ro", "rw"]


def _answer_line_cap(max_output: int) -> int:
    return 16 * max_output + HELLO_LINE


# --- settings ----------------------------------------------------------------------------------


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def engine_is_local(address: str | None = None) -> bool:
    """Whether the engine at `address` (DOCKER_HOST by default) runs on this machine, so that it
    can bind-mount this machine's directories: a Unix socket, a named pipe, or TCP to loopback."""
    parsed = urllib.parse.urlsplit(address or _engine_address())
    if parsed.scheme in ("unix", "npipe", ""):
        return True
    if parsed.scheme in ("tcp", "http", "https"):
        try:
            return ipaddress.ip_address(parsed.hostname or "").is_loopback
        except ValueError:
            return parsed.hostname == "localhost"
    return False  # ssh:// and anything else reaches another machine


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
    """The attached stream closed or broke its protocol: the container is of no further use."""


class _Pending:
    __slots__ = ("done", "id", "response")

    def __init__(self, request_id: int) -> None:
        self.id = request_id
        self.done = threading.Event()
        self.response: dict[str, Any] | None = None


class _AgentChannel:
    """One warm container and the authenticated stream to the agent running in it.

    The host sends the session key as the first line; every later line in either direction is
    `<HMAC-SHA256 hex> <JSON>` (see the agent). One request is in flight at a time.
    """

    def __init__(self, container_id: str, name: str, mode: Mode, attached: Any) -> None:
        self.container_id = container_id
        self.name = name
        self.mode = mode
        # The SDK's socket wrapper keeps the HTTP response alive; the raw socket does the I/O.
        self._attached = attached
        self._sock: socket.socket = getattr(attached, "_sock", attached)
        # The SDK sets the client timeout on the socket; an idle warm container must not time out.
        self._sock.settimeout(None)
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._ids = itertools.count(1)
        self._line_cap = HELLO_LINE
        self._hello = threading.Event()
        self.hello: dict[str, Any] = {}
        self.gone: str | None = None
        self._stderr_tail = bytearray()
        # What the host knows of the container's state (calls are serialized per mode).
        self.scan: ProtectedScan | None = None  # read-write containers: what is mounted read-only
        self.used = False
        self.state_grant: str | None = None
        self.snapshot_digest: str | None = None
        self.proxy: EgressProxy | None = None  # this container's egress proxy, if it has one
        self.runtime = "runc"  # the engine runtime it runs under
        # Sync mode: the volume's generation when this container last listed it (after its last
        # writable call); while the volume is still at it, the agent's listing stands.
        self.synced_generation: int | None = None
        self._reader = threading.Thread(
            target=self._read_frames, name=f"codecoder-{name}", daemon=True
        )
        self._reader.start()

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode(errors="replace").strip()

    def begin(self, uid: int, gid: int, egress: dict[str, Any] | None, outbox: str | None) -> None:
        """Send the session key, the command user and what the agent serves besides calls
        (the egress relay, the outbox of sync mode): the first line the agent reads."""
        setup = {"key": self._key.hex(), "uid": uid, "gid": gid, "egress": egress, "outbox": outbox}
        self._send(json.dumps(setup).encode() + b"\n")

    def wait_ready(self, timeout: float) -> bool:
        return self._hello.wait(timeout) and self.gone is None

    def call(
        self,
        message: dict[str, Any],
        wait: float,
        max_output: int,
        cancel: threading.Event | None = None,
    ) -> dict[str, Any] | None:
        """Send one request; its answer, or None when none came within `wait` seconds.

        Raises Cancelled as soon as `cancel` is set (the caller then discards the container)."""
        with self._lock:
            if self.gone is not None:
                raise _AgentGone(self.gone)
            pending = _Pending(next(self._ids))
            self._pending = pending
            self._line_cap = _answer_line_cap(max_output)
        message["id"] = pending.id
        # JSON escapes every control character, so the engine's detach sequence (ctrl-p ctrl-q)
        # can never appear in what we write to the attached stdin.
        self._send(self._seal(b"H", json.dumps(message, separators=(",", ":")).encode()))
        if not _wait_or_cancel(pending.done, wait, cancel):
            with self._lock:
                self._pending = None
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
        if self.proxy is not None:
            self.proxy.close()

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self._fail(f"writing to the sandbox agent failed: {exc}")

    def _mac(self, direction: bytes, body: bytes) -> bytes:
        return hmac.new(self._key, direction + body, hashlib.sha256).hexdigest().encode()

    def _seal(self, direction: bytes, body: bytes) -> bytes:
        return self._mac(direction, body) + b" " + body + b"\n"

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self.gone is None:
                self.gone = reason
            pending, self._pending = self._pending, None
        if pending is not None:
            pending.done.set()
        self._hello.set()

    def _violation(self, reason: str) -> None:
        log.warning("%s: %s; the container is discarded", self.name, reason)
        self._fail(f"the sandbox broke the protocol: {reason}")
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def _read_frames(self) -> None:
        # Without a TTY the engine multiplexes the streams: each frame is an 8-byte header
        # (stream id, three zero bytes, big-endian payload length) and the payload. Both the
        # frame buffer and the line buffer are bounded, and a newline is looked for only in
        # what arrived, so no input costs more than linear time or bounded memory.
        frames = bytearray()
        line = bytearray()
        reason = "the sandbox container stopped"
        try:
            while self.gone is None:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                frames += chunk
                while len(frames) >= 8 and self.gone is None:
                    size = int.from_bytes(frames[4:8], "big")
                    if size > MAX_FRAME:
                        self._violation(f"a frame of {size} bytes")
                        return
                    if len(frames) < 8 + size:
                        break
                    stream, payload = frames[0], bytes(frames[8 : 8 + size])
                    del frames[: 8 + size]
                    if stream == 1:
                        self._take(payload, line)
                    else:
                        self._stderr_tail += payload
                        del self._stderr_tail[:-4096]
        except OSError as exc:
            reason = f"the stream to the sandbox broke: {exc}"
        self._fail(reason)

    def _take(self, payload: bytes, line: bytearray) -> None:
        start = 0
        while self.gone is None:
            end = payload.find(b"\n", start)
            line += payload[start : len(payload) if end < 0 else end]
            if len(line) > self._line_cap:
                self._violation(f"a line longer than {self._line_cap} bytes")
                return
            if end < 0:
                return
            self._dispatch(bytes(line))
            line.clear()
            start = end + 1

    def _dispatch(self, line: bytes) -> None:
        mac, _, body = line.partition(b" ")
        if not hmac.compare_digest(mac, self._mac(b"A", body)):
            self._violation(f"a line without the session's MAC: {visible(repr(line[:120]))}")
            return
        try:
            message = json.loads(body)
        except ValueError:
            self._violation(f"a line that is not JSON: {visible(repr(line[:120]))}")
            return
        if not isinstance(message, dict):
            self._violation("a line that is not a JSON object")
            return
        if "hello" in message:
            if self._hello.is_set():
                self._violation("a second hello")
                return
            self.hello = message
            self._hello.set()
            return
        with self._lock:
            pending = self._pending
            if pending is None or message.get("id") != pending.id:
                unexpected = True
            else:
                unexpected = False
                self._pending = None
                self._line_cap = HELLO_LINE
        if unexpected:
            self._violation(f"an answer for no pending call (id {message.get('id')!r})")
            return
        assert pending is not None
        pending.response = message
        pending.done.set()


# --- the environment ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    """What the environment knows about a request once it is translated for the container."""

    argv: list[str]
    cwd: str
    summary: str
    compound: bool = False
    started: float = field(default_factory=time.monotonic)


class DockerEnvironment(Environment[CommandRequest, CommandResult]):
    """Runs `CommandRequest`s in warm, hardened containers of the `codecoder-sandbox` image.

    Nothing touches the engine until `start()` or the first `run()`: then the engine and image
    are checked (`SandboxUnavailable` says what to do when either is missing), containers left
    behind by dead runtimes are removed, and the container for the call's mode is started.
    `close()` removes every container of this environment. Safe to use from several threads;
    calls of one mode run one at a time.
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
    ) -> None:
        """`resolver` is what the egress proxy resolves host names with (the system's by
        default; tests point names anywhere without DNS)."""
        self.workspace = Path(workspace).resolve()
        self._resolver = resolver
        self.settings = settings or DockerSettings()
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self._client_factory = client_factory or _client_from_env
        self._client: Any = None
        self._lock = threading.Lock()
        self._mode_locks: dict[Mode, threading.Lock] = {
            "ro": threading.Lock(),
            "rw": threading.Lock(),
        }
        self._channels: dict[Mode, _AgentChannel] = {}
        self._generation = itertools.count(1)
        self._closed = False
        self._host = socket.gethostname()
        self._boot = _boot_id()
        self._pid = os.getpid()
        # Sync mode (environments.docker.sync): the workspace is a volume the host keeps in
        # step, which a remote engine needs. Its calls are serialized across both modes, so that
        # what one call brings back is never mistaken for what another changed.
        self.sync = self.settings.workspace == "sync" or (
            self.settings.workspace == "auto" and not engine_is_local()
        )
        self._volume: WorkspaceVolume | None = None
        self._sync_lock = threading.Lock()

    # -- public API --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def start(self) -> None:
        """Connect, check the image, remove dead runtimes' leftovers, warm the read-only container.

        Optional: `run()` does the same on first use.
        """
        with self._turn("ro"):
            self._channel("ro")

    def run(self, request: CommandRequest) -> CommandResult:
        mode: Mode = "rw" if request.writable else "ro"
        call = self._translate(request)
        with self._turn(mode):
            if self.sync:
                self._sync_in(mode)
            try:
                channel, response = self._exchange(mode, call, request)
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
            channel.used = True
            channel.state_grant = request.grant
            if request.snapshot is not None and "error" not in response:
                channel.snapshot_digest = request.snapshot.digest
            result = self._result(call, channel, request, response)
            if synced is not None:
                result.extra["synced"] = synced
            return result

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
                mine = {"label": f"{LABEL_SESSION}={self.session_id}"}
                for summary in client.api.containers(all=True, filters=mine):
                    self._remove(client, summary["Id"])
                for volume in client.api.volumes(filters=mine).get("Volumes") or []:
                    self._remove_volume(client, volume["Name"])
                client.close()
        except SandboxUnavailable as exc:
            log.warning("closing the @docker environment: %s", exc)

    def runtime_in_use(self) -> str:
        """The engine runtime this environment's containers run under (`check`, `audit`)."""
        if self.settings.runtime is not None:
            return self.settings.runtime
        client = self._ensure_started()
        with _engine_errors("ask the Docker engine for its default runtime"):
            return str(client.info().get("DefaultRuntime") or "runc")

    def engine_runtimes(self) -> list[str]:
        """The runtimes codecoder knows (runc, gVisor's runsc) that the engine offers."""
        client = self._ensure_started()
        with _engine_errors("ask the Docker engine for its runtimes"):
            offered = client.info().get("Runtimes") or {}
        return [runtime for runtime in KNOWN_RUNTIMES if runtime in offered]

    def cold_run(self, request: CommandRequest) -> CommandResult:
        """Run one request in a fresh container, like a hardened `docker run --rm`.

        The baseline the warm path is measured against; no output cap beyond the request's.
        """
        call = self._translate(request)
        client = self._ensure_started()
        mode: Mode = "rw" if request.writable else "ro"
        if self.sync:
            with self._sync_lock:
                self._sync_in(mode)
                if self._volume is not None and mode == "rw":
                    self._volume.generation += 1  # written behind the agent's back
        config, _ = self._container_config(mode, f"cold-{next(self._generation)}")
        config.update(
            entrypoint=call.argv,
            working_dir=call.cwd,
            user=self._command_user(),
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
                self._remove(client, container.id)
        return self._plain_result(call, int(status["StatusCode"]), stdout, stderr, request)

    def exec_run(self, request: CommandRequest) -> CommandResult:
        """Run one request through the engine's exec API in the warm container.

        The second baseline for the warm path; unlike `run()` it has no timeout (the exec API
        offers none), no OOM report and no cleanup of background processes.
        """
        call = self._translate(request)
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
                user=self._command_user(),
            )["Id"]
            stdout, stderr = client.api.exec_start(exec_id, demux=True)
            code = client.api.exec_inspect(exec_id)["ExitCode"]
        return self._plain_result(call, int(code or 0), stdout or b"", stderr or b"", request)

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
            message = self._message(call, request, channel, fresh=fresh)
            egress = channel.proxy.call(request.network) if channel.proxy else None
            try:
                with egress or contextlib.nullcontext():
                    response = channel.call(
                        message,
                        request.timeout + HOST_GRACE_SECONDS,
                        request.max_output,
                        cancel=request.cancel,
                    )
            except _AgentGone as gone:
                oom = self._container_oom_killed(channel)
                self._discard(channel)
                self._guard(channel, call)
                if oom:
                    raise self._out_of_memory(call) from None
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

    def _message(
        self, call: _Call, request: CommandRequest, channel: _AgentChannel, *, fresh: bool
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "argv": call.argv,
            "cwd": call.cwd,
            "env": dict(request.env or {}),
            "stdin": base64.b64encode(request.stdin).decode(),
            "timeout": request.timeout,
            "max_output": request.max_output,
            "fresh": fresh,
            "disk_budget": self.settings.disk_budget_bytes if request.writable else None,
            "capability": None,
            "sync": self.sync and request.writable,
            # Nothing went into the volume since this container listed it: the agent may take
            # that listing as the one before the call (a fork of the agent saved per call).
            "unchanged": self.sync
            and request.writable
            and self._volume is not None
            and channel.synced_generation == self._volume.generation,
        }
        snapshot = request.snapshot
        if snapshot is not None:
            known = channel.snapshot_digest == snapshot.digest
            channel.snapshot_digest = None  # until the agent has confirmed this one
            message["capability"] = {
                "digest": snapshot.digest,
                "files": None
                if known
                else {
                    path: base64.b64encode(data).decode() for path, data in snapshot.files.items()
                },
            }
        return message

    def _guard(self, channel: _AgentChannel, call: _Call) -> None:
        """After a writable call: quarantine what it planted, fail the call, replace the sandbox.

        Runs once no process of the call is left: the agent answers only then, and every other
        path here removed the container first.
        """
        scan = channel.scan
        if scan is None:
            return
        changes = scan.changes()
        if not changes:
            return
        self._discard(channel)
        why = (
            f"a writable @docker call (`{call.summary}`) {changes.describe()} in the "
            "workspace; sandboxed tools may never create or move protected paths"
        )
        moved = changes.appeared + changes.unreadable
        where = quarantine(self.workspace, moved, why) if moved else "nothing to move"
        raise ExecutionFailed(f"{why}. Quarantined: {where}; the sandbox was replaced")

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
                image = client.images.get(self.settings.image)
            self._check_image(image.labels or {})
            self._remove_leftovers(client)
        except BaseException:
            with contextlib.suppress(Exception):
                client.close()
            raise
        self._client = client
        return client

    def _check_image(self, labels: dict[str, str]) -> None:
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

    def _labels(self, mode: str) -> dict[str, str]:
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

    # -- sync mode ----------------------------------------------------------------------------

    def _ensure_volume(self) -> WorkspaceVolume:
        with self._lock:
            client = self._start_locked()
            if self._volume is None:
                uid, gid = (int(part) for part in self._command_user().split(":"))
                name = f"codecoder-{self.session_id}-v{next(self._generation)}"
                with _engine_errors("create the workspace volume"):
                    self._volume = WorkspaceVolume(
                        client,
                        self.workspace,
                        name,
                        self.settings.image,
                        self._labels("sync"),
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
        if changes.get("over_budget"):
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
            if channel.scan is None or not channel.scan.changes():
                return channel
            # A protected path appeared (or went) on the host since the container was made:
            # its mounts no longer cover what exists, so it runs nothing more.
            log.info("%s: protected paths changed on the host; replacing it", channel.name)
        with self._lock:
            client = self._start_locked()
            if channel is not None:
                self._discard_locked(channel)
        channel = self._create_channel(client, mode)
        with self._lock:
            if self._closed:
                self._discard_locked(channel)
                raise SandboxUnavailable("this @docker environment was closed")
            self._channels[mode] = channel
        return channel

    def _create_channel(self, client: Any, mode: Mode) -> _AgentChannel:
        name = f"{mode}-{next(self._generation)}"
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
            config, uid_gid = self._container_config(mode, name, scan, proxy)
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
            self._remove(client, container.id)
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

    def _container_config(
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
            mounts = self._ensure_volume().mounts(writable=mode == "rw")
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
        labels = self._labels(mode)
        tmpfs = {path: tmpfs_options for path in ("/tmp", *settings.extra_writable_paths)}
        # Root-owned and not writable by commands: where a capability's code is put to run.
        tmpfs[SNAPSHOT_MOUNT] = f"rw,nosuid,nodev,size={parse_size(SNAPSHOT_TMPFS)},mode=755"
        uid, gid = (int(part) for part in self._command_user().split(":"))
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

    def _command_user(self) -> str:
        if self.settings.user != "auto":
            uid, _, gid = self.settings.user.partition(":")
            return f"{uid}:{gid or uid}"
        info = self.workspace.stat()
        # Files the sandbox writes then belong to the workspace's owner; root never runs
        # commands (the agent is root), nor does group root.
        if info.st_uid == 0:
            return FALLBACK_USER
        return f"{info.st_uid}:{info.st_gid or info.st_uid}"

    def _check_workspace(self) -> None:
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

    @staticmethod
    def _remove_volume(client: Any, name: str) -> None:
        try:
            client.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # in use by a container another cleaner is removing
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
            volumes = client.api.volumes(filters={"label": f"{LABEL_RUNTIME}=1"})
            for volume in volumes.get("Volumes") or []:
                labels = volume.get("Labels") or {}
                if labels.get(LABEL_HOST) != self._host or _owner_alive(labels, self._boot):
                    continue
                self._remove_volume(client, volume["Name"])
                removed.append(volume["Name"])
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
        compound = request.script is not None
        if request.snapshot is not None:
            return _Call(argv, SNAPSHOT_MOUNT, _visible(summary), compound)
        cwd = Path(os.path.normpath(self.workspace / request.cwd))
        try:
            relative = cwd.relative_to(self.workspace)
        except ValueError:
            raise ExecutionFailed(
                f"working directory {request.cwd} is outside the workspace {self.workspace}, "
                "which is all the sandbox can see"
            ) from None
        inside = PurePosixPath(WORKSPACE_MOUNT, relative.as_posix())
        return _Call(argv, str(inside), _visible(summary), compound)

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
        if response.get("disk_budget_hit"):
            grew = response.get("disk_used")
            raise ExecutionFailed(
                f"`{call.summary}` wrote more than its disk budget of "
                f"{self.settings.disk_budget} to the workspace"
                + (f" (the workspace's filesystem grew by {grew:,} bytes)" if grew else "")
                + " and was stopped; what it wrote is still there. A project can raise "
                '"docker": {"disk_budget": ...} in codecoder.json'
            )
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
                "disk_used": response.get("disk_used"),
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
    """The text made visible (runtime.permissions.prompt.visible) and shortened for a message."""
    shown = visible(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
