"""The engine seam: where sandboxes run, behind one small interface.

A contained command environment (`@docker` today) needs very little of the engine that runs its
sandboxes. It describes a sandbox once, as a `SandboxTemplate` (image, runtime, the agent as
entrypoint, the command user, mounts, tmpfs, limits), and asks the engine to

    create(template, name, labels)   make one and start it, its agent's stream attached
    claim(template)                  or take one a warm pool made from the same template
    put_archive / get_archive        copy a tar into it, or out of it
    inspect(id)                      whether it runs, was OOM-killed, under which runtime
    remove(id)                       remove it (and whatever it held)
    list(labels)                     find sandboxes by label (its own, and dead runtimes')

Everything else (the agent's protocol over the stream, the hardening of the template, the
checks of what is in force inside, the workspace's protected paths) is the environment's own
and is the same on every engine. `environments.docker.engine.DockerEngine` is the one engine
today; a Kubernetes engine is one more module implementing this class
(docs/environments/beyond-one-machine.md: a SandboxTemplate with a gVisor runtimeClass, a
SandboxWarmPool behind `claim`, the agent over the pod's attach stream).

Every engine must apply a template entirely and add nothing looser. Whatever the template says,
it also applies: no new privileges (`no-new-privileges`), every capability dropped except the
template's `capabilities`, an init process that reaps orphans as PID 1, a private IPC
namespace, and no log of the agent's stream. The agent checks the capabilities and no-new-privs
when it starts, and the environment checks the limits it reports: an engine that drops one is
refused, not trusted.
"""

from __future__ import annotations

import abc
import builtins
import hashlib
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal

__all__ = [
    "Greeted",
    "Sandbox",
    "SandboxEngine",
    "SandboxState",
    "SandboxSummary",
    "SandboxTemplate",
    "TemplateMount",
]


@dataclass(frozen=True, slots=True)
class TemplateMount:
    """One mount of a template: a host directory (`bind`), an engine volume (`volume`), which
    every engine mounts as it is (never filled with the image's content at its target), or
    `egress`: a private, empty directory made for each sandbox when it is created (its source
    is "" in the template, so that every sandbox of it matches one key), where the session that
    holds the sandbox binds its egress proxy's socket (`environments.egress`); the maker
    resolves it into a bind mount (`SandboxTemplate.resolved`) and keeps its path with the
    sandbox (`Sandbox.egress`).

    `identity` is the (st_dev, st_ino) of a bind mount's source when the template was made: a
    warm sandbox is handed out only for a template with the same identities, so a directory
    replaced by another of the same name (a workspace moved away and recreated) never shows the
    old one to a new session.
    """

    target: str
    source: str
    kind: Literal["bind", "volume", "egress"] = "bind"
    read_only: bool = True
    identity: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class SandboxTemplate:
    """What a sandbox is made from, on any engine (agent-sandbox's SandboxTemplate).

    `entrypoint` runs as `user` (the agent, root) with only `capabilities`; `command_user` is
    who the agent runs commands as (uid, gid), told to it on its stream. `tmpfs` maps a path to
    its mount options. `network` is "none" or an engine's network mode.
    """

    image: str
    entrypoint: tuple[str, ...]
    command_user: tuple[int, int]
    runtime: str | None = None
    user: str = "0:0"
    capabilities: tuple[str, ...] = ()
    working_dir: str = "/"
    environment: tuple[tuple[str, str], ...] = ()
    mounts: tuple[TemplateMount, ...] = ()
    tmpfs: tuple[tuple[str, str], ...] = ()
    memory_bytes: int = 1024**3
    cpus: float = 1.0
    pids_limit: int = 256
    shm_bytes: int = 64 * 1024**2
    network: str = "none"
    read_only_rootfs: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SandboxTemplate:
        """The template `to_json` wrote; `ValueError` for anything else."""
        if not isinstance(data, Mapping) or set(data) != set(cls.__dataclass_fields__):
            raise ValueError("not a sandbox template: its fields differ")
        try:
            runtime = data["runtime"]
            return cls(
                image=str(data["image"]),
                entrypoint=tuple(str(a) for a in data["entrypoint"]),
                command_user=_pair(data["command_user"]),
                runtime=None if runtime is None else str(runtime),
                user=str(data["user"]),
                capabilities=tuple(str(c) for c in data["capabilities"]),
                working_dir=str(data["working_dir"]),
                environment=tuple((str(k), str(v)) for k, v in data["environment"]),
                mounts=tuple(_mount(m) for m in data["mounts"]),
                tmpfs=tuple((str(k), str(v)) for k, v in data["tmpfs"]),
                memory_bytes=int(data["memory_bytes"]),
                cpus=float(data["cpus"]),
                pids_limit=int(data["pids_limit"]),
                shm_bytes=int(data["shm_bytes"]),
                network=str(data["network"]),
                read_only_rootfs=bool(data["read_only_rootfs"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a sandbox template: {exc!r}") from None

    @property
    def egress_target(self) -> str | None:
        """Where the sandbox's egress directory is mounted, or None when it has none."""
        return next((m.target for m in self.mounts if m.kind == "egress"), None)

    def resolved(self, egress: Path | None) -> SandboxTemplate:
        """The template with its egress mount a bind mount of `egress`, the directory made for
        this sandbox (`ValueError` when one is missing where the template needs it)."""
        if (self.egress_target is None) != (egress is None):
            raise ValueError("an egress directory goes with an egress mount, and only with one")
        mounts = tuple(
            TemplateMount(m.target, str(egress)) if m.kind == "egress" else m for m in self.mounts
        )
        return replace(self, mounts=mounts)

    @property
    def key(self) -> str:
        """A digest of the whole template: two templates with the same key make the same
        sandbox (what a warm pool matches a claim by)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _pair(value: Any) -> tuple[int, int]:
    first, second = value
    return int(first), int(second)


def _mount(data: Mapping[str, Any]) -> TemplateMount:
    kind = data["kind"]
    if kind not in ("bind", "volume", "egress"):
        raise ValueError(f"a mount of kind {kind!r}")
    identity = data["identity"]
    return TemplateMount(
        target=str(data["target"]),
        source=str(data["source"]),
        kind=kind,
        read_only=bool(data["read_only"]),
        identity=None if identity is None else _pair(identity),
    )


@dataclass(frozen=True, slots=True)
class Greeted:
    """What a warm pool that greeted the agent before the claim hands over with the sandbox:
    the session key it sent (with the template's command user), the agent's hello, and the
    engine runtime under which it checked the limits in force."""

    key: bytes
    hello: Mapping[str, Any]
    runtime: str


@dataclass(slots=True)
class Sandbox:
    """One sandbox, made or claimed: its engine id, name, and the stream to its agent.

    `stream` carries the agent's stdin and its multiplexed stdout/stderr (frames with an 8-byte
    header: stream id, three zero bytes, big-endian length). `keep` holds whatever the engine's
    client needs kept alive with the stream. `greeted` is set when it came from a pool that
    already exchanged the set-up and the hello with its agent. `egress` is the directory made
    for it where its template has an egress mount: the holder's proxy binds its socket there.
    """

    id: str
    name: str
    stream: socket.socket
    keep: Any = None
    greeted: Greeted | None = None
    egress: Path | None = None


@dataclass(frozen=True, slots=True)
class SandboxSummary:
    """A sandbox as `list` finds it."""

    id: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    running: bool = True


@dataclass(frozen=True, slots=True)
class SandboxState:
    """A sandbox as `inspect` finds it. `pid` is its first process on the engine's host
    (0 where that host is not this machine)."""

    running: bool
    oom_killed: bool
    runtime: str
    pid: int = 0
    image: str = ""  # the id of the image it was made from ("" when the engine does not say)


class SandboxEngine(abc.ABC):
    """Where sandboxes run. Engine errors never leave a method as the client library's: each is
    raised as `SandboxUnavailable`, saying what to do (`foundation.errors`)."""

    name: str = "engine"

    @abc.abstractmethod
    def create(self, template: SandboxTemplate, name: str, labels: Mapping[str, str]) -> Sandbox:
        """Create a sandbox from `template`, attach the agent's stream (before anything can be
        written to it) and start it. The caller greets the agent."""

    def claim(self, template: SandboxTemplate) -> Sandbox | None:
        """A sandbox a warm pool made from `template`, now the caller's alone; None when the
        engine keeps no pool for it (the caller then creates one). Never raises: a pool that
        cannot answer is a miss."""
        return None

    @abc.abstractmethod
    def put_archive(self, sandbox_id: str, path: str, data: IO[bytes]) -> None:
        """Extract a tar archive at `path` inside the sandbox."""

    @abc.abstractmethod
    def get_archive(self, sandbox_id: str, path: str) -> Iterator[bytes]:
        """A tar archive of `path` inside the sandbox, in chunks."""

    @abc.abstractmethod
    def inspect(self, sandbox_id: str) -> SandboxState:
        """Whether the sandbox runs, whether its memory limit killed something, its runtime."""

    def image_id(self, image: str) -> str | None:
        """The id of the image `image` names now (a tag is moved by a rebuild); None when the
        engine cannot say, and a warm pool then hands nothing out (it could be of an older
        image)."""
        return None

    @abc.abstractmethod
    def remove(self, sandbox_id: str) -> None:
        """Stop and remove the sandbox; one that is already gone is not an error."""

    @abc.abstractmethod
    def list(self, labels: Mapping[str, str]) -> builtins.list[SandboxSummary]:
        """Every sandbox (running or not) carrying all of `labels`."""

    def close(self) -> None:  # noqa: B027 (optional: an engine may hold no connection)
        """Release the connection to the engine (the sandboxes stay)."""
