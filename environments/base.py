"""What every environment offers: run one request, close.

An environment is the place a tool's work happens (`@shell`, `@docker`, `@wasm`). It knows
nothing of permissions: by the time a request reaches it, the dispatcher has decided.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

from codecoder.foundation.ceiling import EnvironmentTag


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Code to run from a copy that cannot change under it: files (relative path -> bytes) and
    the digest they were approved at (`runtime.config.capabilities.capability_digest`).

    The environment writes the files where the command cannot change them, checks them there
    (the digest, or the bytes read back) and starts the command in that directory.
    """

    files: Mapping[str, bytes]
    digest: str


@dataclass(frozen=True, slots=True)
class Connection:
    """One connection a sandboxed call asked its egress proxy for, and how it went."""

    host: str
    port: int
    allowed: bool
    reason: str  # why it was refused, or what admitted it
    address: str | None = None  # where it went (the address checked, never re-resolved)
    sent: int = 0  # bytes from the sandbox
    received: int = 0  # bytes to the sandbox
    duration: float = 0.0


class NetworkGate(Protocol):
    """The caller's say over a call's connections (`docker.network: {"allow": [...]}`): the
    permission chain for the key `network:<host>`, and the audit log."""

    def admit(self, host: str, port: int) -> str | None:
        """None when the call may connect to `host`, else why not (asking the human if need be)."""

    def record(self, connection: Connection) -> None:
        """Called once for every connection asked for, admitted or not, when it ends."""


Stream = Literal["stdout", "stderr"]


class OutputListener(Protocol):
    """Whoever watches a command's output while it runs (`CommandRequest.output`).

    Called with each piece of output as it arrives, in order, from whichever thread reads it:
    raw bytes (a piece may end inside a character or a line). A command environment calls it
    for everything the command writes, as it writes it; a sandbox that cannot pass on
    everything (too much, too fast) passes on a marker saying how much it left out.
    """

    def __call__(self, stream: Stream, data: bytes) -> None: ...


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """A command to run: either `argv` (executed directly, no shell) or `script` (run by bash).

    Exactly one of the two is set. `writable` says whether the call may change the workspace
    (sandboxed environments mount it read-only otherwise). `grant` names the grant the call
    was allowed under (`Decision.grant`); a sandbox keeps state (its home, /tmp) only between
    calls of the same grant, and None means this call alone. `snapshot`, when set, is the code
    the command runs from, and replaces `cwd`. When `cancel` is set while the command runs, the
    environment stops it (as at a timeout) and raises `Cancelled`. `network` decides the call's
    connections where the sandbox has an egress allowlist (None: every one is refused).
    `output`, when set, is given the command's output as it comes (`OutputListener`): what a
    terminal shows while the command runs, and what is kept of it when the call is
    interrupted, cancelled or killed at its deadline.
    """

    cwd: Path
    argv: tuple[str, ...] | None = None
    script: str | None = None
    timeout: float = 120.0
    max_output: int = 64 * 1024
    env: dict[str, str] | None = None
    stdin: bytes = b""
    writable: bool = False
    grant: str | None = None
    snapshot: Snapshot | None = None
    cancel: threading.Event | None = field(default=None, compare=False)
    network: NetworkGate | None = field(default=None, compare=False)
    output: OutputListener | None = field(default=None, compare=False)
    # The session the call belongs to: a warm sandbox serves only calls of the session it was
    # started for (@bwrap); None for a caller with no session.
    session: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.argv is None) == (self.script is None):
            raise ValueError("a CommandRequest has exactly one of argv and script")
        if self.argv is not None and not self.argv:
            raise ValueError("argv must not be empty")


@dataclass(slots=True)
class CommandResult:
    """How a command ended. Output is text (decoded with replacement), capped head and tail."""

    exit_code: int
    stdout: str
    stderr: str
    duration: float
    truncated: bool = False
    timed_out: bool = False
    killed_by: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


RequestT = TypeVar("RequestT")
ResultT = TypeVar("ResultT")


class Environment(abc.ABC, Generic[RequestT, ResultT]):
    """One backend. `run()` executes a request; `close()` releases what it holds.

    Command environments (@shell, @docker) take a `CommandRequest` and return a
    `CommandResult`; @wasm has its own request type (a module, argv, preopened directories).
    """

    tag: EnvironmentTag

    @abc.abstractmethod
    def run(self, request: RequestT) -> ResultT:
        """Run the request to completion (or to its timeout) and report how it ended."""

    def close(self) -> None:
        """Release containers, processes, caches held for this environment."""

    def end_session(self, session: str) -> None:
        """Release what this environment holds for `session` alone (nothing by default)."""

    def __enter__(self) -> Environment[RequestT, ResultT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CommandEnvironment = Environment[CommandRequest, CommandResult]
