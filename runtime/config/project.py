"""A project's configuration as the runtime uses it: the user's file and codecoder.json, layered,
checked against the tools, and obeyed as far as the human trusts them.

`runtime.config.projectfile` says what the files hold (`runtime.config.reading` reads them,
`runtime.config.writing` writes grants); this module knows what the entries mean: which tool each
names (`runtime.config.entrychecks`), which environment that tool is bound to, and whether that
environment's ceiling admits a project grant. Problems become diagnostics with the line and
column of the entry (and the file, when it is the user's); nothing is dropped silently.

Layers. The user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`: personal deny rules, read
roots, a web policy, defaults) lies under the project's codecoder.json:

    deny, read_roots, web.allow_hosts, web.deny_hosts     both files' entries count
    environments                                          per tool, the project's wins
    bwrap.home, bwrap.env                                 both files' entries count
    limits, session_ttl, docker, web and agent settings   per setting, the project's wins
    allowlist                                             both files' grants count: the
                                                          user's hold in every project whose
                                                          tool runs contained (never @shell)

`ProjectConfig.rules` says which file each rule came from; `codecoder check` prints it.

Failing closed. A file that exists but cannot be read, parsed or validated (bad JSON, a wrong
type such as `"deny": "..."`, a top-level `[]`, a duplicated section), and a deny rule that
cannot be read as a rule for a known tool, leave the rules unknown: any of them could have
refused a call. `ProjectConfig.unreadable` lists those errors; while there is one, the
allowlist is `unreadable` and every call that needs permission is refused with the first of
them (file, line and column), before any grant, deny rule or question. Calls that need no
permission still run.

Trust. A repository can arrive with a codecoder.json in it, so the project file is obeyed only
for what cannot widen access until the human trusts it (`runtime.config.trust`, `codecoder trust`);
what that is, setting by setting, is `runtime.config.untrusted`'s. An untrusted file's widenings
are each reported (`untrusted`, a warning, with line and column) and ignored. The user's file is
the human's own and is trusted. Whatever the trust, a read root may never be `/`, the home
directory or a directory above it, nor hold the runtime's state or the user's configuration
(`read_root_forbidden`, an error that drops the root).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecoder.config import trust
from codecoder.config.capabilities import RUN_CAPABILITY, CapabilitySet, load_capabilities
from codecoder.config.entrychecks import (
    ToolInfo,
    capability_entry_holds,
    checked_pattern,
    only_protected,
)
from codecoder.config.projectfile import Diagnostic, ProjectFile, format_diagnostic
from codecoder.config.reading import load_project_file, load_user_file, user_file_path
from codecoder.config.settings import AgentSettings, ShellSettings, WebSettings
from codecoder.config.trust import TrustState
from codecoder.config.untrusted import LayerBelow, Trust, Widening, untrusted_view
from codecoder.environments.broker import CredentialRoute
from codecoder.environments.bwrap.settings import BwrapSettings, home_entry_problem
from codecoder.environments.docker.settings import DockerSettings
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.state import state_directory
from codecoder.permissions.allowlist import NEVER, Grant, ProjectAllowlist
from codecoder.permissions.keys import KeyStyle

__all__ = ["PROJECT_FILE", "ProjectConfig", "Rule", "load_project", "unreadable_reason"]

PROJECT_FILE = "codecoder.json"


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
    bwrap: BwrapSettings = field(default_factory=BwrapSettings)
    diagnostics: tuple[Diagnostic, ...] = ()
    trust: Trust = field(default_factory=lambda: Trust(TrustState.NOTHING_TO_TRUST))
    user_file: ProjectFile | None = None
    rules: tuple[Rule, ...] = ()
    # The errors that leave the rules unknown (see the module docstring): it fails closed.
    unreadable: tuple[Diagnostic, ...] = ()
    # The user's file's credential routes (environments.broker); a project's are an error.
    credentials: tuple[CredentialRoute, ...] = ()

    @property
    def credential_hosts(self) -> tuple[tuple[str, int], ...]:
        """The routed hosts the egress allowlist admits: where a contained `git push` can go
        through the credential broker (`runtime.tools.containedpush`)."""
        egress = self.docker.egress
        if egress is None:
            return ()
        return tuple(
            (route.host, route.port)
            for route in self.credentials
            if egress.admits(route.host, route.port)
        )

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    @property
    def ignored(self) -> frozenset[str]:
        """The project file's allowlist entries ignored because it is not trusted."""
        if self.trust.obeyed:
            return frozenset()
        return frozenset(w.key for w in self.trust.widenings if w.section == "allowlist")

    @property
    def unreadable_reason(self) -> str | None:
        """Why every call that needs permission is refused, or None when the rules are known."""
        return unreadable_reason(self.root / PROJECT_FILE, self.unreadable)


def unreadable_reason(path: Path, unreadable: tuple[Diagnostic, ...]) -> str | None:
    """The refusal of a call while `unreadable` holds errors: the first, where it is, and what
    to do."""
    if not unreadable:
        return None
    first = format_diagnostic(path, unreadable[0])
    more = len(unreadable) - 1
    others = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return (
        f"the rules cannot be read: {first}{others}. While a rules file is broken, nothing "
        "that needs permission runs: fix it (`codecoder check` lists every problem), then "
        "retry or `/reload`"
    )


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
    # The file and the record meant for it, even while another process grants or revokes.
    pf, record = trust.read_with_file(
        root, lambda: load_project_file(root / PROJECT_FILE), lambda pf: pf.digest
    )
    base = LayerBelow.of(user)
    view, found = untrusted_view(pf, root, base, record.approved)
    if not found:
        state = TrustState.NOTHING_TO_TRUST
    elif trusted if trusted is not None else _trusted(record, pf, found):
        state = TrustState.TRUSTED
    else:
        state = TrustState.UNTRUSTED
    diagnostics = list(user.diagnostics) + list(pf.diagnostics)
    if capabilities is None:
        capabilities = (
            load_capabilities(root, taken=tools) if RUN_CAPABILITY in tools else CapabilitySet()
        )
    void: list[Diagnostic] = []
    if state is TrustState.UNTRUSTED:
        pf_in_effect = view
        # An entry that can never match is an error whatever the trust: said as it would be
        # were the file trusted, and not again as a widening that waits for trust.
        as_if_trusted = _layered(root, tools, capabilities, user, pf, []).diagnostics
        void = _never_matching(as_if_trusted, {entry.pattern for entry in pf.allowlist})
        waiting = [w for w in found if not any(d.key == w.key for d in void)]
        diagnostics += _untrusted(waiting, record)
    else:
        pf_in_effect = pf
    config = _layered(root, tools, capabilities, user, pf_in_effect, diagnostics)
    if void:
        config.diagnostics = tuple(
            sorted((*config.diagnostics, *void), key=lambda d: (d.file or "", d.line or 0))
        )
    config.file = pf
    config.credentials, config.diagnostics = _credentials(user, pf, config.diagnostics)
    config.user_file = user if user.exists else None
    if state is TrustState.UNTRUSTED:
        # What the file would do if trusted: a widening that could never take effect (a
        # grant above its tool's ceiling, a tool that does not exist) is marked before the
        # human trusts it.
        as_trusted = _layered(root, tools, capabilities, user, pf, [])
        found = [_marked(w, as_trusted.diagnostics) for w in found]
    else:
        found = [_marked(w, config.diagnostics) for w in found]
    config.trust = Trust(
        state, pf.digest, tuple(sorted(found, key=lambda w: (w.line or 0, w.column or 0)))
    )
    return config


def _untrusted(widenings: list[Widening], record: trust.TrustRecord) -> list[Diagnostic]:
    """What a file nobody trusted as it is now says of its widenings: each new one, and once
    (not one line each) those the human trusted before an edit widened something new, which
    wait for trust again with the rest."""
    before = [w for w in widenings if record.covers([w.setting])]
    new = [w for w in widenings if w not in before]
    since = " (new since you trusted this file)" if before else ""
    said = [
        Diagnostic(
            "warning",
            "untrusted",
            f"{w.what}{since}: ignored, because this codecoder.json is not trusted (review it "
            "with `codecoder trust`)",
            key=w.key,
            line=w.line,
            column=w.column,
        )
        for w in new
    ]
    if before:
        shown = "; ".join((f"line {w.line}: " if w.line else "") + w.what for w in new[:3]) + (
            "; …" if len(new) > 3 else ""
        )
        said.append(
            Diagnostic(
                "warning",
                "untrusted_edit",
                f"this codecoder.json changed since you trusted it: it now widens what you have "
                f"not trusted ({shown}), so until you trust it again (`codecoder trust`), the "
                f"{len(before)} widening(s) you trusted before are ignored too; an edit that "
                "only narrows keeps the trust",
            )
        )
    return said


def _credentials(
    user: ProjectFile, pf: ProjectFile, diagnostics: tuple[Diagnostic, ...]
) -> tuple[tuple[CredentialRoute, ...], tuple[Diagnostic, ...]]:
    """The credential routes (the user's file's only) and the diagnostics, with an error for a
    project file that declares any: a cloned repository never routes the user's credentials,
    trusted or not."""
    routes = tuple(CredentialRoute.parse(host, source) for host, source in user.credentials)
    if not pf.credentials:
        return routes, diagnostics
    line, column = pf.position_of("/credentials")
    refused = Diagnostic(
        "error",
        "credentials_in_project",
        "credentials are declared only in your own file (~/.config/codecoder/config.json): a "
        "project's codecoder.json never routes your credentials, trusted or not; ignored",
        "credentials",
        line,
        column,
    )
    return routes, (*diagnostics, refused)


def _trusted(record: trust.TrustRecord, pf: ProjectFile, found: list[Widening]) -> bool:
    """The human trusted these bytes, or every widening the file holds now (trust follows
    meaning: an edit that widens nothing new keeps it)."""
    return record.trusts(pf.digest) or record.covers(w.setting for w in found)


# Diagnostics that mean an entry of the project file grants, binds or opens nothing.
_NEVER: dict[str, frozenset[str]] = {
    "allowlist": frozenset(
        {
            *("ceiling_violation", "unknown_tool", "invalid_pattern", "never_matches"),
            *("matches_nothing", "unknown_program", "protected_path", "digest_not_approved"),
            *("capability_not_pinned", "capability_wildcard", "unknown_capability"),
        }
    ),
    "environments": frozenset({"unknown_tool", "invalid_binding"}),
    "read_roots": frozenset({"read_root_forbidden", "read_root_missing"}),
    "docker": frozenset({"invalid_docker_settings"}),
}


# What `permissions.entries` says of an entry that can never match a call.
_UNMATCHABLE = frozenset(
    {"invalid_pattern", "unknown_tool", "matches_nothing", "never_matches", "unknown_program"}
)


def _never_matching(diagnostics: Sequence[Diagnostic], entries: set[str]) -> list[Diagnostic]:
    """What `diagnostics` say of the project file's allowlist `entries` that can never match
    a call (its deny rules are checked whatever the trust)."""
    return [
        d for d in diagnostics if d.file is None and d.code in _UNMATCHABLE and d.key in entries
    ]


def _marked(widening: Widening, diagnostics: Sequence[Diagnostic]) -> Widening:
    codes = _NEVER.get(widening.section, frozenset())
    for d in diagnostics:
        if d.file is None and d.code in codes and d.key in (widening.key, widening.section):
            return dataclasses.replace(widening, never=f"{d.code}: {d.message}")
    return widening


def _layered(
    root: Path,
    tools: Mapping[str, ToolInfo],
    capabilities: CapabilitySet,
    user: ProjectFile,
    pf: ProjectFile,
    diagnostics: list[Diagnostic],
) -> ProjectConfig:
    """`pf` (as far as it is obeyed) over the user's file, checked against the tools."""
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
    granted = {entry.pattern for entry in pf.allowlist if entry.grants}
    for entry in pf.allowlist:
        where = {"line": entry.line, "column": entry.column}
        before = len(diagnostics)
        pattern = checked_pattern(entry.pattern, tools, diagnostics, where, deny=False)
        if pattern is None or not entry.grants:
            continue
        sibling = _sibling_grant(entry.pattern, environment_of)
        if sibling is not None and sibling not in granted:
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "other_tool",
                    f"{entry.pattern} grants the run_container tool only; commands the agent "
                    f"runs with run_command, bound to @docker here, are keyed {sibling}, which "
                    "nothing grants: add that entry for them to run without asking",
                    key=entry.pattern,
                    **where,
                )
            )
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
        if tools[pattern.tool].key_style is KeyStyle.PATH and only_protected(pattern):
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "protected_path",
                    f"{entry.pattern} covers only protected paths (codecoder.json, .codecoder/, "
                    ".git/, the agents' settings), which are never granted beyond Once: the "
                    "entry grants nothing",
                    key=entry.pattern,
                    **where,
                )
            )
        if pattern.tool == RUN_CAPABILITY and not capability_entry_holds(
            root, entry, pattern, capabilities, diagnostics
        ):
            continue
        # Kept even when it violates the ceiling: the engine reports it at every lookup it meets.
        grants.append(Grant(pattern, entry.line, entry.column, entry.digest))
        # A rule in effect only if it grants something (`codecoder check` lists the rules).
        if not any(d.code in _NEVER["allowlist"] for d in diagnostics[before:]):
            rules.append(Rule("allow", entry.pattern, str(pf.path), entry.line))

    grants += _user_grants(user, tools, environment_of, diagnostics, rules)

    denies: list[Grant] = []
    unreadable = [
        next(d for d in layer.diagnostics if d.severity == "error")
        for layer, _ in layers
        if not layer.usable
    ]
    for layer, origin in layers:
        for deny in layer.deny:
            where = {"line": deny.line, "column": deny.column}
            if layer is user:
                where["file"] = origin
            before = len(diagnostics)
            pattern = checked_pattern(deny.pattern, tools, diagnostics, where, deny=True)
            # A deny rule that cannot be read as one (or can never match) is a rule lost.
            unreadable += [d for d in diagnostics[before:] if d.severity == "error"]
            if pattern is not None:
                file = origin if layer is user else None  # None: the project's codecoder.json
                denies.append(Grant(pattern, deny.line, deny.column, file=file))
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
        allowlist=ProjectAllowlist.build(
            grants if pf.usable else [],
            denies,
            style_of,
            unreadable_reason(root / PROJECT_FILE, tuple(unreadable)),
        ),
        bindings=bindings,
        limits=limits,
        session_ttl=top("session_ttl", NEVER),
        web=WebSettings.layered(web_sections),
        agent=AgentSettings.layered(tuple(layer.agent for layer, _ in layers)),
        read_roots=_read_roots(root, layers, user, diagnostics, rules),
        docker=_docker_settings(layers, user, diagnostics),
        bwrap=_bwrap_settings(layers, user, diagnostics, rules),
        diagnostics=tuple(
            sorted(diagnostics, key=lambda d: (d.file or "", d.line or 0, d.column or 0))
        ),
        rules=tuple(rules),
        unreadable=tuple(unreadable),
    )


def _user_grants(
    user: ProjectFile,
    tools: Mapping[str, ToolInfo],
    environment_of: Callable[[str], EnvironmentTag],
    diagnostics: list[Diagnostic],
    rules: list[Rule],
) -> list[Grant]:
    """The grants of the user's own file, for every project: each holds where its tool runs
    contained here (a project that binds the tool to @shell gets a warning, and the entry
    grants nothing there: @shell's ceiling); a capability's is refused (one project's code)."""
    if not user.exists or not user.usable:
        return []
    origin = str(user.path)
    found: list[Grant] = []
    for entry in user.allowlist:
        where: dict[str, Any] = {"line": entry.line, "column": entry.column, "file": origin}
        pattern = checked_pattern(entry.pattern, tools, diagnostics, where, deny=False)
        if pattern is None or not entry.grants:
            continue
        if pattern.tool == RUN_CAPABILITY:
            diagnostics.append(
                Diagnostic(
                    "error",
                    "capability_in_user_file",
                    f"{entry.pattern}: a capability is one project's code; grant it in that "
                    "project's codecoder.json",
                    key=entry.pattern,
                    **where,
                )
            )
            continue
        environment = environment_of(pattern.tool)
        if not environment.allows(Scope.PROJECT):
            diagnostics.append(
                Diagnostic(
                    "warning",
                    "user_grant_not_here",
                    f"{entry.pattern} (your file, for every project) grants nothing in this "
                    f"project: {environment.refusal(entry.pattern)}",
                    key=entry.pattern,
                    **where,
                )
            )
            continue
        found.append(Grant(pattern, entry.line, entry.column, file=origin))
        rules.append(Rule("allow", entry.pattern, origin, entry.line))
    return found


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


def _sibling_grant(pattern: str, environment_of: Callable[[str], EnvironmentTag]) -> str | None:
    """The run_command entry a run_container grant was likely meant as: where run_command is
    bound to @docker, both run the same commands in the same sandbox, but each tool's grants
    are its own (`run_container:npm:test` never lets `run_command:npm:test` run)."""
    tool, _, rest = pattern.partition(":")
    if tool != "run_container" or not rest:
        return None
    if environment_of("run_command") is not EnvironmentTag.DOCKER:
        return None
    return f"run_command:{rest}"


def _bwrap_settings(
    layers: list[tuple[ProjectFile, str]],
    user: ProjectFile,
    diagnostics: list[Diagnostic],
    rules: list[Rule],
) -> BwrapSettings:
    """Both files' `bwrap` entries; a home entry that would show a credential (or is not under
    the home) is an error and left out, whatever the trust."""
    home = Path.home()
    entries: list[str] = []
    names: list[str] = []
    for layer, origin in layers:
        file = origin if layer is user else None
        for i, entry in enumerate(layer.bwrap.home):
            line, column = layer.position_of(f"/bwrap/home/{i}")
            problem = home_entry_problem(entry, home)
            if problem is not None:
                diagnostics.append(
                    Diagnostic(
                        "error",
                        "bwrap_home_forbidden",
                        f"bwrap.home[{i}]: {problem}; it is not shown",
                        key=f"bwrap.home[{i}]",
                        line=line,
                        column=column,
                        file=file,
                    )
                )
                continue
            entries.append(entry)
            rules.append(Rule("bwrap.home", entry, origin, line))
        for i, name in enumerate(layer.bwrap.env):
            try:
                BwrapSettings(env=(name,))
            except ValueError as exc:
                line, column = layer.position_of(f"/bwrap/env/{i}")
                diagnostics.append(
                    Diagnostic(
                        "error",
                        "invalid_bwrap_settings",
                        f"bwrap.env[{i}]: {exc}",
                        key=f"bwrap.env[{i}]",
                        line=line,
                        column=column,
                        file=file,
                    )
                )
                continue
            names.append(name)
            rules.append(Rule("bwrap.env", name, origin, layer.position_of(f"/bwrap/env/{i}")[0]))
    return BwrapSettings(tuple(dict.fromkeys(entries)), tuple(dict.fromkeys(names)))
