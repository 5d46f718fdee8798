"""A project's configuration as the runtime uses it: the user's file and codecoder.json, layered,
checked against the tools, and obeyed as far as the human trusts them.

`runtime.config.projectfile` knows the files (syntax, schema, positions, writes); this module knows
what the entries mean: which tool each names, which environment that tool is bound to, and whether
that environment's ceiling admits a project grant. Problems become diagnostics with the line and
column of the entry (and the file, when it is the user's); nothing is dropped silently.

Layers. The user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`: personal deny rules, read
roots, a web policy, defaults) lies under the project's codecoder.json:

    deny, read_roots, web.allow_hosts, web.deny_hosts     both files' entries count
    environments                                          per tool, the project's wins
    limits, session_ttl, docker, web and agent settings   per setting, the project's wins
    allowlist                                             the project's only (grants are per
                                                          project; the user file has none)

`ProjectConfig.rules` says which file each rule came from; `codecoder check` prints it.

Trust. A repository can arrive with a codecoder.json in it, so the project file is obeyed only
for what cannot widen access until the human trusts it (`runtime.config.trust`, `codecoder trust`).
Every top-level setting is classified in `SECTIONS`; a new one must be added there, and anything
not classified counts as a widening:

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

An untrusted file's widenings are each reported (`untrusted`, a warning, with line and column)
and ignored; its grants written by the runtime at the prompt are the exception (they were
approved one by one, see `runtime.config.trust`). The user's file is the human's own and is trusted.
Whatever the trust, a read root may never be `/`, the home directory or a directory above it,
nor hold the runtime's state or the user's configuration (`read_root_forbidden`, an error that
drops the root).

Grants for capabilities (`run_capability:<name>`) are checked against the capability they name
(`runtime.config.capabilities`): its environment gives the ceiling (a @shell capability's entry is a
ceiling_violation), and the entry's digest must be one the runtime recorded when the human
approved it. So:

    capability_not_pinned  warning  no digest: grants nothing, the capability asks again
    digest_not_approved    error    a digest the runtime never recorded as approved (edited or
                                    copied by hand): grants nothing
    capability_changed     warning  an approved digest, but the capability changed since: it
                                    asks again (the entry holds again if the code is restored)
    unknown_capability     warning  no such capability is loaded
    capability_wildcard    warning  `run_capability:*` cannot be pinned to one capability's code
    invalid_capability     error    a capability directory that cannot be loaded (bad manifest,
                                    ...): it is not offered as a tool
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from codecoder.environments.docker.settings import DockerSettings
from codecoder.runtime.config import trust
from codecoder.runtime.config.capabilities import (
    APPROVALS_DIR,
    CAPABILITIES_DIR,
    RUN_CAPABILITY,
    CapabilitySet,
    is_approved,
    load_capabilities,
)
from codecoder.runtime.config.projectfile import (
    AgentSection,
    AllowEntry,
    Diagnostic,
    ProjectFile,
    Severity,
    WebSection,
    load_project_file,
    load_user_file,
    user_file_path,
)
from codecoder.runtime.config.trust import TrustState
from codecoder.runtime.kernel.ceiling import EnvironmentTag, Scope
from codecoder.runtime.kernel.hosts import parse_host_entry
from codecoder.runtime.kernel.protected import PROTECTED_NAMES
from codecoder.runtime.kernel.state import state_directory
from codecoder.runtime.permissions.allowlist import NEVER, Grant, ProjectAllowlist
from codecoder.runtime.permissions.keys import KeyStyle
from codecoder.runtime.permissions.patterns import KeyPattern, PatternError, never_matches

PROJECT_FILE = "codecoder.json"

HostRule = tuple[str, int | None]  # (host or *.suffix or *, port or None for any)


class ToolInfo(Protocol):
    """What the configuration needs to know of a tool to check an entry for it (a
    `runtime.tools.base.Tool` is one): where it runs, where it may be bound, how its keys read."""

    @property
    def environment(self) -> EnvironmentTag: ...
    @property
    def bindable(self) -> frozenset[EnvironmentTag]: ...
    @property
    def key_style(self) -> KeyStyle: ...
    @property
    def asks(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ShellSettings:
    """Limits for commands, from codecoder.json's `limits` (defaults here)."""

    timeout: float = 120.0
    max_output: int = 64 * 1024


@dataclass(frozen=True, slots=True)
class WebSettings:
    """What the web tools may reach and read, from the `web` objects (defaults here).

    The policy for a host is decided by the most specific entry that matches it (`host:port`,
    then `host`, then the longest `*.suffix`, then `*`); when an allow and a deny entry are
    equally specific, the deny wins. A host no entry matches is reached if its addresses are
    public (see `runtime.tools.web`). An allowed host is reached even when its address is
    loopback or private: that is what naming it is for.
    """

    allow_hosts: frozenset[HostRule] = frozenset()
    deny_hosts: frozenset[HostRule] = frozenset()
    search_url: str | None = None  # a SearxNG instance; web_search needs one
    github_api_url: str = "https://api.github.com"
    github_token_env: str = "GITHUB_TOKEN"
    max_bytes: int = 5 * 1024 * 1024
    timeout: float = 30.0
    max_redirects: int = 5

    @classmethod
    def from_section(cls, section: WebSection) -> WebSettings:
        return cls.layered((section,))

    @classmethod
    def layered(cls, sections: tuple[WebSection, ...]) -> WebSettings:
        """Lowest layer first: host entries add up, each setting comes from the top layer
        that sets it."""
        default = cls()

        def top(name: str) -> Any:
            for section in reversed(sections):
                value = getattr(section, name)
                if value is not None:
                    return value
            return getattr(default, name)

        return cls(
            allow_hosts=frozenset(
                parse_host_entry(entry) for section in sections for entry in section.allow_hosts
            ),
            deny_hosts=frozenset(
                parse_host_entry(entry) for section in sections for entry in section.deny_hosts
            ),
            search_url=top("search_url"),
            github_api_url=top("github_api_url"),
            github_token_env=top("github_token_env"),
            max_bytes=top("max_bytes"),
            timeout=top("timeout"),
            max_redirects=top("max_redirects"),
        )

    def verdict(
        self, host: str, port: int, extra_allowed: frozenset[HostRule] = frozenset()
    ) -> tuple[Literal["allow", "deny"], str] | None:
        """What the policy says of `host:port`, and the entry that said it; None if nothing."""
        best: tuple[int, int, str, str] | None = None  # (specificity, deny?, verdict, entry)
        for verdict, rules in (
            ("allow", self.allow_hosts | extra_allowed),
            ("deny", self.deny_hosts),
        ):
            for rule_host, rule_port in rules:
                rank = _specificity(rule_host, rule_port, host, port)
                if rank is None:
                    continue
                candidate = (rank, verdict == "deny", verdict, _rule_text(rule_host, rule_port))
                if best is None or candidate[:2] > best[:2]:
                    best = candidate
        if best is None:
            return None
        return ("allow" if best[2] == "allow" else "deny"), best[3]


def _specificity(rule_host: str, rule_port: int | None, host: str, port: int) -> int | None:
    if rule_port is not None and rule_port != port:
        return None
    if rule_host == "*":
        matched = 0
    elif rule_host.startswith("*."):
        suffix = rule_host[1:]
        if not host.endswith(suffix) or host == suffix[1:]:
            return None
        matched = len(suffix)
    elif rule_host == host:
        matched = 10_000
    else:
        return None
    return matched * 2 + (rule_port is not None)


def _rule_text(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else host


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """The model behind child agents, from the `agent` objects (defaults here).

    `base_url` and `model` left unset here are taken from the environment (OPENAI_BASE_URL,
    OPENAI_MODEL) when a child starts; the key is always read from `api_key_env`.
    """

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    max_turns: int = 20
    timeout: float = 120.0

    @classmethod
    def from_section(cls, section: AgentSection) -> AgentSettings:
        return cls.layered((section,))

    @classmethod
    def layered(cls, sections: tuple[AgentSection, ...]) -> AgentSettings:
        default = cls()
        values: dict[str, Any] = {}
        for name in ("base_url", "model", "api_key_env", "max_turns", "timeout"):
            values[name] = next(
                (getattr(s, name) for s in reversed(sections) if getattr(s, name) is not None),
                getattr(default, name),
            )
        return cls(**values)


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


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule in effect and the file it came from, for `codecoder check`."""

    kind: str  # deny, allow, environment, read_root, web.allow_hosts, web.deny_hosts, ...
    value: str
    file: str
    line: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "value": self.value, "file": self.file, "line": self.line}


@dataclass(slots=True)
class ProjectConfig:
    root: Path
    file: ProjectFile
    allowlist: ProjectAllowlist
    bindings: dict[str, EnvironmentTag] = field(default_factory=dict)
    limits: ShellSettings = field(default_factory=ShellSettings)
    session_ttl: float = NEVER
    web: WebSettings = field(default_factory=WebSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    read_roots: dict[str, Path] = field(default_factory=dict)
    docker: DockerSettings = field(default_factory=DockerSettings)
    diagnostics: tuple[Diagnostic, ...] = ()
    trust: Trust = field(default_factory=lambda: Trust(TrustState.NOTHING_TO_TRUST))
    user_file: ProjectFile | None = None
    rules: tuple[Rule, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


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


def load_project(
    root: Path,
    tools: Mapping[str, ToolInfo],
    capabilities: CapabilitySet | None = None,
    *,
    trusted: bool | None = None,
    user_file: Path | None = None,
) -> ProjectConfig:
    """The user's file and codecoder.json, layered and checked against `tools` and the
    project's capabilities (read from `root` unless given; only where `tools` has
    run_capability). `trusted` overrides the trust record (None: read it); `user_file`, the
    user file's place (None: `$XDG_CONFIG_HOME/codecoder/config.json`)."""
    user = load_user_file(user_file or user_file_path())
    pf = load_project_file(root / PROJECT_FILE)
    record = trust.read_record(root)
    base = _Base.of(user)
    view, found = _untrusted_view(pf, root, base, record.approved)
    if not found:
        state = TrustState.NOTHING_TO_TRUST
    elif trusted if trusted is not None else record.trusts(pf.digest):
        state = TrustState.TRUSTED
    else:
        state = TrustState.UNTRUSTED
    diagnostics = list(user.diagnostics) + list(pf.diagnostics)
    if state is TrustState.UNTRUSTED:
        pf_in_effect = view
        for widening in found:
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "untrusted",
                    f"{widening.what}: ignored, because this codecoder.json is not trusted "
                    "(review it with `codecoder trust`)",
                    key=widening.key,
                    line=widening.line,
                    column=widening.column,
                )
            )
    else:
        pf_in_effect = pf
    config = _layered(root, tools, capabilities, user, pf_in_effect, diagnostics)
    config.file = pf
    config.user_file = user if user.exists else None
    config.trust = Trust(
        state, pf.digest, tuple(sorted(found, key=lambda w: (w.line or 0, w.column or 0)))
    )
    return config


@dataclass(frozen=True, slots=True)
class _Base:
    """What the user's file (over the defaults) sets: what a project file is compared with."""

    timeout: float
    max_output: int
    session_ttl: float
    web: WebSettings
    agent: AgentSettings
    docker: DockerSettings

    @classmethod
    def of(cls, user: ProjectFile) -> _Base:
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


def _untrusted_view(
    pf: ProjectFile,
    root: Path,
    base: _Base,
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


def _layered(
    root: Path,
    tools: Mapping[str, ToolInfo],
    capabilities: CapabilitySet | None,
    user: ProjectFile,
    pf: ProjectFile,
    diagnostics: list[Diagnostic],
) -> ProjectConfig:
    """`pf` (as far as it is obeyed) over the user's file, checked against the tools."""
    if capabilities is None:
        capabilities = (
            load_capabilities(root, taken=tools) if RUN_CAPABILITY in tools else CapabilitySet()
        )
    for problem in capabilities.problems:
        diagnostics.append(
            Diagnostic(
                "error",
                "invalid_capability",
                f"capability {problem.name!r} is not loaded: {problem.message}",
                key=problem.name,
            )
        )
    rules: list[Rule] = []
    layers = [(layer, str(layer.path)) for layer in (user, pf) if layer.exists]

    def style_of(tool: str) -> KeyStyle:
        known = tools.get(tool)
        return known.key_style if known else KeyStyle.NAME

    bindings: dict[str, EnvironmentTag] = {}
    for layer, origin in layers:
        file = origin if layer is user else None
        for binding in layer.bindings:
            tool = tools.get(binding.tool)
            where: dict[str, Any] = {
                "line": binding.line,
                "column": binding.column,
                "file": file,
            }
            if tool is None:
                diagnostics.append(
                    Diagnostic(
                        "error",
                        "unknown_tool",
                        f"no tool named {binding.tool!r} to bind",
                        key=binding.tool,
                        **where,
                    )
                )
                continue
            tag = EnvironmentTag(binding.environment)
            if tag not in tool.bindable:
                allowed = ", ".join(sorted(t.value for t in tool.bindable)) or "nothing else"
                diagnostics.append(
                    Diagnostic(
                        "error",
                        "invalid_binding",
                        f"{binding.tool} cannot run in {tag.value}; it can be bound to: {allowed}",
                        key=binding.tool,
                        **where,
                    )
                )
                continue
            bindings[binding.tool] = tag
            rules.append(Rule("environment", f"{binding.tool}: {tag.value}", origin, binding.line))

    def environment_of(tool: str) -> EnvironmentTag:
        return bindings.get(tool) or tools[tool].environment

    grants: list[Grant] = []
    for entry in pf.allowlist:
        where = {"line": entry.line, "column": entry.column}
        pattern = _checked_pattern(entry.pattern, tools, diagnostics, where, deny=False)
        if pattern is None or not entry.grants:
            continue
        environment = environment_of(pattern.tool)
        if pattern.tool == RUN_CAPABILITY:
            capability = capabilities.get(pattern.action)
            if capability is not None:
                environment = capability.environment
        if not environment.allows(Scope.PROJECT):
            diagnostics.append(
                Diagnostic(
                    "error",
                    "ceiling_violation",
                    f"{entry.pattern} is AlwaysThisProject, but "
                    f"{environment.refusal(entry.pattern)}."
                    f" The entry grants nothing; remove it, or grant it per session"
                    + (
                        ' or bind the tool to a sandbox in "environments"'
                        if len(tools[pattern.tool].bindable) > 1
                        else ""
                    ),
                    key=entry.pattern,
                    **where,
                )
            )
        if tools[pattern.tool].key_style is KeyStyle.PATH and _only_protected(pattern):
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "protected_path",
                    f"{entry.pattern} covers only protected paths (codecoder.json, .codecoder/, "
                    ".git/), which are never granted beyond Once: the entry grants nothing",
                    key=entry.pattern,
                    **where,
                )
            )
        if pattern.tool == RUN_CAPABILITY and not _capability_entry_holds(
            root, entry, pattern, capabilities, diagnostics
        ):
            continue
        # Kept even when it violates the ceiling: the engine reports it at every lookup it meets.
        grants.append(Grant(pattern, entry.line, entry.column, entry.digest))
        rules.append(Rule("allow", entry.pattern, str(pf.path), entry.line))

    denies: list[Grant] = []
    for layer, origin in layers:
        for deny in layer.deny:
            where = {"line": deny.line, "column": deny.column}
            if layer is user:
                where["file"] = origin
            pattern = _checked_pattern(deny.pattern, tools, diagnostics, where, deny=True)
            if pattern is not None:
                denies.append(Grant(pattern, deny.line, deny.column))
                rules.append(Rule("deny", deny.pattern, origin, deny.line))

    default = ShellSettings()

    def top(name: str, fallback: Any) -> Any:
        for layer in (pf, user):
            value = getattr(layer, name)
            if value is not None:
                return value
        return fallback

    limits = ShellSettings(
        timeout=top("timeout", default.timeout), max_output=top("max_output", default.max_output)
    )
    web_sections = tuple(layer.web for layer, _ in layers)
    for layer, origin in layers:
        for host in layer.web.allow_hosts:
            rules.append(Rule("web.allow_hosts", host, origin))
        for host in layer.web.deny_hosts:
            rules.append(Rule("web.deny_hosts", host, origin))
    return ProjectConfig(
        root=root,
        file=pf,
        allowlist=ProjectAllowlist.build(grants if pf.usable else [], denies, style_of),
        bindings=bindings,
        limits=limits,
        session_ttl=top("session_ttl", NEVER),
        web=WebSettings.layered(web_sections),
        agent=AgentSettings.layered(tuple(layer.agent for layer, _ in layers)),
        read_roots=_read_roots(root, layers, user, diagnostics, rules),
        docker=_docker_settings(layers, user, diagnostics),
        diagnostics=tuple(
            sorted(diagnostics, key=lambda d: (d.file or "", d.line or 0, d.column or 0))
        ),
        rules=tuple(rules),
    )


def _position(d: Diagnostic) -> tuple[str, int, int]:
    # The user's file first (it lies under the project's), then by line and column.
    return (d.file or "~", d.line or 0, d.column or 0)


def _forbidden_read_root(directory: Path) -> str | None:
    """Why `directory` may never be a read root, or None."""
    home = Path.home().resolve()
    if directory == Path("/"):
        return "it is the root of the file system"
    if directory == home or directory in home.parents:
        return f"it is the home directory or holds it ({home})"
    for what, inside in (
        ("the runtime's state (trust records, audit logs)", state_directory()),
        ("the user's codecoder configuration", user_file_path().parent),
    ):
        resolved = inside.resolve()
        if directory == resolved or directory in resolved.parents:
            return f"it holds {what} ({resolved})"
    return None


def _read_roots(
    root: Path,
    layers: list[tuple[ProjectFile, str]],
    user: ProjectFile,
    diagnostics: list[Diagnostic],
    rules: list[Rule],
) -> dict[str, Path]:
    roots: dict[str, Path] = {}
    for layer, origin in layers:
        # The user's roots are written relative to the user's file (or with ~); a project's,
        # relative to the project.
        base = layer.path.parent if layer is user else root
        file = origin if layer is user else None
        for name, written in layer.read_roots:
            line, column = layer.position_of(f"/read_roots/{name.replace('~', '~0')}")
            directory = base / os.path.expanduser(written) if layer is user else base / written
            directory = directory.resolve()
            refusal = _forbidden_read_root(directory)
            if refusal is not None:
                diagnostics.append(
                    Diagnostic(
                        "error",
                        "read_root_forbidden",
                        f"read root {name!r} ({directory}) is refused: {refusal}; the read tools "
                        "never ask, so a root must not expose the user's files",
                        key=name,
                        line=line,
                        column=column,
                        file=file,
                    )
                )
                continue
            if not directory.is_dir():
                diagnostics.append(
                    Diagnostic(
                        "warning",
                        "read_root_missing",
                        f"read root {name!r}: {directory} is not a directory; it is left out",
                        key=name,
                        line=line,
                        column=column,
                        file=file,
                    )
                )
                continue
            roots[name] = directory
            rules.append(Rule("read_root", f"@{name} = {directory}", origin, line))
    return roots


def _docker_settings(
    layers: list[tuple[ProjectFile, str]], user: ProjectFile, diagnostics: list[Diagnostic]
) -> DockerSettings:
    """The layers' @docker settings; a loosened one is a warning, an impossible one an error."""
    merged: dict[str, Any] = {}
    for layer, _ in layers:
        merged.update(dict(layer.docker))
    top = layers[-1][0] if layers else user
    file = str(top.path) if top is user else None
    line, column = top.position_of("/docker")
    try:
        settings = DockerSettings(**merged)
    except ValueError as exc:
        diagnostics.append(
            Diagnostic(
                "error",
                "invalid_docker_settings",
                f"docker: {exc}; the hardened defaults are used instead",
                key="docker",
                line=line,
                column=column,
                file=file,
            )
        )
        return DockerSettings()
    for looser in settings.looser_than_default():
        source = next((lay for lay, _ in reversed(layers) if looser.name in dict(lay.docker)), top)
        where = source.position_of(f"/docker/{looser.name}")
        diagnostics.append(
            Diagnostic(
                "warning",
                "docker_looser",
                f"docker.{looser.name} is {looser.value!r} where the default is "
                f"{looser.default!r}: {looser.why}",
                key=f"docker.{looser.name}",
                line=where[0],
                column=where[1],
                file=str(source.path) if source is user else None,
            )
        )
    return settings


def _capability_entry_holds(
    root: Path,
    entry: AllowEntry,
    pattern: KeyPattern,
    capabilities: CapabilitySet,
    diagnostics: list[Diagnostic],
) -> bool:
    """Report what is wrong with a `run_capability:` entry; False if it must grant nothing."""
    name, digest = pattern.action, entry.digest

    def report(severity: Severity, code: str, message: str) -> None:
        diagnostics.append(
            Diagnostic(
                severity, code, message, key=entry.pattern, line=entry.line, column=entry.column
            )
        )

    if not name or "*" in name:
        report(
            "warning",
            "capability_wildcard",
            f"{entry.pattern} names no single capability, but a capability grant holds only "
            "for the approved code of one: the entry grants nothing",
        )
        return False
    capability = capabilities.get(name)
    if capability is None:
        report(
            "warning",
            "unknown_capability",
            f"{entry.pattern}: there is no capability {name!r} in {CAPABILITIES_DIR}/ (or it "
            "cannot be loaded); the entry grants nothing until there is",
        )
    if digest is None:
        report(
            "warning",
            "capability_not_pinned",
            f"{entry.pattern} has no digest, but a capability grant holds only for the code "
            "that was approved: it grants nothing, and the capability is asked for again",
        )
        return False
    if not is_approved(root, name, digest):
        report(
            "error",
            "digest_not_approved",
            f"{entry.pattern} carries the digest {digest!r}, which the runtime never recorded "
            f"as approved (no record in {APPROVALS_DIR}/{name}/): it was edited or written by "
            "hand. The entry grants nothing; to trust the capability as it is, run it and "
            "answer AlwaysThisProject",
        )
        return False
    if capability is not None and capability.digest != digest:
        report(
            "warning",
            "capability_changed",
            f"{entry.pattern} was approved for {digest}, but {name} is now "
            f"{capability.digest}: its manifest or code changed since, so it is asked for again",
        )
    return True


def _checked_pattern(
    raw: str,
    tools: Mapping[str, ToolInfo],
    diagnostics: list[Diagnostic],
    where: dict[str, Any],
    *,
    deny: bool,
) -> KeyPattern | None:
    try:
        pattern = KeyPattern.parse(raw)
    except PatternError as exc:
        diagnostics.append(Diagnostic("error", "invalid_pattern", str(exc), key=raw, **where))
        return None
    tool = tools.get(pattern.tool)
    if tool is None:
        diagnostics.append(
            Diagnostic(
                "error",
                "unknown_tool",
                f"{raw}: there is no tool named {pattern.tool!r}; known tools: "
                + ", ".join(sorted(tools)),
                key=raw,
                **where,
            )
        )
        return None
    try:
        pattern.check(tool.key_style)
    except PatternError as exc:
        diagnostics.append(Diagnostic("error", "invalid_pattern", str(exc), key=raw, **where))
        return None
    if not pattern.action and tool.asks and tool.key_style is not KeyStyle.NAME:
        diagnostics.append(
            Diagnostic(
                "warning",
                "matches_nothing",
                f"{raw} names the tool alone, which matches no call; did you mean {raw}:* ?",
                key=raw,
                **where,
            )
        )
        return pattern
    problem = never_matches(pattern, tool.key_style, asks=tool.asks, deny=deny)
    if problem is not None:
        # A deny rule that can never match protects nothing while looking as if it did: an
        # error. An allow entry that can never match only grants nothing: a warning.
        what = "deny rule" if deny else "entry"
        suggestion = f"; to mean that, write {problem.suggestion}" if problem.suggestion else ""
        diagnostics.append(
            Diagnostic(
                "error" if deny else "warning",
                "never_matches",
                f"{raw}: this {what} can never match a call: {problem.reason}{suggestion}",
                key=raw,
                **where,
            )
        )
    return pattern


def _only_protected(pattern: KeyPattern) -> bool:
    head = pattern.action.split("/", 1)[0]
    return head in PROTECTED_NAMES and pattern.action != head + "*"
