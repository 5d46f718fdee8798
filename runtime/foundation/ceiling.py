"""The ceiling rule, in one place: which grant scopes each environment may receive.

Permanent trust (AlwaysThisProject) goes only to tools whose environment contains them. A tool
running on the host (@shell) can be trusted at most for the session that granted it.
"""

from __future__ import annotations

import enum


class Scope(enum.IntEnum):
    """How long a grant lasts; the order means something (a wider scope is larger)."""

    ONCE = 1
    SESSION = 2
    PROJECT = 3

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> Scope:
        for scope, name in _LABELS.items():
            if name == label:
                return scope
        raise ValueError(f"unknown scope {label!r}")


_LABELS = {
    Scope.ONCE: "Once",
    Scope.SESSION: "AlwaysThisSession",
    Scope.PROJECT: "AlwaysThisProject",
}


class EnvironmentTag(enum.StrEnum):
    """Where a tool runs. The ceiling of each is defined here and nowhere else."""

    SHELL = "@shell"
    BWRAP = "@bwrap"
    CONFINED = "@confined"
    DOCKER = "@docker"
    WASM = "@wasm"
    LANDLOCK = "@landlock"
    RUNTIME = "@runtime"

    @property
    def ceiling(self) -> Scope:
        return _CEILINGS[self]

    @property
    def containment(self) -> str:
        return _CONTAINMENT[self]

    @property
    def confines_read_only(self) -> bool:
        """Whether a command it runs read-only (`CommandRequest.writable=False`) is confined by
        the kernel to reading: the whole file system read-only, the user's secrets hidden, no
        network. A read-only command needs no question only there (SPEC §5)."""
        return self in _CONFINES_READ_ONLY

    def allows(self, scope: Scope) -> bool:
        return scope <= self.ceiling

    def refusal(self, key: str) -> str:
        """Why `key` cannot be granted for the project, in words a user can act on."""
        return (
            f"{key} runs in {self.value} ({self.containment}), whose ceiling is "
            f"{self.ceiling.label}: permanent trust goes only to sandboxed tools"
        )


_CEILINGS = {
    EnvironmentTag.SHELL: Scope.SESSION,
    # Commands in bubblewrap's namespaces with Landlock on top (SPEC §6): the workspace writable
    # but its protected paths read-only, the user's secrets hidden, the network only through
    # the egress proxy (each host a permission of its own).
    EnvironmentTag.BWRAP: Scope.PROJECT,
    # Commands confined by Landlock and seccomp alone, where bubblewrap cannot create
    # namespaces: reads and writes limited, no TCP, but no mount namespace to keep the
    # workspace's own protected paths (.git/hooks, codecoder.json) read-only and no PID
    # namespace to end what a command leaves running. A host process, then: the session.
    EnvironmentTag.CONFINED: Scope.SESSION,
    EnvironmentTag.DOCKER: Scope.PROJECT,
    EnvironmentTag.WASM: Scope.PROJECT,
    # Kernel confinement counts as a sandbox (SPEC §8): a Landlock-restricted worker, and reads
    # that openat2 resolves only beneath the workspace.
    EnvironmentTag.LANDLOCK: Scope.PROJECT,
    EnvironmentTag.RUNTIME: Scope.PROJECT,
}

# @docker with a read-only workspace would qualify too; SPEC §5 names @bwrap, the default for
# commands, and a project that binds run_command elsewhere keeps its questions.
_CONFINES_READ_ONLY = frozenset({EnvironmentTag.BWRAP})

_CONTAINMENT = {
    EnvironmentTag.SHELL: "host processes, not sandboxed",
    EnvironmentTag.BWRAP: (
        "host processes in bubblewrap namespaces: protected paths read-only, secrets hidden, "
        "the network only through the egress proxy, each host asked"
    ),
    EnvironmentTag.CONFINED: (
        "host processes confined by Landlock and seccomp only: reads limited, writes beneath the "
        "workspace (its protected paths included), no TCP"
    ),
    EnvironmentTag.DOCKER: "a hardened container",
    EnvironmentTag.WASM: "a WASI sandbox",
    EnvironmentTag.LANDLOCK: "kernel-confined to reading the workspace (Landlock, openat2)",
    EnvironmentTag.RUNTIME: "in-process, no external code",
}
