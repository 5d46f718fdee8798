"""Sandbox images: making one from any image, and saying whether an engine can run the sandbox.

`codecoder image build --from IMAGE [--tag T]` turns any image (node:20, rust:1, golang, an
Alpine or a `FROM scratch` busybox one) into a sandbox image, with this Dockerfile (printed by
`codecoder image dockerfile --from IMAGE`, to build it by hand or in a pipeline):

    FROM IMAGE
    COPY --from=codecoder-sandbox /opt/codecoder /opt/codecoder
    USER 0:0
    RUN ["/opt/codecoder/python/ld.so", ..., "/opt/codecoder/install.py"]
    LABEL codecoder.agent="5" codecoder.base="IMAGE"
    ...

The agent, its static runas helper and the interpreter the agent runs on (with its own loader
and C library: sandboxes/image/bundle.py) come from the default image, `codecoder-sandbox`, so
they are the ones this runtime speaks to; `install.py` adds the user and /workspace and checks
that the agent can run there, without needing anything of the image (no shell, no python3, no
useradd). The image's own programs, PATH and environment are what commands get. Nothing is
pulled: IMAGE must be on the engine already (`docker pull` it first where a registry is
reachable). An image without bash runs simple commands; compound ones are refused (they are keyed
as bash parses them).

`sandbox_status(settings)` is what `codecoder check` reports: whether an engine answers, whether
the configured image exists and carries the agent's label, which engine runtime the sandbox runs
under and whether the engine has it, and how the workspace reaches it.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT
from codecoder.environments.docker.containers import AGENT_COMMAND
from codecoder.environments.docker.engine import (
    SETUP_HINT,
    EngineTransport,
    _client_from_env,
    _engine_address,
    _engine_errors,
    _explain,
    engine_is_local,
    transport,
)
from codecoder.environments.docker.settings import (
    ASK,
    DEFAULT_IMAGE,
    NO_NETWORK,
    REMOTE_NO_NETWORK,
    DockerSettings,
)
from codecoder.environments.docker.workspacemode import workspace_mode
from codecoder.foundation.errors import SandboxUnavailable

__all__ = ["BuiltImage", "SandboxStatus", "build_sandbox_image", "dockerfile", "sandbox_status"]

LABEL_BASE: Final = "codecoder.base"
INSTALL: Final = [*AGENT_COMMAND[:-1], "/opt/codecoder/install.py"]


def dockerfile(base: str, agent_image: str = DEFAULT_IMAGE) -> str:
    """The Dockerfile that makes `base` a sandbox image, taking the agent from `agent_image`."""
    _check_reference(base)
    return "\n".join(
        [
            f"FROM {base}",
            f"COPY --from={agent_image} /opt/codecoder /opt/codecoder",
            "USER 0:0",
            f"RUN {json.dumps(INSTALL)}",
            "WORKDIR /workspace",
            "USER 10001:10001",
            f"LABEL {LABEL_AGENT}={json.dumps(str(AGENT_PROTOCOL))} "
            f"{LABEL_BASE}={json.dumps(base)}",
            # The runtime sets the entrypoint itself; these keep a plain `docker run` sane.
            "ENTRYPOINT []",
            f"CMD {json.dumps(list(AGENT_COMMAND))}",
            "",
        ]
    )


def default_tag(base: str) -> str:
    """`node:20` -> `codecoder-sandbox-node:20`; `registry:5000/go` -> `codecoder-sandbox-go`."""
    name, _, tag = base.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")
    return f"{DEFAULT_IMAGE}-{name}" + (f":{tag}" if tag else "")


@dataclass(frozen=True, slots=True)
class BuiltImage:
    tag: str
    id: str
    base: str
    log: tuple[str, ...]

    @property
    def ready(self) -> str:
        """What install.py said of the image: its user, whether compound commands run (bash),
        git. Empty when the build log does not have it."""
        said = [line.strip() for line in self.log if _READY in line]
        return said[-1] if said else ""

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "id": self.id, "base": self.base, "ready": self.ready}


def build_sandbox_image(
    base: str, tag: str | None = None, *, client: Any = None, agent_image: str = DEFAULT_IMAGE
) -> BuiltImage:
    """Build `dockerfile(base)` on the engine (DOCKER_HOST) as `tag`; SandboxUnavailable saying
    what is missing (the engine, `base`, the default image) or which build step failed."""
    own = client is None
    if client is None:
        with _engine_errors("connect to the Docker engine"):
            client = _client_from_env()
            client.ping()
    try:
        return _build(client, base, tag or default_tag(base), agent_image)
    finally:
        if own:
            client.close()


def _build(client: Any, base: str, tag: str, agent_image: str) -> BuiltImage:
    import docker.errors

    try:
        agent = client.images.get(agent_image)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"the agent comes from the image {agent_image!r}, which this engine does not have: "
            f"{SETUP_HINT}"
        ) from None
    except docker.errors.DockerException as exc:
        raise SandboxUnavailable(f"cannot look for {agent_image!r}: {_explain(exc)}") from exc
    found = (agent.labels or {}).get(LABEL_AGENT)
    if found != str(AGENT_PROTOCOL):
        raise SandboxUnavailable(
            f"{agent_image!r} has an agent speaking protocol {found}, this runtime speaks "
            f"{AGENT_PROTOCOL}: rebuild it first ({SETUP_HINT})"
        )
    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"the engine has no image {base!r}; nothing is pulled: `docker pull {base}` (or "
            "build it) first"
        ) from None
    except docker.errors.DockerException as exc:
        raise SandboxUnavailable(f"cannot look for {base!r}: {_explain(exc)}") from exc
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = dockerfile(base, agent_image).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    log: list[str] = []
    image_id = ""
    with _engine_errors(f"build {tag} from {base}"):
        for chunk in client.api.build(
            fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, decode=True
        ):
            if "stream" in chunk:
                log.extend(line for line in chunk["stream"].splitlines() if line.strip())
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                said = [line for line in log if "codecoder image:" in line]
                raise SandboxUnavailable(
                    f"building {tag} from {base} failed: "
                    + (said[-1] if said else str(chunk["error"]).strip())
                )
        if not image_id:
            image_id = client.images.get(tag).id
        if not any(_READY in line for line in log):  # every step came from the build cache
            log.extend(_ready_in(client, image_id))
    return BuiltImage(tag, image_id, base, tuple(log))


_READY = "codecoder image: agent ready"
_READY_FILE = "/etc/codecoder-image"  # install.py keeps its ready line there


def _ready_in(client: Any, image_id: str) -> list[str]:
    """The ready line install.py kept in the image, read from a container that is created and
    never started; none when the image has no such file."""
    import docker.errors

    container = client.containers.create(image_id, network_disabled=True)
    try:
        stream, _ = container.get_archive(_READY_FILE)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            file = tar.extractfile(member) if member is not None else None
            text = file.read(4096).decode("utf-8", "replace") if file is not None else ""
        return [line for line in text.splitlines() if _READY in line]
    except docker.errors.NotFound:
        return []
    finally:
        container.remove(force=True)


_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


def _check_reference(base: str) -> None:
    if not _REFERENCE.fullmatch(base) or "\n" in base:
        raise ValueError(f"{base!r} is not an image reference")


# --- what `codecoder check` reports ----------------------------------------------------------


@dataclass(slots=True)
class SandboxStatus:
    """The @docker sandbox as the engine would give it. `problems` are what would stop it;
    `warnings` what exposes the workspace without stopping it (an engine reached over TCP
    without TLS, or without verifying its certificate)."""

    engine: str
    image: str
    agent: str | None = None  # the image's agent protocol, None when missing or not found
    runtime: str = "runc"
    runtimes: tuple[str, ...] = ()
    workspace: str = "bind"
    network: str | dict[str, list[str]] = "none"
    problems: list[str] = field(default_factory=list)
    reachable: bool = False
    transport: EngineTransport | None = None
    warnings: list[str] = field(default_factory=list)
    workspace_reason: str | None = None  # why sync, when not the plain default
    network_reason: str | None = None  # why no network, where the default would give one

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "transport": self.transport.to_json() if self.transport else None,
            "reachable": self.reachable,
            "image": self.image,
            "agent": self.agent,
            "runtime": self.runtime,
            "engine_runtimes": list(self.runtimes),
            "workspace": self.workspace,
            "workspace_reason": self.workspace_reason,
            "network": self.network,
            "network_reason": self.network_reason,
            "problems": self.problems,
            "warnings": self.warnings,
        }

    def describe(self) -> str:
        if not self.reachable:
            return f"@docker: {self.problems[0]}"
        if isinstance(self.network, dict):
            network = "egress proxy to " + ", ".join(self.network["allow"])
        elif self.network == ASK:
            network = "egress proxy, each host asked (writable calls)"
        else:
            network = self.network
        kernel = " (gVisor)" if self.runtime == "runsc" else ""
        engine = self.transport.describe() if self.transport else self.engine
        return (
            f"@docker: engine {engine}, image {self.image} (agent {self.agent or 'missing'}), "
            f"runtime {self.runtime}{kernel}, workspace {self.workspace}"
            + (f" ({self.workspace_reason})" if self.workspace_reason else "")
            + f", network {network}"
            + (f" ({self.network_reason})" if self.network_reason else "")
        )


def sandbox_status(
    settings: DockerSettings, *, client: Any = None, workspace: Path | None = None
) -> SandboxStatus:
    """What the engine at DOCKER_HOST would run the sandbox with (on `workspace`, when given),
    and what stops it."""
    import docker.errors

    mode = workspace_mode(settings, workspace)
    egress = settings.egress
    status = SandboxStatus(
        engine=_engine_address(),
        image=settings.image,
        workspace=mode.mode,
        workspace_reason=mode.reason,
        network=egress.to_json() if egress is not None else str(settings.network),
        transport=transport(),
    )
    if mode.warning is not None:
        status.warnings.append(mode.warning)
    if status.transport is not None and status.transport.risk:
        status.warnings.append(status.transport.risk)
    own = client is None
    try:
        if client is None:
            client = _client_from_env()
        info = client.info()
    except Exception as exc:  # whatever the SDK or its transport raise: no engine here
        status.problems.append(f"no Docker engine answers at {status.engine} ({_explain(exc)})")
        return status
    try:
        status.reachable = True
        offered = tuple(sorted((info.get("Runtimes") or {}).keys()))
        status.runtimes = offered
        status.runtime = settings.runtime or str(info.get("DefaultRuntime") or "runc")
        if status.runtime not in offered:
            status.problems.append(
                f"the engine has no runtime {status.runtime!r} (it has {', '.join(offered)}); "
                "scripts/docker-setup.sh registers runsc"
            )
        try:
            image = client.images.get(settings.image)
        except docker.errors.ImageNotFound:
            status.problems.append(
                f"the engine has no image {settings.image!r}: "
                + (
                    SETUP_HINT
                    if settings.image == DEFAULT_IMAGE
                    else "make it with `codecoder image build --from <base> --tag "
                    f"{settings.image}`"
                )
            )
        else:
            status.agent = (image.labels or {}).get(LABEL_AGENT)
            if status.agent is None:
                status.problems.append(
                    f"image {settings.image!r} is not a sandbox image (no {LABEL_AGENT} label): "
                    f"`codecoder image build --from {settings.image}` makes one from it"
                )
            elif status.agent != str(AGENT_PROTOCOL):
                status.problems.append(
                    f"image {settings.image!r} has an agent speaking protocol {status.agent}, "
                    f"this runtime speaks {AGENT_PROTOCOL}: rebuild it"
                )
        if not engine_is_local() and settings.workspace == "bind":
            status.problems.append(
                "the engine is on another machine, which cannot bind-mount this workspace: "
                'use "docker": {"workspace": "sync"} (or "auto")'
            )
        if not engine_is_local() and egress is not None:
            status.problems.append(
                "the egress allowlist needs a local engine: its proxy runs on this machine and "
                "reaches the sandbox through a Unix socket mounted into it"
            )
        if not engine_is_local() and settings.asks_hosts:
            status.network, status.network_reason = NO_NETWORK, REMOTE_NO_NETWORK
    except docker.errors.DockerException as exc:
        status.problems.append(f"the Docker engine answered {_explain(exc)}")
    finally:
        if own:
            client.close()
    return status
