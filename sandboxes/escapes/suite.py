"""`codecoder audit`: the sandbox escape-attempt suite, run against a project's own configuration.

The corpus is data, one JSON file per layer in `sandboxes/escapes/` (its README describes the
fields); this module carries the attempts out and reports what it *observed* for each:

    keying            run_command through a session holding a grant for an innocent command
                      (checked first to really allow it): the attack must not be allowed, and
                      nothing may reach the environment (a recorder that runs nothing)
    permission-files  hand-edited entries above their ceiling, protected paths answered beyond
                      Once, sandboxed tools writing codecoder.json, .codecoder/ or .git/
    wasm              probe.wasm (sandboxes/escapes/probe.c) attacking WASI from inside, a
                      symlink swapped during a call, a tampered compiled-module cache, file tools,
                      modules built to exhaust memory, tables or the compiler, FIFOs, the disk,
                      protected paths planted at any depth
    docker            scripts attacking the container from inside: network (a canary served on
                      the host), filesystems, privileges, resources, time, the agent that runs
                      them, processes outliving their call, state left for another grant

Each attempt ends in one of four states:

    blocked          the attack failed; `how` is the defence that was seen stopping it
    escaped          the attack worked; `how` says what was seen
    not-run          the attempt could not be carried out (no Docker engine, an error the attack
                     did not expect): it proves nothing, so it fails the audit like an escape
    not-applicable   the configuration offers nothing to attack (a tool that does not exist, a
                     feature not built yet); shown with the reason, never counted as blocked

Nothing is attacked in the project itself: the runner builds a scratch workspace in a private
temporary directory holding a copy of the project's codecoder.json, the protected paths and
some bait (a secret outside the workspace, symlinks to it), owned like the project so the
sandbox runs as the same user. The environments are the ones the runtime would start for that
configuration (its bindings, limits and Docker settings). `AuditOptions` replaces parts of the
configuration, which is how the tests show that a weakened sandbox is reported as escaped.
While the audit runs, the state directory (XDG_STATE_HOME) is one of its own, so that what the
sandboxes plant is quarantined there and goes with the scratch workspace.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import functools
import importlib.resources
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, TypeAlias

import wasmtime
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.environments.docker.environment import DockerEnvironment
from codecoder.environments.docker.settings import DockerSettings
from codecoder.environments.mock import MockEnvironment
from codecoder.environments.wasm.cache import default_cache_dir
from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.limits import DEFAULT_MEMORY_LIMIT
from codecoder.environments.wasm.request import WasmRequest, WasmResult
from codecoder.runtime.config.project import PROJECT_FILE
from codecoder.runtime.config.settings import ShellSettings
from codecoder.runtime.dispatcher import CallOutcome, validate_arguments
from codecoder.runtime.kernel.ceiling import EnvironmentTag, Scope
from codecoder.runtime.kernel.decision import Answer, Source
from codecoder.runtime.kernel.display import SPACE_RUN, visible
from codecoder.runtime.kernel.errors import (
    CodecoderError,
    ExecutionFailed,
    ExecutionTimeout,
    OutOfFuel,
    OutOfMemory,
    SandboxUnavailable,
)
from codecoder.runtime.permissions.commandkey import key_command
from codecoder.runtime.permissions.keys import CallSite, PermissionKey
from codecoder.runtime.permissions.prompt import AskRequest, describe, non_interactive, render
from codecoder.runtime.session import Runtime, Session
from codecoder.runtime.tools.base import Tool
from codecoder.runtime.tools.files import run_wasm_preopens

__all__ = [
    "LAYERS",
    "Attempt",
    "AttemptResult",
    "AuditOptions",
    "AuditReport",
    "Layer",
    "Status",
    "load_corpus",
    "run_audit",
]

Layer: TypeAlias = Literal["keying", "permission-files", "wasm", "docker"]
# The order they run in: the cheap layers first, so a broken keyer shows up in a second.
LAYERS: Final[tuple[Layer, ...]] = ("keying", "permission-files", "wasm", "docker")

PROTECTED: Final = (PROJECT_FILE, ".codecoder", ".git")
# How much later than its timeout a call may end before it counts as having outlived it.
OVERRUN_GRACE: Final = 2.0
ErrorName = Literal[
    "ExecutionTimeout", "OutOfMemory", "OutOfFuel", "ExecutionFailed", "SandboxUnavailable"
]
_ERRORS: Final = (ExecutionTimeout, OutOfMemory, OutOfFuel, ExecutionFailed, SandboxUnavailable)


class Status(enum.StrEnum):
    BLOCKED = "blocked"
    ESCAPED = "escaped"
    NOT_RUN = "not-run"
    NOT_APPLICABLE = "not-applicable"

    @property
    def label(self) -> str:
        """How the table shows it: an escape shouts, a gap is plain."""
        return {"blocked": "blocked", "escaped": "ESCAPED", "not-run": "NOT RUN"}.get(
            self.value, "n/a"
        )


# --- the corpus ----------------------------------------------------------------------------


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z-]+\.[a-z0-9-]+$")
    description: str = Field(min_length=1)
    defence: str = Field(min_length=1)


class KeyingEntry(_Entry):
    command: str
    innocent: str
    wildcard: bool = True
    program_wide: bool = True
    deny: tuple[str, ...] = ()
    expect: Literal["refused", "argv"] = "refused"
    argv: tuple[str, ...] | None = None
    display: bool = False


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class FileChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    content: str


class PermissionFileEntry(_Entry):
    kind: Literal[
        "ceiling-entry",
        "scope-entry",
        "malformed",
        "protected-answer",
        "protected-key",
        "sandboxed-write",
        "self-grant",
        "capability-create",
        "capability-tamper",
        "cloned-config",
        "nested-git",
        "git-symlink",
        "path-hijack",
        "link-to-protected",
        "bare-repository",
        "read-root-swap",
    ]
    call: ToolCall
    entry: dict[str, str] = Field(default_factory=dict)
    text: str | None = None
    answer: Literal["once", "session", "project"] | None = None
    grants: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    script: tuple[str, ...] = ()
    script_file: str | None = None
    follow_up: tuple[ToolCall, ...] = ()
    tamper: FileChange | None = None
    document: dict[str, Any] | None = None
    expect_error: str | None = None
    links: dict[str, str] = Field(default_factory=dict)


DockerCheck = Literal["token", "completed", "overran", "no-pids-limit", "after-token"]


class DockerVariant(BaseModel):
    """How an attempt is carried out under another engine runtime (`under` in the corpus),
    where the same script would test something else there; `why` says what differs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    why: str = Field(min_length=1)
    script: str | tuple[str, ...] | None = None
    defence: str | None = None
    blocked_by: tuple[ErrorName, ...] | None = None
    not_applicable: bool = False


class DockerEntry(_Entry):
    script: str | tuple[str, ...]
    writable: bool = False
    timeout: float = Field(default=30.0, gt=0)
    escaped_if: tuple[DockerCheck, ...] = ("token",)
    blocked_by: tuple[ErrorName, ...] = ()
    watch: tuple[str, ...] = ()
    after: str | None = None
    expect_output: str | None = None
    under: tuple[tuple[str, DockerVariant], ...] = ()

    @field_validator("under", mode="before")
    @classmethod
    def _runtimes(cls, value: Any) -> Any:
        return tuple(value.items()) if isinstance(value, dict) else value

    def variant(self, runtime: str | None) -> DockerVariant | None:
        return dict(self.under).get(runtime or "")

    def under_runtime(self, runtime: str | None) -> DockerEntry:
        """This attempt as carried out under `runtime` (itself where nothing differs)."""
        variant = self.variant(runtime)
        if variant is None:
            return self
        changes: dict[str, Any] = {}
        if variant.script is not None:
            changes["script"] = variant.script
        if variant.defence is not None:
            changes["defence"] = variant.defence
        if variant.blocked_by is not None:
            changes["blocked_by"] = variant.blocked_by
        return self.model_copy(update=changes)


WasmCheck = Literal["secret", "succeeded", "completed", "overran", "uncapped"]


class WasmEntry(_Entry):
    kind: Literal["probe", "module", "slow-compile", "race", "cache", "tool"]
    argv: tuple[str, ...] = ()
    runs: tuple[tuple[str, ...], ...] = ()
    writable: bool = False
    timeout: float | None = Field(default=None, gt=0)
    escaped_if: tuple[WasmCheck, ...] = ()
    blocked_by: tuple[ErrorName, ...] = ()
    stdout_matches: str | None = None
    expect_exit: int | None = None
    wat: tuple[str, ...] = ()
    mode: Literal["read", "write", "corrupt", "foreign"] | None = None
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    fifo: str | None = None
    branches: int = Field(default=60_000, gt=0)


AnyEntry: TypeAlias = KeyingEntry | PermissionFileEntry | DockerEntry | WasmEntry
_ENTRY_TYPES: Final[dict[Layer, type[AnyEntry]]] = {
    "keying": KeyingEntry,
    "permission-files": PermissionFileEntry,
    "wasm": WasmEntry,
    "docker": DockerEntry,
}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One escape attempt of the corpus: what it tries, the defence expected, what to run.

    The docker layer runs under each engine runtime available (runc, runsc): `runtime` names
    the one an attempt ran under when it is not the project's own, and is part of its id
    (`docker.mknod@runsc`)."""

    layer: Layer
    entry: AnyEntry
    runtime: str | None = None

    @property
    def id(self) -> str:
        return self.entry.id + (f"@{self.runtime}" if self.runtime else "")

    @property
    def description(self) -> str:
        return self.entry.description

    @property
    def defence(self) -> str:
        return self.entry.defence


def _corpus_file(layer: Layer) -> str:
    return (
        importlib.resources.files("codecoder.sandboxes")
        .joinpath(f"escapes/{layer}.json")
        .read_text()
    )


def load_corpus(layers: Iterable[Layer] = LAYERS) -> list[Attempt]:
    """The attempts of `layers`, in corpus order. A malformed file raises ValueError naming it."""
    attempts: list[Attempt] = []
    for layer in layers:
        try:
            document = json.loads(_corpus_file(layer))
            if document.get("layer") != layer:
                raise ValueError(f"it says it is layer {document.get('layer')!r}")
            for raw in document["attempts"]:
                entry = _ENTRY_TYPES[layer].model_validate(raw)
                if not entry.id.startswith(f"{layer}."):
                    raise ValueError(f"{entry.id}: ids of this layer start with {layer}.")
                attempts.append(Attempt(layer, entry))
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise ValueError(f"sandboxes/escapes/{layer}.json: {exc}") from exc
    ids = [a.id for a in attempts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate attempt ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return attempts


# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptResult:
    attempt: Attempt
    status: Status
    how: str  # the defence observed, what escaped, or why it did not run
    duration: float

    def to_json(self) -> dict[str, Any]:
        attempt = self.attempt
        entry = attempt.entry
        defence = (
            entry.under_runtime(attempt.runtime).defence
            if isinstance(entry, DockerEntry)
            else attempt.defence
        )
        found = {
            "id": attempt.id,
            "layer": attempt.layer,
            "description": attempt.description,
            "defence": defence,
            "status": self.status.value,
            "how": self.how,
            "duration_ms": round(self.duration * 1000, 1),
        }
        if attempt.runtime is not None:
            found["runtime"] = attempt.runtime
        return found


@dataclass(frozen=True, slots=True)
class AuditReport:
    project: Path
    layers: tuple[Layer, ...]
    results: tuple[AttemptResult, ...]
    duration: float

    @property
    def ok(self) -> bool:
        """No attempt escaped and every one could be run (not-applicable ones are explained)."""
        return not any(r.status in (Status.ESCAPED, Status.NOT_RUN) for r in self.results)

    def counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for layer in self.layers:
            row = {status.value: 0 for status in Status}
            for result in self.results:
                if result.attempt.layer == layer:
                    row[result.status.value] += 1
            row["total"] = sum(row.values())
            counts[layer] = row
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "project": str(self.project),
            "duration_s": round(self.duration, 2),
            "layers": self.counts(),
            "attempts": [result.to_json() for result in self.results],
        }

    def to_junit(self) -> str:
        """JUnit XML: a testsuite per layer, a testcase per attempt; an escape is a failure, an
        attempt that could not run an error, a not-applicable one skipped."""
        counts = self.counts()
        root = ElementTree.Element(
            "testsuites",
            name="codecoder audit",
            tests=str(len(self.results)),
            failures=str(sum(c[Status.ESCAPED.value] for c in counts.values())),
            errors=str(sum(c[Status.NOT_RUN.value] for c in counts.values())),
            skipped=str(sum(c[Status.NOT_APPLICABLE.value] for c in counts.values())),
            time=f"{self.duration:.3f}",
        )
        for layer in self.layers:
            results = [r for r in self.results if r.attempt.layer == layer]
            suite = ElementTree.SubElement(
                root,
                "testsuite",
                name=layer,
                tests=str(len(results)),
                failures=str(counts[layer][Status.ESCAPED.value]),
                errors=str(counts[layer][Status.NOT_RUN.value]),
                skipped=str(counts[layer][Status.NOT_APPLICABLE.value]),
                time=f"{sum(r.duration for r in results):.3f}",
            )
            for result in results:
                case = ElementTree.SubElement(
                    suite,
                    "testcase",
                    classname=f"codecoder.audit.{layer}",
                    name=result.attempt.id,
                    time=f"{result.duration:.3f}",
                )
                how = _xml_text(result.how)
                if result.status is Status.ESCAPED:
                    failure = ElementTree.SubElement(case, "failure", type="escaped", message=how)
                    failure.text = _xml_text(f"{result.attempt.description}\n{how}")
                elif result.status is Status.NOT_RUN:
                    ElementTree.SubElement(case, "error", type="not-run", message=how)
                elif result.status is Status.NOT_APPLICABLE:
                    ElementTree.SubElement(case, "skipped", message=how)
                else:
                    ElementTree.SubElement(case, "system-out").text = how
        ElementTree.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(
            root, encoding="unicode"
        )

    def summary(self) -> list[str]:
        """A line per layer with its counts, then the verdict and the time it took."""
        lines = []
        for layer, row in self.counts().items():
            parts = [f"{row[s.value]} {s.value}" for s in Status if row[s.value]]
            lines.append(f"{layer}: {row['total']} attempts, " + ", ".join(parts or ["none"]))
        verdict = "every attempt was blocked" if self.ok else "FAILED"
        lines.append(f"{len(self.results)} attempts in {self.duration:.1f}s: {verdict}")
        return lines


def _xml_text(text: str) -> str:
    # XML 1.0 cannot carry most control characters at all, escaped or not.
    return "\n".join(visible(line) for line in text.split("\n"))


_HOW_WIDTH: Final = 110


def table_header() -> str:
    return f"{'RESULT':<8} {'LAYER':<16} {'ATTEMPT':<44} HOW"


def table_row(result: AttemptResult) -> str:
    how = visible(result.how)
    if len(how) > _HOW_WIDTH:
        how = how[: _HOW_WIDTH - 1] + "…"
    return f"{result.status.label:<8} {result.attempt.layer:<16} {result.attempt.id:<44} {how}"


# --- options -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """Replacements for parts of the project's configuration; None keeps the project's own.

    They exist to show that the suite can fail: a weakened Docker configuration, a client that
    changes what containers are created with, a tool with a broken keyer.
    """

    tools: Mapping[str, Tool[Any]] | None = None
    docker_settings: DockerSettings | None = None
    docker_client_factory: Callable[[], Any] | None = None
    wasm_cache_dir: Path | None = None
    # The engine runtimes the docker layer attacks besides the project's own (None: every one
    # the engine offers that codecoder knows).
    docker_runtimes: Collection[str] | None = None


# --- outcomes of one attempt ---------------------------------------------------------------


class _Outcome(Exception):
    status: Status

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class _Escaped(_Outcome):
    status = Status.ESCAPED


class _NotRun(_Outcome):
    status = Status.NOT_RUN


class _NotApplicable(_Outcome):
    status = Status.NOT_APPLICABLE


def _escaped(how: str) -> NoReturn:
    raise _Escaped(how)


# --- the entry point -----------------------------------------------------------------------


def run_audit(
    project: str | os.PathLike[str],
    layers: Collection[Layer] | None = None,
    *,
    options: AuditOptions | None = None,
    attempts: Collection[str] | None = None,
    on_result: Callable[[AttemptResult], None] | None = None,
) -> AuditReport:
    """Run the corpus of `layers` (all by default; `attempts` narrows it to those ids) against
    the configuration of `project`, calling `on_result` as each attempt ends."""
    started = time.monotonic()
    selected = tuple(layer for layer in LAYERS if layers is None or layer in layers)
    unknown = set(layers or ()) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown layers {sorted(unknown)}; the layers are {', '.join(LAYERS)}")
    # An id may name a docker attempt under one runtime only (`docker.mknod@runsc`).
    wanted = None if attempts is None else {a.partition("@")[0] for a in attempts}
    corpus = [a for a in load_corpus(selected) if wanted is None or a.id in wanted]
    missing = (wanted or set()) - {a.id for a in corpus}
    if missing:
        raise ValueError(f"no attempts {sorted(missing)} in the layers {', '.join(selected)}")
    results: list[AttemptResult] = []
    with _Audit(Path(project), options or AuditOptions()) as audit:
        for layer in selected:
            for runner in audit.runners(layer):
                for entry in (a for a in corpus if a.layer == layer):
                    attempt = Attempt(layer, entry.entry, runner.runtime)
                    if attempts is not None and not {attempt.id, entry.id} & set(attempts):
                        continue
                    result = audit.attempt(runner, attempt)
                    results.append(result)
                    if on_result is not None:
                        on_result(result)
    return AuditReport(audit.project, selected, tuple(results), time.monotonic() - started)


class _LayerRunner:
    """Carries out the attempts of one layer; `blocker` set is the outcome of every one of them
    (the layer's sandbox cannot be started, the tool it attacks does not exist). `runtime` is
    the engine runtime a docker runner attacks when it is not the project's own."""

    blocker: _Outcome | None = None
    runtime: str | None = None

    def run(self, attempt: Attempt) -> str:
        raise NotImplementedError


class _Audit:
    """What the layers share: the project's configuration, the scratch workspace, environments."""

    def __init__(self, project: Path, options: AuditOptions) -> None:
        self.project = project.resolve()
        self.options = options
        # The project itself is only read: its configuration, as the runtime sees it.
        self.project_runtime = Runtime(
            self.project, asker=non_interactive, audit_log=None, tools=options.tools
        )
        self.config = self.project_runtime.config
        self.tools = self.project_runtime.tools
        # The scratch copies are trusted as far as the project's file is: the attempts run
        # against what the runtime obeys for this project.
        self.trusted = self.config.trust.obeyed
        self.token = f"codecoder-audit-{secrets.token_hex(8)}"
        self.root = Path(tempfile.mkdtemp(prefix="codecoder-audit-"))
        # What the sandboxes plant is quarantined into the state directory: the audit's own.
        self._state_home = os.environ.get("XDG_STATE_HOME")
        os.environ["XDG_STATE_HOME"] = str(self.root / "state")
        self._workspace: _Workspace | None = None
        self._sandbox_runtime: Runtime | None = None
        self._environments: dict[EnvironmentTag, Environment[Any, Any]] = {}
        self._unavailable: dict[EnvironmentTag, str] = {}
        self._owned: list[Environment[Any, Any]] = []
        self._canary: _Canary | None = None

    def __enter__(self) -> _Audit:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._canary is not None:
            self._canary.close()
        for env in self._owned:
            env.close()
        if self._sandbox_runtime is not None:
            self._sandbox_runtime.close()
        if self._state_home is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = self._state_home
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the project's configuration ---------------------------------------------------------

    def binding(self, tool: str) -> EnvironmentTag:
        return self.project_runtime.environment_of(tool)

    def document(
        self, allow: Mapping[str, str] | Iterable[str] = (), deny: Iterable[str] = ()
    ) -> str:
        """The project's codecoder.json with more entries: `allow` patterns (or pattern -> scope)
        and `deny` patterns. A project whose file has errors cannot be extended meaningfully."""
        if not self.config.file.usable:
            errors = "; ".join(
                f"line {d.line}: {d.message}" if d.line else d.message
                for d in self.config.diagnostics
                if d.severity == "error"
            )
            raise _NotRun(f"the project's codecoder.json is not usable ({errors}); fix it first")
        path = self.project / PROJECT_FILE
        document: dict[str, Any] = json.loads(path.read_bytes()) if path.exists() else {}
        document = copy.deepcopy(document)
        scopes = dict(allow) if isinstance(allow, Mapping) else dict.fromkeys(allow, _PROJECT)
        if scopes:
            document.setdefault("allowlist", {}).update(scopes)
        denies = list(deny)
        if denies:
            document.setdefault("deny", []).extend(denies)
        return json.dumps(document, indent=2) + "\n"

    def key(self, call: ToolCall) -> PermissionKey | None:
        """The permission key of `call`, as the tool itself computes it for this project."""
        tool = self.tools[call.tool]
        site = CallSite(self.project, self.binding(call.tool))
        key: PermissionKey | None = tool.permission_in(
            validate_arguments(tool, call.args), site
        ).key
        return key

    def require_tool(self, name: str) -> None:
        if name not in self.tools:
            raise _NotApplicable(f"{name} is not a tool of this runtime")

    # -- the scratch workspace and its environments ------------------------------------------

    @property
    def workspace(self) -> _Workspace:
        if self._workspace is None:
            self._workspace = _Workspace(self.root, self.project, self.token)
        return self._workspace

    def scratch_dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def fresh_dir(self, name: str) -> Path:
        """An empty scratch directory: whatever an earlier attempt left there is removed."""
        path = self.root / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        return path

    @property
    def sandbox_runtime(self) -> Runtime:
        """A runtime on the scratch workspace, starting environments as it would for the project."""
        if self._sandbox_runtime is None:
            self._sandbox_runtime = Runtime(
                self.workspace.path,
                asker=non_interactive,
                audit_log=None,
                tools=self.tools,
                trusted=self.trusted,
            )
        return self._sandbox_runtime

    def environment(self, tag: EnvironmentTag) -> Environment[Any, Any]:
        """The shared environment for `tag` (started once); `_NotRun` when it cannot be."""
        if tag in self._unavailable:
            raise _NotRun(self._unavailable[tag])
        env = self._environments.get(tag)
        if env is not None:
            return env
        try:
            env = self._start(tag)
        except SandboxUnavailable as exc:
            self._unavailable[tag] = f"no {tag.value} sandbox: {exc}"
            raise _NotRun(self._unavailable[tag]) from exc
        self._environments[tag] = env
        return env

    def _start(self, tag: EnvironmentTag) -> Environment[Any, Any]:
        options = self.options
        if tag is EnvironmentTag.DOCKER and (
            options.docker_settings is not None or options.docker_client_factory is not None
        ):
            docker = DockerEnvironment(
                self.workspace.path,
                options.docker_settings or self.config.docker,
                client_factory=options.docker_client_factory,
            )
            self._owned.append(docker)
        elif tag is EnvironmentTag.WASM and options.wasm_cache_dir is not None:
            wasm = WasmEnvironment(options.wasm_cache_dir)
            self._owned.append(wasm)
            return wasm
        else:
            env = self.sandbox_runtime.environment(tag)
            if not isinstance(env, DockerEnvironment):
                return env
            docker = env
        docker.start()  # fails here, once, when there is no engine or image
        return docker

    @property
    def limits(self) -> ShellSettings:
        return self.config.limits

    @property
    def canary(self) -> _Canary:
        if self._canary is None:
            self._canary = _Canary(self.token)
        return self._canary

    # -- running ------------------------------------------------------------------------------

    def runners(self, layer: Layer) -> list[_LayerRunner]:
        """The runners of `layer`: one, or for docker one per engine runtime available (the
        project's own first), so that every sandbox the engine can give is attacked."""
        first = self.layer(layer)
        if not isinstance(first, _DockerLayer) or first.blocker is not None:
            return [first]
        runners: list[_LayerRunner] = [first]
        for runtime in first.other_runtimes():
            env = DockerEnvironment(
                self.workspace.path,
                dataclasses.replace(first.env.settings, runtime=runtime),
                client_factory=self.options.docker_client_factory,
            )
            self._owned.append(env)
            runners.append(_DockerLayer(self, env, runtime))
        return runners

    def layer(self, layer: Layer) -> _LayerRunner:
        runners: dict[Layer, Callable[[_Audit], _LayerRunner]] = {
            "keying": _KeyingLayer,
            "permission-files": _PermissionFilesLayer,
            "wasm": _WasmLayer,
            "docker": _DockerLayer,
        }
        return runners[layer](self)

    def attempt(self, runner: _LayerRunner, attempt: Attempt) -> AttemptResult:
        started = time.monotonic()
        try:
            if runner.blocker is not None:
                raise runner.blocker
            try:
                status, how = Status.BLOCKED, runner.run(attempt)
            except _NotRun as first:
                # The sandbox stopped under the attempt (seen now and then under Debian's
                # gVisor): nothing came out of it, but nothing was shown either, so the attempt
                # is made once more in a fresh sandbox, and reported as not run if that stops too.
                if _SANDBOX_STOPPED not in first.how:
                    raise
                if self._workspace is not None:
                    self._workspace.restore()
                status, how = Status.BLOCKED, runner.run(attempt)
                how += f" (made twice: the first sandbox stopped: {_last_line(first.how)})"
        except _Outcome as outcome:
            status, how = outcome.status, outcome.how
        except CodecoderError as exc:
            status, how = Status.NOT_RUN, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # the audit's own failure must be reported, never a pass
            status, how = Status.NOT_RUN, f"the audit failed: {type(exc).__name__}: {exc}"
        finally:
            if self._workspace is not None:
                self._workspace.restore()
        return AttemptResult(attempt, status, how, time.monotonic() - started)


_PROJECT: Final = Scope.PROJECT.label
_SANDBOX_STOPPED: Final = "the sandbox container stopped"  # environments.docker.environment's words


# --- recorders and askers ------------------------------------------------------------------


class _Asker:
    """Answers every prompt with one answer (Deny: the non-interactive mode) and keeps them."""

    def __init__(self, answer: Answer = Answer.DENY) -> None:
        self.answer = answer
        self.requests: list[AskRequest] = []

    def __call__(self, request: AskRequest) -> Answer:
        self.requests.append(request)
        return self.answer


def _recorded(request: Any) -> CommandResult:
    return CommandResult(exit_code=0, stdout="", stderr="", duration=0.0)


def _recorders() -> tuple[MockEnvironment, dict[EnvironmentTag, Environment[Any, Any]]]:
    """One environment for every tag that records what it is given and runs nothing: a call
    that should have been refused must not run anything, even when the audit finds it allowed."""
    recorder = MockEnvironment(_recorded)
    return recorder, dict.fromkeys(EnvironmentTag, recorder)


def _allowed(outcome: CallOutcome) -> bool:
    return outcome.decision is not None and outcome.decision.allowed


def _refusal(outcome: CallOutcome, asker: _Asker | None = None) -> str:
    """How a call that was not allowed was stopped, in the words of its decision."""
    decision = outcome.decision
    if decision is None:
        return f"{type(outcome.error).__name__}: {outcome.error}"
    if decision.source is Source.DENY:
        return f"refused by the deny rule {decision.matched}"
    asked = asker is not None and bool(asker.requests)
    text = f"{decision.key}: {decision.reason}"
    if asked:
        text = f"asked for {text}"
    if decision.violations:
        text += f"; {decision.violations[-1]}"
    return text


def _grant_source(outcome: CallOutcome) -> str:
    decision = outcome.decision
    assert decision is not None
    return f"allowed ({decision.source.value}: {decision.matched or decision.reason})"


# --- keying --------------------------------------------------------------------------------


class _KeyingLayer(_LayerRunner):
    def __init__(self, audit: _Audit) -> None:
        self.audit = audit
        self.tag = audit.binding("run_command") if "run_command" in audit.tools else None
        if self.tag is None:
            self.blocker = _NotApplicable("run_command is not a tool of this runtime")
        self.directory = audit.scratch_dir("keying")

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, KeyingEntry) and self.tag is not None
        audit = self.audit
        innocent = audit.key(ToolCall(tool="run_command", args={"command": entry.innocent}))
        assert innocent is not None
        # The widest grants a human can give for the innocent command: each level the prompt
        # offers (its subcommand, then its whole program), the program's wildcard, and where
        # the entry says so every simple command.
        levels = [level.entry for level in innocent.grant_levels]
        program = f"run_command:{innocent.path[0]}" if innocent.path else innocent.raw
        grants = list(dict.fromkeys([*levels, program, f"{program}:*"]))
        if not entry.program_wide:
            levels = grants = levels[:1]
        grants += ["run_command:*"] if entry.wildcard else []
        # Project grants exist only where the binding admits them; session grants always can,
        # for the entries the prompt offers.
        project_scope = self.tag.allows(Scope.PROJECT)
        text = audit.document(allow=grants if project_scope else (), deny=entry.deny)
        (self.directory / PROJECT_FILE).write_text(text)
        recorder, environments = _recorders()
        asker = _Asker()
        granted = ", ".join(grants if project_scope else levels)
        with (
            Runtime(
                self.directory,
                asker=asker,
                environments=environments,
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            for level in levels:
                session.allowlist.grant(innocent, self.tag, entry=level)
            control = session.call("run_command", {"command": entry.innocent})
            if not _allowed(control) or not recorder.requests:
                raise _NotRun(
                    f"the grant for {entry.innocent!r} did not allow it "
                    f"({_refusal(control, asker)}), so this attempt would prove nothing"
                )
            recorder.requests.clear()
            outcome = session.call("run_command", {"command": entry.command})
        ran: list[CommandRequest] = list(recorder.requests)
        if entry.expect == "argv":
            return self._ran_as_argv(entry, outcome, ran)
        if _allowed(outcome) or ran:
            _escaped(
                f"{_grant_source(outcome) if _allowed(outcome) else 'not allowed'}, and "
                f"{self._what_ran(ran)} was handed to {self.tag.value}"
            )
        how = self._refused(entry, outcome, asker, granted)
        if entry.display:
            how += "; " + self._display(asker)
        return how

    def _refused(
        self, entry: KeyingEntry, outcome: CallOutcome, asker: _Asker, granted: str
    ) -> str:
        decision = outcome.decision
        if decision is None:
            return f"{type(outcome.error).__name__}: {outcome.error}; nothing ran"
        if decision.source is Source.DENY:
            return f"refused by the deny rule {decision.matched}; nothing ran"
        asked = "the prompt refused it" if asker.requests else decision.reason
        keyed = key_command(entry.command)
        if decision.key != keyed.permission_key("run_command").raw:
            why = ""  # keyed by another keyer than the runtime's own: say only what it did
        elif keyed.compound:
            why = f" ({keyed.reason})"
        elif keyed.protected:
            return (
                f"keyed {decision.key}, but it names a protected path, which no grant covers "
                f"(only Once); {asked}; nothing ran"
            )
        else:
            why = ""
        return f"keyed {decision.key}{why}, not covered by {granted}; {asked}; nothing ran"

    def _ran_as_argv(
        self, entry: KeyingEntry, outcome: CallOutcome, ran: list[CommandRequest]
    ) -> str:
        if not ran:
            return f"not allowed ({_refusal(outcome)}); nothing ran"
        argv = ran[0].argv
        expected = entry.argv or ()
        # The program as found on PATH when the call was keyed (`/usr/bin/git` for `git`).
        if (
            argv is None
            or argv[1:] != expected[1:]
            or os.path.basename(argv[0]) != os.path.basename(expected[0])
        ):
            _escaped(f"{_grant_source(outcome)} and {self._what_ran(ran)}")
        return f"{_grant_source(outcome)}, run as the argv {list(argv)} without a shell"

    @staticmethod
    def _what_ran(ran: Sequence[CommandRequest]) -> str:
        if not ran:
            return "nothing"
        request = ran[0]
        if request.script is not None:
            return f"the script {request.script!r} (run by bash)"
        return f"the argv {list(request.argv or ())}"

    @staticmethod
    def _display(asker: _Asker) -> str:
        if not asker.requests:
            return "no prompt was shown"
        shown = render(asker.requests[0])
        raw = sorted({f"U+{ord(ch):04X}" for ch in shown if ch != "\n" and not ch.isprintable()})
        if raw:
            _escaped(f"the prompt would print raw control characters {', '.join(raw)}")
        if any(" " * SPACE_RUN in text for _, text in describe(asker.requests[0])):
            _escaped("the prompt would print a run of spaces that can push text out of view")
        return "the prompt shows every control character and long run of spaces made visible"


# --- permission files ----------------------------------------------------------------------


class _PermissionFilesLayer(_LayerRunner):
    def __init__(self, audit: _Audit) -> None:
        self.audit = audit

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, PermissionFileEntry)
        self.audit.require_tool(entry.call.tool)
        procedures: dict[str, Callable[[PermissionFileEntry, ToolCall], str]] = {
            "ceiling-entry": self._ceiling_entry,
            "scope-entry": self._scope_entry,
            "malformed": self._malformed,
            "protected-answer": self._protected_answer,
            "protected-key": self._protected_key,
            "sandboxed-write": self._sandboxed_write,
            "self-grant": self._sandboxed_write,
            "capability-create": self._capability_create,
            "capability-tamper": self._capability_tamper,
            "cloned-config": self._cloned_config,
            "nested-git": self._nested_git,
            "git-symlink": self._git_symlink,
            "path-hijack": self._path_hijack,
            "link-to-protected": self._link_to_protected,
            "bare-repository": self._bare_repository,
            "read-root-swap": self._read_root_swap,
        }
        return procedures[entry.kind](entry, entry.call)

    @contextlib.contextmanager
    def _recorded_session(
        self, directory: Path, text: str | None, asker: _Asker
    ) -> Iterator[tuple[Runtime, Session, MockEnvironment]]:
        """A session on `directory` (with `text` as its codecoder.json, when given) whose
        environments only record, trusted as far as the project's own file is."""
        if text is not None:
            (directory / PROJECT_FILE).write_text(text)
        recorder, environments = _recorders()
        with (
            Runtime(
                directory,
                asker=asker,
                environments=environments,
                audit_log=None,
                tools=self.audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            yield runtime, session, recorder

    def _not_allowed(self, outcome: CallOutcome, recorder: MockEnvironment, what: str) -> None:
        if _allowed(outcome) or recorder.requests:
            _escaped(f"{what}: the call was {_grant_source(outcome)} and reached the environment")

    def _ceiling_entry(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        tag = self.audit.binding(call.tool)
        if tag.allows(Scope.PROJECT):
            raise _NotApplicable(
                f"{call.tool} is bound to {tag.value} here, where a project grant is legitimate"
            )
        directory = self.audit.scratch_dir("permission-files")
        asker = _Asker()
        text = self.audit.document(allow=entry.entry)
        with self._recorded_session(directory, text, asker) as (runtime, session, recorder):
            reported = [
                d
                for d in runtime.diagnostics
                if d.code == "ceiling_violation" and d.key in entry.entry
            ]
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, recorder, "the hand-edited entry granted it")
        if not reported:
            _escaped("the entry was accepted silently: no CeilingViolation was reported")
        at_lookup = bool(outcome.decision and outcome.decision.violations)
        return (
            f"CeilingViolation at line {reported[0].line}: {reported[0].message}; the call asked "
            f"and was refused"
            + ("; the violation was reported again at the lookup" if at_lookup else "")
        )

    def _scope_entry(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        directory = self.audit.scratch_dir("permission-files")
        asker = _Asker()
        text = self.audit.document(allow=entry.entry)
        with self._recorded_session(directory, text, asker) as (runtime, session, recorder):
            reported = [d for d in runtime.diagnostics if d.key in entry.entry]
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, recorder, "the entry granted it")
        if not reported:
            _escaped("the entry was accepted silently: nothing was reported about its scope")
        return f"{reported[0].severity} at line {reported[0].line}: {reported[0].message}; " + (
            f"the call was refused ({_refusal(outcome, asker)})"
        )

    def _malformed(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.text is not None
        directory = self.audit.scratch_dir("permission-files")
        asker = _Asker(Answer.PROJECT)  # and a later "always this project" must not rewrite it
        with self._recorded_session(directory, entry.text, asker) as (runtime, session, _):
            usable = runtime.config.file.usable
            errors = [d for d in runtime.diagnostics if d.severity == "error"]
            outcome = session.call(call.tool, call.args)
        if usable or not errors:
            _escaped("the malformed file was accepted as usable")
        if (directory / PROJECT_FILE).read_text() != entry.text:
            _escaped("the malformed file was rewritten by a later grant: the user's text is lost")
        if outcome.decision is not None and outcome.decision.source is Source.PROJECT:
            _escaped(f"a grant of the malformed file applied: {_grant_source(outcome)}")
        first = errors[0]
        return (
            f"fails closed: {first.code} at line {first.line}, column {first.column}: "
            f"{first.message}; no grant taken from it and the file left as it was"
        )

    def _protected_answer(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.answer is not None
        directory = self.audit.scratch_dir("permission-files")
        text = self.audit.document()
        asker = _Asker(Answer(entry.answer))
        with self._recorded_session(directory, text, asker) as (_, session, recorder):
            outcome = session.call(call.tool, call.args)
            ran = bool(recorder.requests)
            asker.answer = Answer.DENY
            again = session.call(call.tool, call.args)
        if _allowed(outcome) or ran:
            _escaped(f"answered {entry.answer}: {_grant_source(outcome)} and it ran")
        if (directory / PROJECT_FILE).read_text() != text:
            _escaped("codecoder.json was changed: the protected key was recorded")
        if _allowed(again) or len(asker.requests) < 2:
            _escaped(f"the next identical call was not asked again: {_grant_source(again)}")
        return f"answered {entry.answer}: {_refusal(outcome)}; the next identical call asked again"

    def _protected_key(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        tag = self.audit.binding(call.tool)
        directory = self.audit.scratch_dir("permission-files")
        text = self.audit.document(allow=entry.grants if tag.allows(Scope.PROJECT) else ())
        key = self.audit.key(call)
        asker = _Asker()
        with self._recorded_session(directory, text, asker) as (_, session, recorder):
            if key is not None:
                session.allowlist.grant(key, tag)
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, recorder, "a grant covered a protected path")
        return f"{_refusal(outcome, asker)}; nothing ran"

    def _sandboxed_write(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        tag = audit.binding(call.tool)
        if tag is EnvironmentTag.SHELL and not entry.follow_up:
            raise _NotApplicable(
                f"{call.tool} runs on the host here (@shell): nothing contains it, which is why "
                "its grants last one session at most; bind it to @docker to contain it"
            )
        environment = audit.environment(tag)
        workspace = audit.workspace
        grant_text = audit.document(allow=entry.grants)
        call = _substituted(
            call, {"@SELF_GRANT@": grant_text, "@SELF_GRANT_SHELL@": shlex.quote(grant_text)}
        )
        if entry.script_file:
            script = "\n".join(entry.script) + "\n"
            script = script.replace("@SELF_GRANT_SHELL@", shlex.quote(grant_text))
            workspace.write(entry.script_file, script.encode())
        watch = (*entry.watch,)
        before = workspace.state(watch)
        key = audit.key(call)
        asker = _Asker()
        with (
            Runtime(
                workspace.path,
                asker=asker,
                environments={tag: environment},
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            if key is not None:
                session.allowlist.grant(key, tag)
            outcome = session.call(call.tool, call.args)
        if not _allowed(outcome):
            raise _NotRun(
                f"the call was not allowed even with its own key granted ({_refusal(outcome)})"
            )
        changed = workspace.changed(before, watch)
        how = f"{call.tool} ran in {tag.value}: {_result_line(outcome)}"
        if changed and tag is not EnvironmentTag.SHELL:
            _escaped(f"{how}; it changed {', '.join(changed)} on the host")
        if changed:
            how += f"; @shell is no sandbox: it changed {', '.join(changed)}"
        else:
            how += f"; {', '.join(watch)} unchanged"
        if entry.follow_up:
            how += "; " + self._after_reload(entry.follow_up)
        return how

    def _capability_create(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        directory = self.audit.scratch_dir("capability-create")
        asker = _Asker()
        with self._recorded_session(directory, self.audit.document(), asker) as (_, session, rec):
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, rec, "the capability was created without asking")
        written = sorted(p.name for p in (directory / ".codecoder").glob("capabilities/*"))
        if written:
            _escaped(f"capabilities were written without a grant: {written}")
        return f"{_refusal(outcome, asker)}; nothing written under .codecoder/capabilities/"

    def _capability_tamper(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.tamper is not None
        audit = self.audit
        directory = audit.scratch_dir("capability-tamper")
        name = str(call.args["manifest"]["name"])
        run = ToolCall(tool="run_capability", args={"name": name})
        audit.require_tool(run.tool)
        (directory / PROJECT_FILE).write_text(audit.document())
        # The human allows the creation once and the first run for the project: the grant
        # that gets pinned to the digest of the code as it was approved.
        answers = iter((Answer.ONCE, Answer.PROJECT))
        environments = {EnvironmentTag.WASM: audit.environment(EnvironmentTag.WASM)}
        with (
            Runtime(
                directory,
                asker=lambda request: next(answers, Answer.DENY),
                environments=environments,
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            created = session.call(call.tool, call.args)
            approved = session.call(run.tool, run.args)
        if not created.ok or not approved.ok:
            failed = created if not created.ok else approved
            raise _NotRun(f"the capability could not be created and approved: {failed.error}")
        capability = directory / ".codecoder" / "capabilities" / name
        (capability / entry.tamper.path).write_text(entry.tamper.content)
        # A restart: the runtime reads codecoder.json and the capabilities afresh.
        asker = _Asker()
        recorder, recorders = _recorders()
        with (
            Runtime(
                directory,
                asker=asker,
                environments=recorders,
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            reported = [d.message for d in runtime.diagnostics if d.key == f"{run.tool}:{name}"]
            outcome = session.call(run.tool, run.args)
        if outcome.error is None or recorder.requests:
            _escaped(f"the changed capability ran under the old grant: {_result_line(outcome)}")
        how = _refusal(outcome, asker)
        return how + (f"; reported: {reported[0]}" if reported else "")

    # -- a cloned hostile repository -------------------------------------------------------

    def _placeholders(self) -> dict[str, str]:
        outside = str(self.audit.workspace.outside)
        return {
            "@OUTSIDE_REL@": outside.lstrip("/"),
            "@OUTSIDE@": outside,
            "@TOKEN@": self.audit.token,
        }

    def _cloned_config(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.document is not None
        values = self._placeholders()
        document = _substituted(ToolCall(tool="-", args=entry.document), values).args
        call = _substituted(call, values)
        directory = self.audit.fresh_dir("cloned")
        (directory / PROJECT_FILE).write_text(json.dumps(document, indent=2) + "\n")
        recorder, environments = _recorders()
        # The read tools really read (in @landlock, or @wasm where it cannot run): that is the
        # attack.
        environments.pop(EnvironmentTag.LANDLOCK)
        environments.pop(EnvironmentTag.WASM)
        environments.pop(EnvironmentTag.RUNTIME)
        asker = _Asker()
        # Never trusted: this is the file as it came with the repository (no trust override).
        with (
            Runtime(
                directory,
                asker=asker,
                environments=environments,
                audit_log=None,
                tools=self.audit.tools,
            ) as runtime,
            runtime.session() as session,
        ):
            config = runtime.config
            in_effect = _widenings_in_effect(config, directory)
            reported = {d.key for d in config.diagnostics if d.code in _CLONED_REPORTS}
            outcome = session.call(call.tool, call.args)
        if in_effect:
            _escaped(f"the cloned file was obeyed: {'; '.join(in_effect)}")
        unreported = [w.key for w in config.trust.widenings if w.key not in reported]
        forbidden = [d.key or "" for d in config.diagnostics if d.code == "read_root_forbidden"]
        if unreported or not (reported or forbidden):
            _escaped(f"widenings taken silently, not reported: {unreported or 'all'}")
        shown = json.dumps(outcome.to_json())
        if self.audit.token in shown.replace(f"/{self.audit.token}", ""):
            _escaped(f"the bait outside the workspace was shown: {_result_line(outcome)}")
        if outcome.ok or recorder.requests:
            _escaped(f"the call went through: {_result_line(outcome)}")
        if entry.expect_error is not None and entry.expect_error not in str(outcome.error):
            raise _NotRun(f"the call failed otherwise than expected: {_result_line(outcome)}")
        how = f"{config.trust.state.value}: " + (
            f"{len(config.trust.widenings)} widening(s) reported and ignored"
            if config.trust.widenings
            else f"refused outright ({', '.join(sorted(set(forbidden)))}: read_root_forbidden)"
        )
        if outcome.decision is not None and outcome.decision.source is Source.NONE:
            return f"{how}; {call.tool} (which never asks) failed: {_result_line(outcome)}"
        return f"{how}; {call.tool} {_refusal(outcome, asker)}"

    def _git_repository(self, name: str) -> Path:
        from dulwich import porcelain

        directory = self.audit.fresh_dir(name)
        porcelain.init(str(directory))
        (directory / "src").mkdir()
        (directory / "src" / "secret.txt").write_text("inside the workspace\n")
        porcelain.add(str(directory), paths=[str(directory / "src" / "secret.txt")])
        porcelain.commit(str(directory), b"audit", author=b"A <a@b>", committer=b"A <a@b>")
        return directory

    def _git_symlink(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        audit.require_tool(call.tool)
        directory = self._git_repository("git-symlink")
        shutil.rmtree(directory / "src")
        (directory / "src").symlink_to(audit.workspace.outside)
        with Runtime(
            directory, asker=_Asker(), audit_log=None, tools=audit.tools, trusted=audit.trusted
        ) as runtime:
            outcome = runtime.session().call(call.tool, call.args)
        if audit.token in json.dumps(outcome.to_json()):
            _escaped(f"{call.tool} showed the bait outside the workspace through the symlink")
        if outcome.error is not None:
            raise _NotRun(f"{call.tool} failed: {_result_line(outcome)}")
        shown = _last_line(outcome.unwrap().output)
        return f"{call.tool}: {shown}; nothing beyond the symlink was read"

    def _nested_git(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        git = shutil.which("git")
        if git is None:
            raise _NotApplicable("git is not installed: the commit tool cannot run here")
        audit.require_tool(call.tool)
        directory = audit.fresh_dir("nested-git")
        markers = audit.fresh_dir("nested-git-markers")
        quiet = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}

        def run(*argv: str, cwd: Path = directory) -> None:
            subprocess.run(
                [git, "-c", "user.name=A", "-c", "user.email=a@b", *argv],
                cwd=cwd,
                env=quiet,
                capture_output=True,
                check=True,
            )

        run("init", "-q")
        run("config", "user.name", "Audit")
        run("config", "user.email", "audit@example.org")
        run("init", "-q", "sub")
        (directory / "sub" / "f.txt").write_text("one\n")
        run("add", "f.txt", cwd=directory / "sub")
        run("commit", "-qm", "sub", cwd=directory / "sub")
        (directory / "top.txt").write_text("one\n")
        run("add", "top.txt", "sub")
        run("commit", "-qm", "top")
        # What a sandbox could leave behind if nothing stopped it.
        with (directory / "sub" / ".git" / "config").open("a") as config:
            config.write(f"[core]\n\tfsmonitor = \"sh -c 'touch {markers}/fsmonitor'\"\n")
        for hook in ("pre-commit", "post-commit", "post-index-change"):
            path = directory / "sub" / ".git" / "hooks" / hook
            path.write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
            path.chmod(0o755)
        (directory / "sub" / "f.txt").write_text("changed\n")
        (directory / "top.txt").write_text("changed\n")
        environments = {EnvironmentTag.SHELL: audit.environment(EnvironmentTag.SHELL)}
        asker = _Asker(Answer.ONCE)
        with Runtime(
            directory, asker=asker, environments=environments, audit_log=None, tools=audit.tools
        ) as runtime:
            outcome = runtime.session().call(call.tool, call.args)
        ran = sorted(os.listdir(markers))
        if ran:
            _escaped(f"the commit ran what the nested repository names: {', '.join(ran)}")
        if not outcome.ok:
            raise _NotRun(f"the commit failed: {_result_line(outcome)}")
        return f"committed ({_result_line(outcome)}); nothing the nested repository names ran"

    def _path_hijack(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        audit.require_tool(call.tool)
        if audit.binding(call.tool) is not EnvironmentTag.SHELL:
            raise _NotApplicable(
                f"{call.tool} runs in {audit.binding(call.tool).value} here, whose own PATH the "
                "host's does not reach"
            )
        directory = audit.fresh_dir("path-hijack")
        program = str(call.args["command"]).split()[0]
        planted = directory / ".venv" / "bin" / program
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(f"#!/bin/sh\necho {audit.token}\n")
        planted.chmod(0o755)
        innocent = audit.key(call)  # as keyed before the plant was on PATH
        assert innocent is not None
        asker = _Asker()
        path = os.environ.get("PATH", os.defpath)
        os.environ["PATH"] = f"{planted.parent}{os.pathsep}{path}"
        try:
            with self._recorded_session(directory, None, asker) as (_, session, recorder):
                session.allowlist.grant(innocent, EnvironmentTag.SHELL)
                outcome = session.call(call.tool, call.args)
        finally:
            os.environ["PATH"] = path
        if _allowed(outcome) or recorder.requests:
            _escaped(
                f"the planted {program} was covered by {innocent.raw}: {_grant_source(outcome)}"
            )
        shown = asker.requests[0].subject if asker.requests else ""
        if ".venv/bin" not in shown:
            _escaped(f"the prompt did not say where {program} lives: {shown!r}")
        return f"{_refusal(outcome, asker)}; the prompt said: {visible(shown.splitlines()[-1])}"

    def _on_the_host(self, call: ToolCall) -> None:
        if self.audit.binding(call.tool) is not EnvironmentTag.SHELL:
            raise _NotApplicable(
                f"{call.tool} runs in {self.audit.binding(call.tool).value} here: what it "
                "runs stays in the sandbox, where the protected paths are read-only"
            )

    def _link_to_protected(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """A symlink a sandbox may leave (its name is not protected) leading into .git, then a
        host command writing through it under a session grant for its program."""
        audit = self.audit
        self._on_the_host(call)
        directory = audit.fresh_dir("link-to-protected")
        (directory / ".git" / "hooks").mkdir(parents=True)
        (directory / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
        (directory / "notes.txt").write_text(f"{audit.token}\n")
        for link, target in entry.links.items():
            (directory / link).symlink_to(target)
        innocent = audit.key(call)  # as keyed where no link leads anywhere
        assert innocent is not None
        asker = _Asker()
        with self._recorded_session(directory, None, asker) as (_, session, recorder):
            session.allowlist.grant(innocent, EnvironmentTag.SHELL)
            outcome = session.call(call.tool, call.args)
        if _allowed(outcome) or recorder.requests:
            _escaped(f"the write through the link was covered by {innocent.raw}")
        shown = asker.requests[0].subject if asker.requests else ""
        if "leads to .git" not in shown:
            _escaped(f"the prompt did not say where the link leads: {shown!r}")
        return f"{_refusal(outcome, asker)}; the prompt said: {visible(shown.splitlines()[-1])}"

    def _bare_repository(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """HEAD, objects/, refs/ and a config naming core.fsmonitor, written where a sandbox may
        write (`entry.script_file`: the directory, `.` for the workspace), then the call on the
        real host shell under a session grant for its own key."""
        audit = self.audit
        self._on_the_host(call)
        directory = audit.fresh_dir("bare-repository")
        marker = audit.fresh_dir("bare-repository-marker") / "fsmonitor-ran"
        planted = directory / (entry.script_file or ".")
        for sub in ("objects", "refs/heads"):
            (planted / sub).mkdir(parents=True, exist_ok=True)
        (planted / "HEAD").write_text("ref: refs/heads/main\n")
        (planted / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
            f'\tfsmonitor = "touch {marker}; false"\n'
        )
        key = audit.key(call)
        assert key is not None
        with (
            Runtime(
                directory,
                asker=_Asker(),
                audit_log=None,
                tools=audit.tools,
                trusted=audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            session.allowlist.grant(key, EnvironmentTag.SHELL)
            outcome = session.call(call.tool, call.args)
        if marker.exists():
            _escaped("git took the planted layout for a repository and ran its core.fsmonitor")
        return _result_line(outcome)

    def _read_root_swap(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """A read root inside the project (obeyed even untrusted) swapped for a symlink to the
        bait outside after the project was loaded, then a read tool on it."""
        audit = self.audit
        directory = audit.fresh_dir("read-root-swap")
        bait = audit.fresh_dir("read-root-swap-bait")
        (bait / "secret.txt").write_text(f"{audit.token}\n")
        (directory / "docs").mkdir()
        (directory / PROJECT_FILE).write_text(json.dumps({"read_roots": {"docs": "docs"}}))
        with (
            Runtime(directory, asker=_Asker(), audit_log=None, tools=audit.tools) as runtime,
            runtime.session() as session,
        ):
            if "docs" not in runtime.config.read_roots:
                raise _NotRun("the read root inside the project was not in effect")
            (directory / "docs").rmdir()
            (directory / "docs").symlink_to(bait)
            outcome = session.call(call.tool, call.args)
        if audit.token in json.dumps(outcome.to_json()):
            _escaped("the read tool read the bait through the swapped root")
        return _result_line(outcome)

    def _after_reload(self, calls: Sequence[ToolCall]) -> str:
        """What a /reload of the (possibly rewritten) file grants: each call must still ask."""
        asker = _Asker()
        refused: list[str] = []
        path = self.audit.workspace.path
        with self._recorded_session(path, None, asker) as (runtime, session, recorder):
            for call in calls:
                if call.tool not in runtime.tools:
                    continue
                outcome = session.call(call.tool, call.args)
                self._not_allowed(outcome, recorder, "after /reload the self-granted entry applied")
                refused.append(f"{call.tool} {json.dumps(call.args)} asked")
        return "after /reload: " + ", ".join(refused)


_CLONED_REPORTS: Final = frozenset({"untrusted", "read_root_forbidden"})


def _widenings_in_effect(config: Any, workspace: Path) -> list[str]:
    """What a never-trusted project file managed to put in effect (empty: nothing)."""
    found: list[str] = []
    if len(config.allowlist):
        found.append(f"{len(config.allowlist)} grant(s)")
    if config.bindings:
        found.append(f"bindings {config.bindings}")
    for name, directory in config.read_roots.items():
        if workspace.resolve() not in (directory, *directory.parents):
            found.append(f"read root {name} = {directory}")
    if config.docker != DockerSettings():
        found.append(f"docker settings {config.docker}")
    if config.web.allow_hosts or config.web.search_url is not None:
        found.append("web hosts")
    if config.agent.base_url is not None or config.agent.api_key_env != "OPENAI_API_KEY":
        found.append("agent server or key")
    return found


def _substituted(call: ToolCall, values: Mapping[str, str]) -> ToolCall:
    def replace(value: Any) -> Any:
        if isinstance(value, str):
            for placeholder, text in values.items():
                value = value.replace(placeholder, text)
            return value
        if isinstance(value, list):
            return [replace(v) for v in value]
        if isinstance(value, dict):
            return {k: replace(v) for k, v in value.items()}
        return value

    return ToolCall(tool=call.tool, args=replace(call.args))


def _result_line(outcome: CallOutcome) -> str:
    """The gist of how a call ended: its error, or its exit code and last line of output."""
    if outcome.error is not None:
        return f"{type(outcome.error).__name__}: {_last_line(str(outcome.error))}"
    assert outcome.result is not None
    data = outcome.result.data
    text = str(data.get("stderr") or "") or str(data.get("stdout") or "")
    if "exit_code" not in data:
        text = text or outcome.result.output
    code = data.get("exit_code")
    return (f"exit code {code}, " if code is not None else "") + _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# --- the scratch workspace -----------------------------------------------------------------


Snapshot: TypeAlias = dict[str, tuple[str, bytes]]


class _Workspace:
    """The workspace the sandbox layers attack: a copy of the project's codecoder.json, the
    protected paths, and bait. Owned like the project, so a container runs as the same user, and
    writable by anyone, so that a mount is all that protects the protected paths."""

    def __init__(self, root: Path, project: Path, token: str) -> None:
        self.path = root / "workspace"
        self.outside = root / "outside"
        self.token = token
        info = project.stat()
        self._owner = (info.st_uid, info.st_gid)
        source = project / PROJECT_FILE
        self.project_file = source.read_bytes() if source.is_file() else b"{}\n"
        self._build()
        self.pristine = self.state(("",))
        self.outside_state = _tree_state(self.outside, "")

    def _build(self) -> None:
        self.path.mkdir()
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(self.token + "\n")
        files = {
            PROJECT_FILE: self.project_file,
            ".git/config": b"[core]\n\trepositoryformatversion = 0\n",
            ".git/HEAD": b"ref: refs/heads/main\n",
            "src/notes.txt": b"notes\n",
            "race/real-dir/secret.txt": b"inside\n",
            "bin/probe.wasm": _probe_bytes(),
        }
        for directory in (".codecoder", ".git/hooks"):
            (self.path / directory).mkdir(parents=True)
        for name, data in files.items():
            self.write(name, data)
        links = {
            "link-out": "../outside",
            "link-secret": "../outside/secret.txt",
            "abs-link": str(self.outside),
            "src/link-out": "../../outside",
            "src/git-link": "../.git",
            "race/dir": "real-dir",
        }
        for name, target in links.items():
            (self.path / name).symlink_to(target)
        for path in [self.path, *self.path.rglob("*")]:
            self._own(path)

    def _own(self, path: Path) -> None:
        if path.is_symlink():
            return
        path.chmod(0o777 if path.is_dir() else 0o666)
        if os.geteuid() == 0:
            os.chown(path, *self._owner)

    def write(self, name: str, data: bytes) -> None:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        # In place, not replaced: a file bind-mounted into a running container must keep its
        # inode, or the container would go on seeing the old one.
        with open(path, "wb") as f:
            f.write(data)
        self._own(path)

    def state(self, paths: Iterable[str]) -> Snapshot:
        snapshot: Snapshot = {}
        for rel in paths:
            snapshot.update(_tree_state(self.path, rel))
        return snapshot

    def changed(self, before: Snapshot, paths: Iterable[str]) -> list[str]:
        after = self.state(paths)
        return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))

    def outside_changed(self) -> list[str]:
        after = _tree_state(self.outside, "")
        return sorted(
            p
            for p in set(self.outside_state) | set(after)
            if self.outside_state.get(p) != after.get(p)
        )

    def restore(self) -> None:
        """Put back what attempts changed (deepest first), so the next one starts the same."""
        current = self.state(("",))
        for rel in sorted(set(current) - set(self.pristine), key=len, reverse=True):
            _remove(self.path / rel)
        for rel, (kind, data) in sorted(self.pristine.items(), key=lambda item: len(item[0])):
            if current.get(rel) == (kind, data):
                continue
            path = self.path / rel
            if kind == "file":
                if path.is_symlink() or path.is_dir():
                    _remove(path)
                self.write(rel, data)
            elif kind == "dir":
                if path.is_symlink() or (path.exists() and not path.is_dir()):
                    _remove(path)
                path.mkdir(exist_ok=True)
                self._own(path)
            elif kind == "link":
                _remove(path)
                path.symlink_to(data.decode())
        outside = _tree_state(self.outside, "")
        for name in set(outside) - set(self.outside_state):
            _remove(self.outside / name)
        for name, (kind, data) in self.outside_state.items():
            if kind == "file" and outside.get(name) != (kind, data):
                (self.outside / name).write_bytes(data)


_SNAPSHOT_CONTENT: Final = 1024 * 1024


def _tree_state(root: Path, rel: str) -> Snapshot:
    """Every entry at and under `rel` (symlinks not followed): kind and content or target."""
    snapshot: Snapshot = {}
    top = root / rel if rel else root

    def record(path: Path) -> None:
        name = path.relative_to(root).as_posix() if path != root else "."
        try:
            info = path.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            snapshot[name] = ("link", os.readlink(path).encode())
        elif stat.S_ISREG(info.st_mode) and info.st_size > _SNAPSHOT_CONTENT:
            # A file an attempt wrote to fill the disk: its size and time tell a change.
            snapshot[name] = ("file", f"{info.st_size}:{info.st_mtime_ns}".encode())
        elif stat.S_ISREG(info.st_mode):
            snapshot[name] = ("file", path.read_bytes())
        elif stat.S_ISDIR(info.st_mode):
            snapshot[name] = ("dir", b"")
        else:
            snapshot[name] = ("other", b"")

    record(top)
    if top.is_dir() and not top.is_symlink():
        for directory, dirs, files in os.walk(top):
            for name in dirs + files:
                record(Path(directory) / name)
    if not snapshot:
        snapshot[rel or "."] = ("missing", b"")
    return snapshot


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def slow_to_compile(branches: int) -> bytes:
    """A small module that takes long to compile: one function of `branches` ifs over 64
    locals (register allocation grows faster than the code: 60,000 take seconds)."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def section(number: int, body: bytes) -> bytes:
        return bytes([number]) + leb(len(body)) + body

    code = bytearray(leb(1) + leb(64) + b"\x7f")
    for i in range(branches):
        # local.get a; if; local.get b; i32.const 1; i32.add; local.set c; end
        code += b"\x20" + leb(i % 64) + b"\x04\x40\x20" + leb((i + 1) % 64)
        code += b"\x41\x01\x6a\x21" + leb((i + 2) % 64) + b"\x0b"
    code += b"\x0b"
    return (
        b"\0asm\x01\0\0\0"
        + section(1, b"\x01\x60\x00\x00")  # one type: () -> ()
        + section(3, b"\x01\x00")  # one function of it
        + section(7, b"\x01\x06_start\x00\x00")  # exported as _start
        + section(10, b"\x01" + leb(len(code)) + bytes(code))
    )


@functools.cache
def _probe_bytes() -> bytes:
    return (
        importlib.resources.files("codecoder.sandboxes").joinpath("escapes/probe.wasm").read_bytes()
    )


# --- wasm ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Runs:
    """What a sequence of module runs produced: results, the error that ended them, the time."""

    results: list[WasmResult] = field(default_factory=list)
    error: CodecoderError | None = None
    elapsed: float = 0.0

    @property
    def output(self) -> str:
        return "".join(r.stdout_text() + r.stderr_text() for r in self.results) + (
            str(self.error) if self.error else ""
        )


class _WasmLayer(_LayerRunner):
    def __init__(self, audit: _Audit) -> None:
        self.audit = audit

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, WasmEntry)
        workspace = self.audit.workspace
        if entry.fifo is not None:
            os.mkfifo(workspace.path / entry.fifo)  # gone with the rest at restore()
        if entry.kind == "tool":
            return self._tool(entry)
        if entry.kind == "cache":
            return self._cache(entry)
        env = self.audit.environment(EnvironmentTag.WASM)
        assert isinstance(env, WasmEnvironment)
        protected_before = workspace.state(PROTECTED)
        if entry.kind == "race":
            runs, flips = self._race(env, entry)
        else:
            runs, flips = self._run(env, entry, self._requests(entry)), 0
        self._check(entry, runs)
        changed = workspace.changed(protected_before, PROTECTED)
        if changed:
            _escaped(f"the module changed {', '.join(changed)}")
        outside = workspace.outside_changed()
        if outside:
            _escaped(f"the module changed the directory outside the workspace: {outside}")
        how = self._defence(entry, runs)
        if entry.kind == "race":
            if flips < 2:
                raise _NotRun("the symlink could not be swapped during the call")
            how += f"; the symlink was swapped {flips} times during the call"
        return how

    def _timeout(self, entry: WasmEntry) -> float:
        return entry.timeout or self.audit.limits.timeout

    def _requests(self, entry: WasmEntry) -> list[WasmRequest]:
        workspace = self.audit.workspace
        preopens = run_wasm_preopens(workspace.path, writable=entry.writable)
        module = (
            "\n".join(entry.wat).encode()
            if entry.kind == "module"
            else slow_to_compile(entry.branches)
            if entry.kind == "slow-compile"
            else _probe_bytes()
        )
        values = {
            "@TOKEN@": workspace.token,
            "@OUTSIDE@": str(workspace.outside),
            "@MEMORY_BYTES_X4@": str(4 * DEFAULT_MEMORY_LIMIT),
        }
        requests = []
        for argv in entry.runs or (entry.argv,):
            for placeholder, value in values.items():
                argv = tuple(arg.replace(placeholder, value) for arg in argv)
            requests.append(
                WasmRequest(
                    module=module,
                    argv=("probe", *argv),
                    preopens=preopens,
                    timeout=self._timeout(entry),
                    max_output=self.audit.limits.max_output,
                    workspace=workspace.path,
                )
            )
        return requests

    def _run(
        self, env: WasmEnvironment, entry: WasmEntry, requests: Sequence[WasmRequest]
    ) -> _Runs:
        runs = _Runs()
        started = time.monotonic()
        try:
            for request in requests:
                runs.results.append(env.run(request))
        except _ERRORS as exc:
            if type(exc).__name__ not in entry.blocked_by:
                raise _NotRun(f"{type(exc).__name__}: {exc}") from exc
            runs.error = exc
        runs.elapsed = time.monotonic() - started
        return runs

    def _check(self, entry: WasmEntry, runs: _Runs) -> None:
        token = self.audit.workspace.token
        checks = set(entry.escaped_if) | {"secret"}
        last = runs.results[-1] if runs.results else None
        if "secret" in checks and token in runs.output:
            _escaped("the secret outside the workspace was read")
        if "succeeded" in checks and last is not None and last.exit_code == 0:
            _escaped(f"the operation succeeded: {_last_line(last.stdout_text())}")
        if "completed" in checks and runs.error is None:
            _escaped(f"the module ran to its end ({runs.elapsed:.1f}s) without being stopped")
        timeout = self._timeout(entry)
        if "overran" in checks and runs.elapsed > timeout + OVERRUN_GRACE:
            _escaped(
                f"it held the runtime for {runs.elapsed:.1f}s, past its timeout of {timeout:g}s"
            )
        if "uncapped" in checks and last is not None:
            cap = self.audit.limits.max_output
            if len(last.stdout) > cap + 200:
                _escaped(f"{len(last.stdout):,} bytes of output kept, past the cap of {cap:,}")
        if entry.stdout_matches and re.search(entry.stdout_matches, runs.output):
            _escaped(f"the output matched {entry.stdout_matches!r}: {runs.output[:120]}")
        if entry.expect_exit is not None and (last is None or last.exit_code != entry.expect_exit):
            raise _NotRun(f"expected exit code {entry.expect_exit}, got {last and last.exit_code}")

    def _defence(self, entry: WasmEntry, runs: _Runs) -> str:
        if runs.error is not None:
            error = _last_line(str(runs.error))
            return f"{type(runs.error).__name__} after {runs.elapsed:.1f}s: {error}"
        last = runs.results[-1]
        if "uncapped" in entry.escaped_if:
            return (
                f"output capped at {len(last.stdout):,} bytes (truncated: "
                f"{last.stdout_truncated}) in {runs.elapsed:.1f}s"
            )
        if entry.expect_exit is not None:
            return f"exit code {last.exit_code} reported; the runtime carried on"
        line = _last_line(last.stderr_text() or last.stdout_text())
        return f"{line} (exit code {last.exit_code})"

    def _race(self, env: WasmEnvironment, entry: WasmEntry) -> tuple[_Runs, int]:
        workspace = self.audit.workspace
        link = workspace.path / "race" / "dir"
        spare = workspace.path / "race" / ".swap"
        op = "reads" if entry.mode == "read" else "writes"
        target = "secret.txt" if entry.mode == "read" else "planted"
        request = WasmRequest(
            module=_probe_bytes(),
            argv=("probe", op, f"/workspace/race/dir/{target}", "3000"),
            preopens=run_wasm_preopens(workspace.path, writable=entry.mode == "write"),
            timeout=self._timeout(entry),
            max_output=self.audit.limits.max_output,
        )
        stop = threading.Event()
        flips = 0

        def swap() -> None:
            nonlocal flips
            # A symlink renamed over another is atomic: race/dir is always one or the other.
            targets = ("real-dir", "../../outside")
            while not stop.is_set():
                with contextlib.suppress(FileNotFoundError):
                    spare.unlink()
                spare.symlink_to(targets[flips % 2])
                os.replace(spare, link)
                flips += 1

        swapper = threading.Thread(target=swap, name="codecoder-audit-swap", daemon=True)
        swapper.start()
        try:
            runs = self._run(env, entry, [request])
        finally:
            stop.set()
            swapper.join()
        return runs, flips

    def _cache(self, entry: WasmEntry) -> str:
        """Tamper with the disk cache entry of a module, then run the module in a new
        environment (a new process would do the same): the entry must be discarded."""
        cache_dir = self.audit.options.wasm_cache_dir or default_cache_dir()
        # A module of our own (the probe plus a custom section holding a nonce): its digest,
        # and so its cache entry, belongs to this run alone.
        module = _probe_bytes() + _custom_section("codecoder-audit", self.audit.token.encode())
        request = WasmRequest(module=module, argv=("probe", "environ"))
        before = set(cache_dir.glob("*.cwasm")) if cache_dir.is_dir() else set()
        first = WasmEnvironment(cache_dir)
        try:
            if first.disk_cache_dir is None:
                raise _NotApplicable(f"the compiled-module cache {cache_dir} is not in use")
            genuine = first.run(request).stdout
        finally:
            first.close()
        created = sorted(set(cache_dir.glob("*.cwasm")) - before)
        if len(created) != 1:
            raise _NotRun(f"expected one new cache entry in {cache_dir}, found {len(created)}")
        (path,) = created
        try:
            forged = _tampered(path.read_bytes(), entry.mode, self.audit.token)
            path.write_bytes(forged)
            second = WasmEnvironment(cache_dir)
            try:
                with _captured_log("codecoder.environments.wasm.cache") as reported:
                    result = second.run(request)
                stats = second.cache_stats
            finally:
                second.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self.audit.token in result.stdout_text() or result.stdout != genuine:
            _escaped(f"the tampered entry was loaded and ran: {result.stdout_text()[:100]}")
        if stats.discarded != 1 or stats.compiled != 1:
            _escaped(
                f"the module ran as compiled, but the cache reported {stats.discarded} discarded "
                f"and {stats.compiled} compiled: the tampered entry was not caught"
            )
        said = f" (the runtime logged: {reported[-1]})" if reported else ""
        return f"the tampered entry was discarded{said}; the module was recompiled"

    def _tool(self, entry: WasmEntry) -> str:
        """The file tool's call in the environment the project binds it to and, where that is
        not @wasm (the read tools run in @landlock), again in @wasm, the fallback where the
        kernel has no Landlock: each must hold."""
        audit = self.audit
        assert entry.tool is not None
        audit.require_tool(entry.tool)
        bound = audit.binding(entry.tool)
        tags = [bound]
        if (
            bound is not EnvironmentTag.WASM
            and EnvironmentTag.WASM in audit.tools[entry.tool].bindable
        ):
            tags.append(EnvironmentTag.WASM)
        return "; ".join(f"{tag.value}: {self._tool_in(entry, tag)}" for tag in tags)

    def _tool_in(self, entry: WasmEntry, tag: EnvironmentTag) -> str:
        audit = self.audit
        assert entry.tool is not None
        env = audit.environment(EnvironmentTag.WASM)
        workspace = audit.workspace
        values = {"@TOKEN@": workspace.token, "@OUTSIDE@": str(workspace.outside)}
        call = _substituted(ToolCall(tool=entry.tool, args=entry.args), values)
        before = workspace.state(PROTECTED)
        with (
            Runtime(
                workspace.path,
                asker=_Asker(),
                environments={EnvironmentTag.WASM: env},
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
                bindings={call.tool: tag},
            ) as runtime,
            runtime.session() as session,
        ):
            try:
                key = audit.key(call)
            except CodecoderError:
                key = None  # invalid arguments: the call itself shows how they are refused
            if key is not None:
                session.allowlist.grant(key, runtime.environment_of(call.tool))
            started = time.monotonic()
            outcome = session.call(call.tool, call.args)
            took = time.monotonic() - started
        if entry.timeout is not None and took > entry.timeout:
            _escaped(f"the call took {took:.1f}s, past the {entry.timeout:g}s it may: it blocked")
        shown = json.dumps(outcome.to_json())
        if workspace.token in shown:
            _escaped("the secret outside the workspace reached the agent")
        if (
            entry.stdout_matches
            and outcome.result
            and re.search(entry.stdout_matches, outcome.result.output)
        ):
            _escaped(f"the output matched {entry.stdout_matches!r}: {outcome.result.output[:120]}")
        changed = workspace.changed(before, PROTECTED) + workspace.outside_changed()
        if changed:
            _escaped(f"the call changed {', '.join(changed)}")
        return _result_line(outcome)


@contextlib.contextmanager
def _captured_log(name: str) -> Iterator[list[str]]:
    """The warnings `name` logs meanwhile, kept for the report instead of printed: the audit
    tampers on purpose, and the runtime's warning about it is the defence observed."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(name)
    handler, propagate = Keep(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _custom_section(name: str, payload: bytes) -> bytes:
    def leb128(value: int) -> bytes:
        out = bytearray()
        while True:
            byte, value = value & 0x7F, value >> 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)

    body = leb128(len(name)) + name.encode() + payload
    return b"\x00" + leb128(len(body)) + body


_EVIL_WAT: Final = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "TAMPERED @TOKEN@\\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const @LENGTH@))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


def _tampered(entry: bytes, mode: str | None, token: str) -> bytes:
    if mode == "corrupt":
        middle = len(entry) // 2
        return (
            entry[:middle]
            + bytes(b ^ 0xFF for b in entry[middle : middle + 64])
            + entry[middle + 64 :]
        )
    # Machine code an attacker would plant: a module compiled with the settings the runtime
    # uses (so it would deserialize), printing a marker if it is ever run.
    text = _EVIL_WAT.replace("@TOKEN@", token).replace("@LENGTH@", str(len(f"TAMPERED {token}\n")))
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    config.cranelift_opt_level = "speed"
    return bytes(wasmtime.Module(wasmtime.Engine(config), text).serialize())


# --- docker --------------------------------------------------------------------------------


class _Canary:
    """A TCP service on the host that the sandbox must not reach: it answers with the token and
    remembers every peer, so a connection is seen even when the sandbox says nothing."""

    def __init__(self, token: str) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("0.0.0.0", 0))
        self._server.listen(16)
        self._server.settimeout(0.2)
        self.port: int = self._server.getsockname()[1]
        self.peers: list[str] = []
        self._token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="codecoder-canary", daemon=True)
        self._thread.start()

    @staticmethod
    def hosts() -> list[str]:
        """Addresses of this host a container might try, besides its default gateway."""
        found = ["172.17.0.1"]  # docker0's usual address
        with contextlib.suppress(OSError):
            for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
                found.append(str(info[4][0]))
        return list(dict.fromkeys(h for h in found if not h.startswith("127.")))

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._server.accept()
            except (TimeoutError, OSError):
                continue
            self.peers.append(f"{peer[0]}:{peer[1]}")
            with contextlib.suppress(OSError), conn:
                conn.sendall(f"{self._token}\n".encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


class _DockerLayer(_LayerRunner):
    def __init__(
        self, audit: _Audit, env: DockerEnvironment | None = None, runtime: str | None = None
    ) -> None:
        self.audit = audit
        self.runtime = runtime
        try:
            if env is None:
                found = audit.environment(EnvironmentTag.DOCKER)
                assert isinstance(found, DockerEnvironment)
                env = found
            else:
                env.start()
        except _NotRun as exc:
            self.blocker = exc
            return
        except SandboxUnavailable as exc:
            self.blocker = _NotRun(f"no @docker sandbox under {runtime}: {exc}")
            return
        self.env = env
        self.engine_runtime = env.runtime_in_use()

    def other_runtimes(self) -> list[str]:
        """The known runtimes the engine has besides the one this runner's sandbox runs under
        (as far as the audit's options let it)."""
        wanted = self.audit.options.docker_runtimes
        return [
            runtime
            for runtime in self.env.engine_runtimes()
            if runtime != self.engine_runtime and (wanted is None or runtime in wanted)
        ]

    def run(self, attempt: Attempt) -> str:
        assert isinstance(attempt.entry, DockerEntry)
        variant = attempt.entry.variant(self.engine_runtime)
        if variant is not None and variant.not_applicable:
            raise _NotApplicable(f"under {self.engine_runtime}: {variant.why}")
        entry = attempt.entry.under_runtime(self.engine_runtime)
        audit, env = self.audit, self.env
        workspace = audit.workspace
        token = audit.workspace.token
        script = entry.script if isinstance(entry.script, str) else "\n".join(entry.script)
        canary = audit.canary if "@CANARY_PORT@" in script else None
        # The canary serves every attempt of the audit: only connections from this one count.
        seen = len(canary.peers) if canary is not None else 0
        values = {
            "@TOKEN@": token,
            "@MEMORY_BYTES@": str(env.settings.memory_bytes),
            "@TMPFS_BYTES@": str(env.settings.tmpfs_bytes),
            "@CANARY_PORT@": str(canary.port if canary else 0),
            "@CANARY_HOSTS@": " ".join(_Canary.hosts()),
        }
        for placeholder, value in values.items():
            script = script.replace(placeholder, value)
        watch = entry.watch
        before = workspace.state(watch)
        try:
            result, error, elapsed = self._run(entry, script)
        except _NotRun:
            # An error the attack did not expect; but what it changed on the host still counts.
            changed = workspace.changed(before, watch)
            if changed:
                _escaped(f"it changed {', '.join(changed)} on the host (and then failed)")
            raise
        after = None
        if entry.after is not None:
            after, _, _ = self._run(entry, entry.after.replace("@TOKEN@", token), follow_up=True)
        checks = set(entry.escaped_if)
        output = (result.stdout + result.stderr) if result else ""
        if entry.expect_output and not re.search(entry.expect_output, output, re.MULTILINE):
            raise _NotRun(
                f"the attack could not be staged (no output matched {entry.expect_output!r}): "
                f"{_last_line(output or str(error))}"
            )
        # Only stdout: a script's own text (quoted in a shell's error message) may hold the token.
        if "token" in checks and result is not None and token in result.stdout:
            _escaped(f"the attack step worked: {_line_with(result.stdout, token)}")
        if canary is not None and canary.peers[seen:]:
            peers = ", ".join(canary.peers[seen:])
            _escaped(f"the canary on the host was reached from {peers}")
        if "completed" in checks and error is None:
            _escaped(f"the command ran to its end without being stopped ({elapsed:.1f}s)")
        if "overran" in checks and elapsed > entry.timeout + OVERRUN_GRACE:
            _escaped(f"it ran {elapsed:.1f}s, past its timeout of {entry.timeout:g}s")
        if (
            "no-pids-limit" in checks
            and result is not None
            and not result.extra.get("pids_limit_hit")
        ):
            _escaped("it ended without reaching the pids limit")
        if "after-token" in checks and after is not None and token in after.stdout:
            _escaped(f"something outlived the call: {_line_with(after.stdout, token)}")
        changed = workspace.changed(before, watch)
        if changed:
            _escaped(f"it changed {', '.join(changed)} on the host")
        how = self._defence(result, error, elapsed, canary)
        if after is not None:
            how += f"; afterwards: {_last_line(after.stdout)}"
        return how

    def _run(
        self, entry: DockerEntry, script: str, *, follow_up: bool = False
    ) -> tuple[CommandResult | None, CodecoderError | None, float]:
        request = CommandRequest(
            cwd=self.audit.workspace.path,
            script=script,
            timeout=30.0 if follow_up else entry.timeout,
            max_output=self.audit.limits.max_output,
            writable=entry.writable,
        )
        started = time.monotonic()
        try:
            result = self.env.run(request)
        except _ERRORS as exc:
            if follow_up or type(exc).__name__ not in entry.blocked_by:
                raise _NotRun(f"{type(exc).__name__}: {exc}") from exc
            return None, exc, time.monotonic() - started
        return result, None, time.monotonic() - started

    def _defence(
        self,
        result: CommandResult | None,
        error: CodecoderError | None,
        elapsed: float,
        canary: _Canary | None,
    ) -> str:
        if error is not None:
            return f"{type(error).__name__} after {elapsed:.1f}s: {_last_line(str(error))}"
        assert result is not None
        line = _last_line(result.stderr or result.stdout)
        how = f"{line} (exit code {result.exit_code})"
        if result.extra.get("pids_limit_hit"):
            how = f"reached the pids limit ({self.env.settings.pids_limit}): {how}"
        if canary is not None:
            how += "; the canary saw no connection"
        return how


def _line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), needle)
