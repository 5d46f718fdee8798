"""The Docker engine: where it is, whether it runs on this machine, how it is reached (a Unix
socket, SSH, or TCP with or without TLS), its client, and `DockerEngine`, the engine seam
(`environments.engineseam`) over the Docker SDK.

The client is the docker SDK's, configured as the docker CLI is (DOCKER_HOST, DOCKER_TLS_VERIFY,
DOCKER_CERT_PATH), with one difference: an engine reached with TLS is verified with the CA in
DOCKER_CERT_PATH even where REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE names another bundle, which the
SDK's HTTP library would otherwise prefer (and no engine certificate would then verify).

`DockerEngine` turns a `SandboxTemplate` into a container with every protection the seam asks of
an engine (`container_config`), creates it with the agent's stream attached before it starts,
and inspects, lists and removes containers by label. Its `claim` asks the warm pool
(`environments.docker.pool`) when one is given. Sync mode's workspace volumes
(`environments.docker.sync`) are this engine's own: they use `client` directly.

Every docker SDK, requests and socket exception is mapped where it happens (`_engine_errors`):
callers see `SandboxUnavailable`, with what to do about it.
"""

from __future__ import annotations

import builtins
import contextlib
import ipaddress
import os
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Final, Literal, Protocol

import docker
import docker.constants
import docker.errors
import docker.utils
import requests.exceptions
from docker.types import LogConfig, Mount

from codecoder.environments.engineseam import (
    Sandbox,
    SandboxEngine,
    SandboxState,
    SandboxSummary,
    SandboxTemplate,
)
from codecoder.foundation.errors import SandboxUnavailable

__all__ = [
    "ENGINE_TIMEOUT_SECONDS",
    "SETUP_HINT",
    "DockerEngine",
    "EngineTransport",
    "WarmPoolClaims",
    "engine_is_local",
    "transport",
]

ENGINE_TIMEOUT_SECONDS: Final = 60

SETUP_HINT: Final = (
    "run scripts/docker-setup.sh as root (it installs docker.io, starts dockerd and builds "
    "the codecoder-sandbox image)"
)


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


@dataclass(frozen=True, slots=True)
class EngineTransport:
    """How the engine at DOCKER_HOST is reached, as `codecoder check` reports it.

    `tls` is "verified" (TLS, the engine's certificate checked against `ca`), "unverified" (TLS,
    any certificate accepted), "off" (plain TCP: whoever is on the way reads the workspace and
    drives the engine) or "none" (a Unix socket or SSH, which need no TLS)."""

    address: str
    local: bool
    tls: Literal["verified", "unverified", "off", "none"]
    ca: str | None = None
    client_certificate: str | None = None

    @property
    def risk(self) -> str | None:
        """Why reaching this engine this way exposes the workspace, or None."""
        if self.tls == "off":
            return (
                f"the engine at {self.address} is reached over TCP without TLS: whoever is on "
                "the way reads the workspace and drives the engine; set DOCKER_TLS_VERIFY=1 and "
                "DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem)"
            )
        if self.tls == "unverified":
            return (
                f"the engine at {self.address} is reached with TLS but its certificate is not "
                "verified (DOCKER_TLS_VERIFY is not set): another machine could pose as it"
            )
        return None

    def describe(self) -> str:
        where = "this machine" if self.local else "another machine"
        if self.tls == "none":
            how = "ssh" if self.address.startswith("ssh://") else "socket"
        elif self.tls == "verified":
            how = "TLS verified" + (", client certificate" if self.client_certificate else "")
        else:
            how = f"TLS {self.tls}"
        return f"{self.address} ({where}, {how})"

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "local": self.local,
            "tls": self.tls,
            "ca": self.ca,
            "client_certificate": self.client_certificate,
        }


def transport(environ: dict[str, str] | None = None) -> EngineTransport:
    """How the engine is reached, as the docker SDK (and CLI) read DOCKER_HOST,
    DOCKER_TLS_VERIFY and DOCKER_CERT_PATH."""
    env = os.environ if environ is None else environ
    address = env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    local = engine_is_local(address)
    scheme = urllib.parse.urlsplit(address).scheme
    if scheme not in ("tcp", "http", "https"):
        return EngineTransport(address, local, "none")
    verify = env.get("DOCKER_TLS_VERIFY")
    verified = verify is not None and verify != ""
    cert_path = env.get("DOCKER_CERT_PATH") or None
    if not (cert_path or verified) and scheme != "https":
        return EngineTransport(address, local, "off")
    folder = cert_path or os.path.join(os.path.expanduser("~"), ".docker")
    certificate = os.path.join(folder, "cert.pem")
    return EngineTransport(
        address,
        local,
        "verified" if verified else "unverified",
        ca=os.path.join(folder, "ca.pem") if verified else None,
        client_certificate=certificate if os.path.exists(certificate) else None,
    )


class _EngineAPI(docker.APIClient):  # type: ignore[misc]  # the SDK is untyped
    """The SDK's client, verifying a TLS engine as DOCKER_TLS_VERIFY and DOCKER_CERT_PATH say,
    whatever CA bundle the environment names (see the module docstring)."""

    def __init__(self, *, tls_configured: bool, **settings: Any) -> None:
        self.tls_configured = tls_configured  # set first: the SDK's __init__ asks the version
        super().__init__(**settings)

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if self.tls_configured:  # `verify` is the engine's ca.pem, or False (not verified)
            settings["verify"] = self.verify
        return settings


def _client_from_env(max_pool_size: int = docker.constants.DEFAULT_MAX_POOL_SIZE) -> Any:
    """A client for the engine at DOCKER_HOST, as `docker.from_env` makes it."""
    settings = docker.utils.kwargs_from_env()
    client = docker.DockerClient.__new__(docker.DockerClient)  # what its __init__ does, with
    client.api = _EngineAPI(  # this client instead of the SDK's
        tls_configured=settings.get("tls") is not None,
        timeout=ENGINE_TIMEOUT_SECONDS,
        max_pool_size=max_pool_size,
        **settings,
    )
    return client


# The SDK keeps this many connections to the engine per pool; sessions that start sandboxes at
# once (one server, many sessions) would otherwise open and drop extra ones.
MAX_POOL_SIZE: Final = 32


def _client_with_pool() -> Any:
    return _client_from_env(max_pool_size=MAX_POOL_SIZE)


class WarmPoolClaims(Protocol):
    """The warm pool as its claimers see it (`environments.docker.pool.client.PoolClient`)."""

    def claim(self, template: SandboxTemplate) -> Sandbox | None: ...
    def release(self, sandbox_id: str) -> bool: ...


class DockerEngine(SandboxEngine):
    """Sandboxes as containers of a Docker engine (DOCKER_HOST, or the local socket).

    Connects on first use (`client`), so that a claim from the warm pool, which needs no engine
    call at all, costs none. Safe to share between threads and environments: one engine per
    runtime serves all its sessions.
    """

    name = "docker"

    def __init__(
        self,
        client_factory: Callable[[], Any] | None = None,
        *,
        pool: WarmPoolClaims | None = None,
    ) -> None:
        self._factory = client_factory or _client_with_pool
        self._client: Any = None
        self._lock = threading.Lock()
        self._closed = False
        self.pool = pool
        self._claimed: set[str] = set()

    @property
    def client(self) -> Any:
        """The SDK's client, connected (and the engine pinged) on first use."""
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("this Docker engine connection was closed")
            if self._client is None:
                with _engine_errors("connect to the Docker engine"):
                    client = self._factory()
                    try:
                        client.ping()
                    except BaseException:
                        with contextlib.suppress(Exception):
                            client.close()
                        raise
                self._client = client
            return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None

    def image_labels(self, image: str) -> dict[str, str]:
        """The labels of `image`; `SandboxUnavailable` (saying how to build it) when missing."""
        client = self.client
        with _engine_errors(f"find the sandbox image {image!r}"):
            return dict(client.images.get(image).labels or {})

    def info(self) -> dict[str, Any]:
        """The engine's `docker info` (runtimes, default runtime, memory)."""
        client = self.client
        with _engine_errors("ask the Docker engine about itself"):
            return dict(client.info())

    # -- the seam ----------------------------------------------------------------------------

    def container_config(
        self, template: SandboxTemplate, name: str, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        """The `containers.create` arguments of a template: all of it, and the protections the
        seam requires of every engine."""
        if template.egress_target is not None:
            # Its maker resolves it (`SandboxTemplate.resolved`): a directory of its own.
            raise SandboxUnavailable("a sandbox template's egress directory was never made")
        config: dict[str, Any] = {
            "image": template.image,
            # The entrypoint, not the command: an image's own ENTRYPOINT never wraps the agent.
            "entrypoint": list(template.entrypoint),
            "name": name,
            "labels": dict(labels),
            "user": template.user,
            "working_dir": template.working_dir,
            "environment": dict(template.environment),
            # With detach=False the SDK also sets StdinOnce: the agent's stdin closes when the
            # last holder of the attached stream lets go, so the agent of a runtime that died
            # (or of a pool that died before handing it out) exits on its own.
            "stdin_open": True,
            "detach": False,
            "tty": False,
            "init": True,
            "network_mode": template.network,
            "read_only": template.read_only_rootfs,
            "cap_drop": ["ALL"],
            "cap_add": list(template.capabilities),
            "security_opt": ["no-new-privileges:true"],
            "pids_limit": template.pids_limit,
            "mem_limit": template.memory_bytes,
            "memswap_limit": template.memory_bytes,
            "nano_cpus": int(template.cpus * 1e9),
            "ipc_mode": "private",
            "shm_size": template.shm_bytes,
            "tmpfs": dict(template.tmpfs),
            # A volume is mounted as it is: an empty one is never filled with what the image
            # holds at its target (Docker's copy-up would give sync mode's workspace the image's
            # root-owned /workspace, which commands could not write and would come back).
            "mounts": [
                Mount(
                    m.target,
                    m.source,
                    type=m.kind,
                    read_only=m.read_only,
                    no_copy=m.kind == "volume",
                )
                for m in template.mounts
            ],
            # The agent's answers travel on stdout; a log driver would copy every command's
            # output to the host's disk for nothing.
            "log_config": LogConfig(type=LogConfig.types.NONE),
        }
        if template.runtime is not None:
            config["runtime"] = template.runtime
        return config

    def create(self, template: SandboxTemplate, name: str, labels: Mapping[str, str]) -> Sandbox:
        client = self.client
        config = self.container_config(template, name, labels)
        with _engine_errors("create the sandbox container"):
            container = client.containers.create(**config)
        try:
            # Attach before start, so nothing the agent writes can be missed (and nothing is
            # read ahead into the SDK's HTTP buffer, which would hide it from the raw socket).
            with _engine_errors("attach to the sandbox container"):
                attached = client.api.attach_socket(
                    container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
            stream = getattr(attached, "_sock", attached)
            try:
                with _engine_errors("start the sandbox container"):
                    container.start()
            except BaseException:
                with contextlib.suppress(OSError):
                    stream.close()
                raise
        except BaseException:
            self.remove(container.id)
            raise
        return Sandbox(container.id, name, stream, keep=attached)

    def claim(self, template: SandboxTemplate) -> Sandbox | None:
        if self.pool is None:
            return None
        sandbox = self.pool.claim(template)
        if sandbox is not None:
            with self._lock:
                self._claimed.add(sandbox.id)
        return sandbox

    def put_archive(self, sandbox_id: str, path: str, data: IO[bytes]) -> None:
        client = self.client
        with _engine_errors("copy an archive into the sandbox"):
            client.api.put_archive(sandbox_id, path, data)

    def get_archive(self, sandbox_id: str, path: str) -> Iterator[bytes]:
        client = self.client
        with _engine_errors("copy an archive out of the sandbox"):
            stream, _ = client.api.get_archive(sandbox_id, path)
        return iter(stream)

    def inspect(self, sandbox_id: str) -> SandboxState:
        client = self.client
        with _engine_errors("inspect the sandbox container"):
            attrs = client.api.inspect_container(sandbox_id)
        state = attrs.get("State") or {}
        return SandboxState(
            running=bool(state.get("Running")),
            oom_killed=bool(state.get("OOMKilled")),
            runtime=(attrs.get("HostConfig") or {}).get("Runtime") or "runc",
            pid=int(state.get("Pid") or 0),
            image=str(attrs.get("Image") or ""),
        )

    def image_id(self, image: str) -> str | None:
        try:
            found = self.client.api.inspect_image(image)
        except Exception:  # gone, unreachable: either way nothing is vouched for
            return None
        return str(found.get("Id") or "") or None

    def remove(self, sandbox_id: str) -> None:
        with self._lock:
            claimed = sandbox_id in self._claimed
            self._claimed.discard(sandbox_id)
        # A claimed sandbox goes back to the pool's server, which removes it: no engine
        # connection is needed to end a session that only ever claimed.
        if claimed and self.pool is not None and self.pool.release(sandbox_id):
            return
        client = self.client
        with _engine_errors("remove a sandbox container"):
            _remove_container(client, sandbox_id)

    def list(self, labels: Mapping[str, str]) -> builtins.list[SandboxSummary]:
        client = self.client
        with _engine_errors("list sandbox containers"):
            found = client.api.containers(all=True, filters={"label": _label_filter(labels)})
        return [
            SandboxSummary(
                id=summary["Id"],
                name=(summary.get("Names") or [summary["Id"]])[0].lstrip("/"),
                labels=summary.get("Labels") or {},
                running=summary.get("State", "running") == "running",
            )
            for summary in found
        ]

    def volumes(self, labels: Mapping[str, str]) -> builtins.list[tuple[str, dict[str, str]]]:
        """The volumes (sync mode's) carrying all of `labels`: (name, labels)."""
        client = self.client
        with _engine_errors("list sandbox volumes"):
            found = client.api.volumes(filters={"label": _label_filter(labels)})
        return [(v["Name"], v.get("Labels") or {}) for v in found.get("Volumes") or []]

    def remove_volume(self, name: str) -> None:
        client = self.client
        with _engine_errors("remove a sandbox volume"):
            try:
                client.api.remove_volume(name, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # in use by a container another cleaner removes
                    raise

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def _label_filter(labels: Mapping[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in labels.items()]


def _remove_container(client: Any, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass  # already gone
    except docker.errors.APIError as exc:
        # 409: another cleaner is removing it already.
        if exc.status_code != 409:
            raise
