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
              environment bindings: to a sandbox (an environment whose ceiling admits project
              grants: @docker, @wasm, @landlock, @bwrap), obeyed, since it contains the tool;
              to @shell, a widening (it moves the tool onto the host)
    widens    every grant; web allow_hosts, search_url, github_api_url and github_token_env
              (where queries and a token are sent); agent base_url, api_key_env and model;
              every other docker setting (image, network and its egress allowlist, user,
              read_only_rootfs, extra_writable_paths); every bwrap entry (home directories
              shown, environment variables passed)

Each widening says what it is (`Widening.setting`: section, name, value), which the trust
record keeps, so that an edit that widens nothing beyond what was trusted keeps the file trusted
(`runtime.config.trust.TrustRecord.covers`).

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

from codecoder.config.projectfile import AllowEntry, BwrapSection, ProjectFile
from codecoder.config.reading import load_user_file, user_file_path
from codecoder.config.settings import AgentSettings, ShellSettings, WebSettings
from codecoder.config.trust import Setting, TrustRecord, TrustState
from codecoder.environments.docker.settings import NO_NETWORK, DockerSettings
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.permissions.allowlist import NEVER

__all__ = ["SECTIONS", "LayerBelow", "Trust", "Widening", "covered_by_trust", "untrusted_view"]


@dataclass(frozen=True, slots=True)
class Widening:
    """One thing a project file gives beyond what is obeyed from a file nobody trusted.

    `value` is what the setting is (a grant's digest, a binding's environment, a limit, a
    host), so that `setting` names it whatever its place in the file; `never` says why it
    could never take effect even if trusted (a ceiling violation, a tool that does not exist),
    so the human sees that before trusting it."""

    section: str
    key: str
    what: str  # in words, as `codecoder trust` shows it
    line: int | None = None
    column: int | None = None
    value: Any = None
    never: str = ""

    @property
    def setting(self) -> Setting:
        """(section, name, value): a list item is named by its list (`web.allow_hosts`), not
        by its index, so that an entry added before it does not make it another setting."""
        return (self.section, self.key.split("[", 1)[0], self.value)

    def to_json(self) -> dict[str, object]:
        return {
            "section": self.section,
            "key": self.key,
            "what": self.what,
            "line": self.line,
            "column": self.column,
            "never": self.never or None,
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
    "bwrap": "widens",
    # Never obeyed from a project file, trusted or not: an error there
    # (`runtime.config.project._credentials`); only the user's own file routes credentials.
    "credentials": "inert",
}
# Where a docker limit's value is read as a number, to compare it with a trusted one.
_DOCKER_NUMBERS: Final = {"memory": "memory_bytes", "tmpfs_size": "tmpfs_bytes"}
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
    unless it equals the layer below; `network: "none"` (no network at all) tightens.
    """
    if name == "workspace":
        return True
    if name == "network":
        # "none" has no network at all: never more than any layer below gives.
        return mine.network in (base.network, NO_NETWORK)
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

    def widen(section: str, key: str, what: str, pointer: str, value: Any) -> None:
        found.append(Widening(section, key, what, *pf.position_of(pointer), value=value))

    kept: list[AllowEntry] = []
    for entry in pf.allowlist:
        if entry.grants and (entry.pattern, entry.digest) not in approved:
            what = f"grants {entry.pattern} for the project"
            found.append(
                Widening("allowlist", entry.pattern, what, entry.line, entry.column, entry.digest)
            )
        else:
            kept.append(entry)
    bindings = []
    for binding in pf.bindings:
        if _contains(binding.environment):
            bindings.append(binding)  # a sandbox narrows: obeyed, trusted or not
            continue
        what = f"runs {binding.tool} in {binding.environment}, on the host"
        found.append(
            Widening(
                "environments",
                binding.tool,
                what,
                binding.line,
                binding.column,
                binding.environment,
            )
        )

    def at_most(name: str, value: Any, below: Any, pointer: str, what: str) -> Any:
        if value is None or value <= below:
            return value
        section, key = pointer.strip("/").split("/")[0], pointer.strip("/").replace("/", ".")
        widen(section, key, what, pointer, value)
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
        widen(
            "session_ttl",
            "session_ttl",
            "makes session grants last longer",
            "/session_ttl",
            session_ttl,
        )
        session_ttl = None

    web = pf.web
    for i, host in enumerate(web.allow_hosts):
        widen(
            "web",
            f"web.allow_hosts[{i}]",
            f"lets the web tools (which never ask) reach {host}, even at a local address",
            f"/web/allow_hosts/{i}",
            host,
        )
    for name, what in (
        ("search_url", "sends web_search queries to {}"),
        ("github_api_url", "sends github_search queries (and the GitHub token) to {}"),
        ("github_token_env", "sends the environment variable ${} to the GitHub API as a token"),
    ):
        value = getattr(web, name)
        if value is not None:
            widen("web", f"web.{name}", what.format(value), f"/web/{name}", value)
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
            widen("agent", f"agent.{name}", what.format(value), f"/agent/{name}", value)
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
                str(directory),
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
        number = getattr(mine, _DOCKER_NUMBERS[name]) if mine and name in _DOCKER_NUMBERS else None
        widen(
            "docker",
            f"docker.{name}",
            f"sets the sandbox's {name} to {value!r}",
            f"/docker/{name}",
            number if number is not None else _plain(value),
        )

    for i, shown in enumerate(pf.bwrap.home):
        widen(
            "bwrap",
            f"bwrap.home[{i}]",
            f"shows {shown} (read-only) to commands in the @bwrap sandbox",
            f"/bwrap/home/{i}",
            shown,
        )
    for i, name in enumerate(pf.bwrap.env):
        widen(
            "bwrap",
            f"bwrap.env[{i}]",
            f"passes the environment variable {name} into the @bwrap sandbox, secret or not",
            f"/bwrap/env/{i}",
            name,
        )

    view = dataclasses.replace(
        pf,
        allowlist=tuple(kept),
        bindings=tuple(bindings),
        timeout=timeout,
        max_output=max_output,
        session_ttl=session_ttl,
        web=web,
        agent=agent,
        read_roots=tuple(read_roots),
        docker=tuple(docker),
        bwrap=BwrapSection(),
        credentials=(),  # never a project's: see runtime.config.project
    )
    return view, found


def _contains(environment: str) -> bool:
    """Whether a tool bound to `environment` is contained (a sandbox): its ceiling admits
    project grants. An unknown tag is not."""
    try:
        return EnvironmentTag(environment).allows(Scope.PROJECT)
    except ValueError:
        return False


def _plain(value: Any) -> Any:
    """A settings value as JSON holds it (tuples as lists, at any depth), for the record."""
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def covered_by_trust(root: Path, pf: ProjectFile, record: TrustRecord) -> bool:
    """Whether the human trusted every widening `pf` holds (by its settings, whatever its
    bytes): what `runtime.config.writing` asks before a write, so that a grant written to a
    file trusted by meaning keeps it trusted."""
    base = LayerBelow.of(load_user_file(user_file_path()))
    _, found = untrusted_view(pf, root, base, record.approved)
    return bool(found) and record.covers(w.setting for w in found)
