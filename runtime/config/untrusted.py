"""What a project file nobody trusted is obeyed for, and what it widens.

A repository can arrive with a codecoder.json in it, so the project file is obeyed only for what
cannot widen access until the human trusts it (`runtime.config.trust`, `codecoder trust`). Every
top-level setting is classified in `SECTIONS`; a new one must be added there, and anything not
classified counts as a widening:

    narrows   deny rules; session_ttl when it is shorter than the layer below
    compared  limits, web max_bytes/timeout/max_redirects, agent max_turns/timeout and the
              numeric docker limits: obeyed when no larger than the layer below, else a widening
              read roots: inside the project, obeyed; outside, a widening
              docker runtime: `runsc` (gVisor) obeyed over runc or the engine's default, any
              other a widening; docker workspace (bind, sync): always obeyed
    widens    every grant; every environment binding; web allow_hosts, search_url,
              github_api_url and github_token_env (where queries and a token are sent); agent
              base_url, api_key_env and model; every other docker setting (image, network and
              its egress allowlist, user, read_only_rootfs, extra_writable_paths)

The layer below is the user's file over the defaults (`LayerBelow`): the user's file is the
human's own and is trusted. `untrusted_view` gives the file as obeyed and every widening it holds
(`Widening`); `runtime.config.project` reports each of an untrusted file's widenings (`untrusted`,
a warning, with line and column) and ignores them. Its grants written by the runtime at the
prompt are the exception (they were approved one by one, see `runtime.config.trust`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from codecoder.environments.docker.settings import DockerSettings
from codecoder.runtime.config.projectfile import AllowEntry, ProjectFile
from codecoder.runtime.config.settings import AgentSettings, ShellSettings, WebSettings
from codecoder.runtime.config.trust import TrustState
from codecoder.runtime.permissions.allowlist import NEVER

__all__ = ["SECTIONS", "LayerBelow", "Trust", "Widening", "untrusted_view"]


@dataclass(frozen=True, slots=True)
class Widening:
    """One thing a project file gives beyond what is obeyed from a file nobody trusted."""

    section: str
    key: str
    what: str  # in words, as `codecoder trust` shows it
    line: int | None = None
    column: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "section": self.section,
            "key": self.key,
            "what": self.what,
            "line": self.line,
            "column": self.column,
        }


@dataclass(frozen=True, slots=True)
class Trust:
    """How far the project file is obeyed: its state, digest and every widening it holds."""

    state: TrustState
    digest: str | None = None
    widenings: tuple[Widening, ...] = ()

    @property
    def obeyed(self) -> bool:
        """Whether the widenings apply."""
        return self.state is not TrustState.UNTRUSTED

    def to_json(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "digest": self.digest,
            "widenings": [w.to_json() for w in self.widenings],
        }


# How each top-level setting of codecoder.json is treated while the file is not trusted (see
# the module docstring). A setting missing here is a widening; a test checks the schema's.
SECTIONS: Final[dict[str, Literal["inert", "narrows", "compared", "widens"]]] = {
    "$schema": "inert",
    "allowlist": "widens",
    "deny": "narrows",
    "environments": "widens",
    "limits": "compared",
    "session_ttl": "compared",
    "web": "compared",
    "agent": "compared",
    "read_roots": "compared",
    "docker": "compared",
}
# docker settings where a smaller value is a tighter sandbox; for the others see
# `_docker_narrows`.
_DOCKER_LIMITS: Final = {
    "memory": "memory_bytes",
    "cpus": "cpus",
    "pids_limit": "pids_limit",
    "tmpfs_size": "tmpfs_bytes",
    "pool": "pool",  # warm sandboxes kept for new sessions: the user's machine's memory
}


def _docker_narrows(name: str, mine: DockerSettings, base: DockerSettings) -> bool:
    """Whether a docker setting of an untrusted file may be obeyed: it keeps the sandbox as it
    is, or tightens it.

    `runtime: "runsc"` tightens (gVisor puts its own kernel between the sandbox and the host's;
    at worst the engine has no such runtime and @docker refuses to start, which an untrusted
    file could already cause with a tiny memory limit); another runtime widens. `workspace`
    never widens: a volume kept in step holds what the bind mount shows, what comes back obeys
    the same protected paths and disk budget, and a bind mount is refused on a remote engine.
    Every other setting (image, network, user, writable root, extra writable paths) widens
    unless it equals the layer below.
    """
    if name == "workspace":
        return True
    if name == "runtime":
        return mine.runtime == base.runtime or (
            mine.runtime == "runsc" and base.runtime in (None, "runc")
        )
    return bool(getattr(mine, name) == getattr(base, name, object()))


@dataclass(frozen=True, slots=True)
class LayerBelow:
    """What the user's file (over the defaults) sets: what a project file is compared with."""

    timeout: float
    max_output: int
    session_ttl: float
    web: WebSettings
    agent: AgentSettings
    docker: DockerSettings

    @classmethod
    def of(cls, user: ProjectFile) -> LayerBelow:
        default = ShellSettings()
        try:
            docker = DockerSettings(**dict(user.docker))
        except ValueError:
            docker = DockerSettings()
        return cls(
            timeout=user.timeout if user.timeout is not None else default.timeout,
            max_output=user.max_output if user.max_output is not None else default.max_output,
            session_ttl=user.session_ttl if user.session_ttl is not None else NEVER,
            web=WebSettings.from_section(user.web),
            agent=AgentSettings.from_section(user.agent),
            docker=docker,
        )


def untrusted_view(
    pf: ProjectFile,
    root: Path,
    base: LayerBelow,
    approved: frozenset[tuple[str, str | None]],
) -> tuple[ProjectFile, list[Widening]]:
    """The file as obeyed while nobody trusts it, and every widening it holds."""
    found: list[Widening] = []

    def widen(section: str, key: str, what: str, pointer: str) -> None:
        found.append(Widening(section, key, what, *pf.position_of(pointer)))

    kept: list[AllowEntry] = []
    for entry in pf.allowlist:
        if entry.grants and (entry.pattern, entry.digest) not in approved:
            what = f"grants {entry.pattern} for the project"
            found.append(Widening("allowlist", entry.pattern, what, entry.line, entry.column))
        else:
            kept.append(entry)
    for binding in pf.bindings:
        what = f"runs {binding.tool} in {binding.environment}"
        found.append(Widening("environments", binding.tool, what, binding.line, binding.column))

    def at_most(name: str, value: Any, below: Any, pointer: str, what: str) -> Any:
        if value is None or value <= below:
            return value
        widen(pointer.strip("/").split("/")[0], pointer.strip("/").replace("/", "."), what, pointer)
        return None

    timeout = at_most(
        "timeout",
        pf.timeout,
        base.timeout,
        "/limits/timeout",
        f"raises the command timeout to {pf.timeout}s (from {base.timeout:g}s)",
    )
    max_output = at_most(
        "max_output",
        pf.max_output,
        base.max_output,
        "/limits/max_output",
        f"raises the output cap to {pf.max_output} bytes (from {base.max_output})",
    )
    session_ttl = pf.session_ttl
    if (
        session_ttl is not None
        and base.session_ttl != NEVER
        and (session_ttl == NEVER or session_ttl > base.session_ttl)
    ):
        widen("session_ttl", "session_ttl", "makes session grants last longer", "/session_ttl")
        session_ttl = None

    web = pf.web
    for i, host in enumerate(web.allow_hosts):
        widen(
            "web",
            f"web.allow_hosts[{i}]",
            f"lets the web tools (which never ask) reach {host}, even at a local address",
            f"/web/allow_hosts/{i}",
        )
    for name, what in (
        ("search_url", "sends web_search queries to {}"),
        ("github_api_url", "sends github_search queries (and the GitHub token) to {}"),
        ("github_token_env", "sends the environment variable ${} to the GitHub API as a token"),
    ):
        value = getattr(web, name)
        if value is not None:
            widen("web", f"web.{name}", what.format(value), f"/web/{name}")
    web = dataclasses.replace(
        web,
        allow_hosts=(),
        search_url=None,
        github_api_url=None,
        github_token_env=None,
        max_bytes=at_most(
            "max_bytes",
            web.max_bytes,
            base.web.max_bytes,
            "/web/max_bytes",
            f"lets the web tools read {web.max_bytes} bytes a response",
        ),
        timeout=at_most(
            "timeout",
            web.timeout,
            base.web.timeout,
            "/web/timeout",
            f"lets a web request take {web.timeout}s",
        ),
        max_redirects=at_most(
            "max_redirects",
            web.max_redirects,
            base.web.max_redirects,
            "/web/max_redirects",
            f"lets the web tools follow {web.max_redirects} redirects",
        ),
    )

    agent = pf.agent
    for name, what in (
        ("base_url", "has child agents send the conversation to {}"),
        ("api_key_env", "sends the environment variable ${} to the model's server as its key"),
        ("model", "chooses the model {} for child agents"),
    ):
        value = getattr(agent, name)
        if value is not None:
            widen("agent", f"agent.{name}", what.format(value), f"/agent/{name}")
    agent = dataclasses.replace(
        agent,
        base_url=None,
        api_key_env=None,
        model=None,
        max_turns=at_most(
            "max_turns",
            agent.max_turns,
            base.agent.max_turns,
            "/agent/max_turns",
            f"lets a child agent take {agent.max_turns} turns",
        ),
        timeout=at_most(
            "timeout",
            agent.timeout,
            base.agent.timeout,
            "/agent/timeout",
            f"lets a child agent run {agent.timeout}s",
        ),
    )

    read_roots = []
    project = root.resolve()
    for name, written in pf.read_roots:
        directory = (root / written).resolve()
        if directory == project or project in directory.parents:
            read_roots.append((name, written))
        else:
            widen(
                "read_roots",
                name,
                f"lets the read tools (which never ask) read {directory}",
                "/read_roots/" + name.replace("~", "~0"),
            )

    docker = []
    for name, value in pf.docker:
        attribute = _DOCKER_LIMITS.get(name)
        try:
            mine = DockerSettings(**{name: value})
        except ValueError:
            mine = None  # an impossible limit is reported when used; any other value widens
        if attribute is not None:
            if mine is None or getattr(mine, attribute) <= getattr(base.docker, attribute):
                docker.append((name, value))
                continue
        elif mine is not None and _docker_narrows(name, mine, base.docker):
            docker.append((name, value))
            continue
        widen(
            "docker", f"docker.{name}", f"sets the sandbox's {name} to {value!r}", f"/docker/{name}"
        )

    view = dataclasses.replace(
        pf,
        allowlist=tuple(kept),
        bindings=(),
        timeout=timeout,
        max_output=max_output,
        session_ttl=session_ttl,
        web=web,
        agent=agent,
        read_roots=tuple(read_roots),
        docker=tuple(docker),
    )
    return view, found
