"""The escape-attempt corpus: one JSON file per layer beside this module (their README describes
the fields), read into validated entries, an `Attempt` each, in corpus order.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from codecoder.foundation.errors import (
    ExecutionFailed,
    ExecutionTimeout,
    OutOfFuel,
    OutOfMemory,
    SandboxUnavailable,
)

__all__ = ["LAYERS", "Attempt", "Layer", "load_corpus"]


Layer: TypeAlias = Literal[
    "keying",
    "contained",
    "permission-files",
    "rules",
    "hooks",
    "wasm",
    "bwrap",
    "docker",
    "pool",
]
# The order they run in: the cheap layers first, so a broken keyer shows up in a second.
LAYERS: Final[tuple[Layer, ...]] = (
    "keying",
    "contained",
    "permission-files",
    "rules",
    "hooks",
    "wasm",
    "bwrap",
    "docker",
    "pool",
)

ErrorName = Literal[
    "ExecutionTimeout", "OutOfMemory", "OutOfFuel", "ExecutionFailed", "SandboxUnavailable"
]
_ERRORS: Final = (ExecutionTimeout, OutOfMemory, OutOfFuel, ExecutionFailed, SandboxUnavailable)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z-]+\.[a-z0-9-]+$")
    description: str = Field(min_length=1)
    defence: str = Field(min_length=1)


class KeyingEntry(_Entry):
    command: str
    innocent: str
    wildcard: bool = True
    sandbox_grant: bool = False
    program_wide: bool = True
    deny: tuple[str, ...] = ()
    expect: Literal["refused", "argv"] = "refused"
    argv: tuple[str, ...] | None = None
    display: bool = False


class ContainedEntry(_Entry):
    kind: Literal["read-only", "filter", "escalation"]
    command: str
    args: dict[str, Any] = Field(default_factory=dict)
    grants: tuple[str, ...] = ()
    innocent: str | None = None
    answer: Literal[
        "deny", "once", "session", "session-program", "project", "project-program", "project-any"
    ] = "deny"


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
        "question-preview",
    ]
    call: ToolCall
    entry: dict[str, str] = Field(default_factory=dict)
    text: str | None = None
    answer: Literal["once", "session", "project", "project-program", "project-any"] | None = None
    grants: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    script: tuple[str, ...] = ()
    script_file: str | None = None
    follow_up: tuple[ToolCall, ...] = ()
    tamper: FileChange | None = None
    document: dict[str, Any] | None = None
    expect_error: str | None = None
    links: dict[str, str] = Field(default_factory=dict)


class RulesEntry(_Entry):
    """An attempt of the rules layer (rules.json: its `about` says how each field is used)."""

    kind: Literal[
        "broken-rules",
        "reload-broken",
        "from-subdirectory",
        "untrusted-binding",
        "trusted-edit",
        "host-git-plant",
        "host-plant",
        "borrowed-objects",
    ]
    text: str | None = None
    edited: str | None = None
    command: str | None = None
    allow: tuple[str, ...] = ()
    plant: dict[str, str] = Field(default_factory=dict)
    copy_command: str | None = None
    then: str | None = None
    call: ToolCall | None = None


class HooksEntry(_Entry):
    """An attempt of the hooks layer (hooks.json): another agent's call, as its host sends it."""

    host: Literal["claude-code", "gemini"]
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] | None = None
    text: str | None = None
    allow: tuple[str, ...] = ()
    mcp_context: dict[str, Any] | None = None
    cwd: str = "."
    files: dict[str, str] = Field(default_factory=dict)
    links: dict[str, str] = Field(default_factory=dict)
    plant_hook: bool = False


DockerCheck = Literal[
    "token",
    "completed",
    "overran",
    "no-pids-limit",
    "after-token",
    "partial",
    "threads",
    "set-id",
    "during",
]


class DockerVariant(BaseModel):
    """How an attempt is carried out under another engine runtime (`under` in the corpus, by
    the runtime's name), or with the workspace synced into a volume (`under.sync`: a remote
    engine), where the same script would test something else there; `why` says what differs.
    In sync mode, what a call does to the workspace happens in the sandbox's own copy, so an
    attempt on the workspace is judged by what reaches the host (`watch`), not by whether the
    step worked inside."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    why: str = Field(min_length=1)
    script: str | tuple[str, ...] | None = None
    defence: str | None = None
    blocked_by: tuple[ErrorName, ...] | None = None
    escaped_if: tuple[DockerCheck, ...] | None = None
    watch: tuple[str, ...] | None = None
    not_applicable: bool = False


class Whole(BaseModel):
    """A change set applied whole or not at all: after the call, `glob` matches `count` paths
    on the host when it succeeded, none when it failed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    glob: str
    count: int = Field(gt=0)


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
    # The project's Docker settings with these replaced (`workspace`, `network`, `disk_budget`).
    settings: dict[str, Any] = Field(default_factory=dict)
    host_files: dict[str, str] = Field(default_factory=dict)
    host_links: dict[str, str] = Field(default_factory=dict)
    host_reads: tuple[str, ...] = ()
    nofile: int | None = Field(default=None, ge=64)
    whole: Whole | None = None

    @field_validator("under", mode="before")
    @classmethod
    def _runtimes(cls, value: Any) -> Any:
        return tuple(value.items()) if isinstance(value, dict) else value

    def variant(self, runtime: str | None) -> DockerVariant | None:
        return dict(self.under).get(runtime or "")

    def under_runtime(self, runtime: str | None) -> DockerEntry:
        """This attempt as carried out under `runtime` (itself where nothing differs)."""
        return self._as(self.variant(runtime))

    def in_sync_mode(self) -> DockerEntry:
        """This attempt as carried out against a synced workspace (itself where nothing
        differs)."""
        return self._as(self.variant("sync"))

    def _as(self, variant: DockerVariant | None) -> DockerEntry:
        if variant is None:
            return self
        changes: dict[str, Any] = {
            name: getattr(variant, name)
            for name in ("script", "defence", "blocked_by", "escaped_if", "watch")
            if getattr(variant, name) is not None
        }
        return self.model_copy(update=changes)


BwrapCheck = Literal["token", "listener", "host-process", "outlived", "home", "set-id", "during"]


class BwrapEntry(_Entry):
    script: str | tuple[str, ...]
    writable: bool = False
    timeout: float = Field(default=30.0, gt=0)
    escaped_if: tuple[BwrapCheck, ...] = ("token",)
    blocked_by: tuple[ErrorName, ...] = ()
    watch: tuple[str, ...] = ()
    expect_output: str | None = None
    stage: tuple[
        Literal["setuid-binary", "credential-route", "egress-admits-all", "private-files"], ...
    ] = ()
    env: dict[str, str] = Field(default_factory=dict)
    # Home entries shown as a trusted `"bwrap": {"home": [...]}` would show them.
    home: tuple[str, ...] = ()
    # A second script, run in the same environment after a pause: the warm sandbox built after
    # the first call serves it (the checks look at what it printed and what both left).
    then: str | tuple[str, ...] | None = None


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


class PoolEntry(_Entry):
    kind: Literal[
        "stale-protected",
        "replaced-protected",
        "replaced-workspace",
        "state-across-sessions",
        "loose-template",
        "foreign-uid",
        "rebuilt-image",
    ]
    path: str | None = None
    directory: bool = False
    write: str | None = None
    template: dict[str, Any] = Field(default_factory=dict)
    rebuild: Literal["build", "tag"] | None = None


AnyEntry: TypeAlias = (
    KeyingEntry
    | ContainedEntry
    | PermissionFileEntry
    | RulesEntry
    | HooksEntry
    | DockerEntry
    | WasmEntry
    | BwrapEntry
    | PoolEntry
)
_ENTRY_TYPES: Final[dict[Layer, type[AnyEntry]]] = {
    "keying": KeyingEntry,
    "contained": ContainedEntry,
    "permission-files": PermissionFileEntry,
    "rules": RulesEntry,
    "hooks": HooksEntry,
    "wasm": WasmEntry,
    "bwrap": BwrapEntry,
    "docker": DockerEntry,
    "pool": PoolEntry,
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
