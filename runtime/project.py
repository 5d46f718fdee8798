"""A project's configuration as the runtime uses it: codecoder.json checked against the tools.

`runtime.projectfile` knows the file (syntax, schema, positions, writes); this module knows what
the entries mean: which tool each names, which environment that tool is bound to, and whether
that environment's ceiling admits a project grant. Problems become diagnostics with the line and
column of the entry; nothing is dropped silently.

Grants for capabilities (`run_capability:<name>`) are checked against the capability they name
(`runtime.capabilities`): its environment gives the ceiling (a @shell capability's entry is a
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

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.dockersettings import DockerSettings
from runtime.allowlist import NEVER, Grant, ProjectAllowlist
from runtime.capabilities import (
    APPROVALS_DIR,
    CAPABILITIES_DIR,
    RUN_CAPABILITY,
    CapabilitySet,
    is_approved,
    load_capabilities,
)
from runtime.ceiling import EnvironmentTag, Scope
from runtime.patterns import KeyPattern, PatternError, never_matches
from runtime.projectfile import (
    AgentSection,
    AllowEntry,
    Diagnostic,
    ProjectFile,
    Severity,
    WebSection,
    load_project_file,
    parse_host_entry,
)
from runtime.protected import PROTECTED_NAMES
from runtime.tool import KeyStyle, ShellSettings, Tool

PROJECT_FILE = "codecoder.json"


@dataclass(frozen=True, slots=True)
class WebSettings:
    """What the web tools may reach and read, from codecoder.json's `web` (defaults here).

    `allow_hosts` holds `(host, port)` pairs (port None: any port) that may be reached even
    though their addresses are loopback, private or otherwise refused by default.
    """

    allow_hosts: frozenset[tuple[str, int | None]] = frozenset()
    search_url: str | None = None  # a SearxNG instance; web_search needs one
    github_api_url: str = "https://api.github.com"
    github_token_env: str = "GITHUB_TOKEN"
    max_bytes: int = 5 * 1024 * 1024
    timeout: float = 30.0
    max_redirects: int = 5

    @classmethod
    def from_section(cls, section: WebSection) -> WebSettings:
        default = cls()
        return cls(
            allow_hosts=frozenset(parse_host_entry(entry) for entry in section.allow_hosts),
            search_url=section.search_url,
            github_api_url=section.github_api_url or default.github_api_url,
            github_token_env=section.github_token_env or default.github_token_env,
            max_bytes=section.max_bytes or default.max_bytes,
            timeout=section.timeout or default.timeout,
            max_redirects=(
                section.max_redirects
                if section.max_redirects is not None
                else default.max_redirects
            ),
        )


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """The model behind child agents, from codecoder.json's `agent` (defaults here).

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
        default = cls()
        return cls(
            base_url=section.base_url,
            model=section.model,
            api_key_env=section.api_key_env or default.api_key_env,
            max_turns=section.max_turns or default.max_turns,
            timeout=section.timeout or default.timeout,
        )


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

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


def load_project(
    root: Path, tools: Mapping[str, Tool[Any]], capabilities: CapabilitySet | None = None
) -> ProjectConfig:
    """codecoder.json checked against `tools` and the project's capabilities (read from
    `root` unless given; only where `tools` has run_capability)."""
    pf = load_project_file(root / PROJECT_FILE)
    diagnostics = list(pf.diagnostics)
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

    def style_of(tool: str) -> KeyStyle:
        known = tools.get(tool)
        return known.key_style if known else KeyStyle.NAME

    bindings: dict[str, EnvironmentTag] = {}
    for binding in pf.bindings:
        tool = tools.get(binding.tool)
        where = {"line": binding.line, "column": binding.column}
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

    denies: list[Grant] = []
    for deny in pf.deny:
        where = {"line": deny.line, "column": deny.column}
        pattern = _checked_pattern(deny.pattern, tools, diagnostics, where, deny=True)
        if pattern is not None:
            denies.append(Grant(pattern, deny.line, deny.column))

    default = ShellSettings()
    limits = ShellSettings(
        timeout=pf.timeout if pf.timeout is not None else default.timeout,
        max_output=pf.max_output if pf.max_output is not None else default.max_output,
    )
    return ProjectConfig(
        root=root,
        file=pf,
        allowlist=ProjectAllowlist.build(grants if pf.usable else [], denies, style_of),
        bindings=bindings,
        limits=limits,
        session_ttl=pf.session_ttl,
        web=WebSettings.from_section(pf.web),
        agent=AgentSettings.from_section(pf.agent),
        read_roots=_read_roots(root, pf, diagnostics),
        docker=_docker_settings(pf, diagnostics),
        diagnostics=tuple(sorted(diagnostics, key=lambda d: (d.line or 0, d.column or 0))),
    )


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


def _read_roots(root: Path, pf: ProjectFile, diagnostics: list[Diagnostic]) -> dict[str, Path]:
    roots: dict[str, Path] = {}
    for name, written in pf.read_roots:
        directory = (root / written).resolve()
        if not directory.is_dir():
            line, column = pf.position_of(f"/read_roots/{name.replace('~', '~0')}")
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "read_root_missing",
                    f"read root {name!r}: {directory} is not a directory; it is left out",
                    key=name,
                    line=line,
                    column=column,
                )
            )
            continue
        roots[name] = directory
    return roots


def _docker_settings(pf: ProjectFile, diagnostics: list[Diagnostic]) -> DockerSettings:
    """The file's @docker settings; a loosened one is a warning, an impossible one an error."""
    line, column = pf.position_of("/docker")
    try:
        settings = DockerSettings(**dict(pf.docker))
    except ValueError as exc:
        diagnostics.append(
            Diagnostic(
                "error",
                "invalid_docker_settings",
                f"docker: {exc}; the hardened defaults are used instead",
                key="docker",
                line=line,
                column=column,
            )
        )
        return DockerSettings()
    for looser in settings.looser_than_default():
        where = pf.position_of(f"/docker/{looser.name}")
        diagnostics.append(
            Diagnostic(
                "warning",
                "docker_looser",
                f"docker.{looser.name} is {looser.value!r} where the default is "
                f"{looser.default!r}: {looser.why}",
                key=f"docker.{looser.name}",
                line=where[0],
                column=where[1],
            )
        )
    return settings


def _checked_pattern(
    raw: str,
    tools: Mapping[str, Tool[Any]],
    diagnostics: list[Diagnostic],
    where: dict[str, int | None],
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
