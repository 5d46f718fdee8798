"""@confined: commands confined by Landlock and seccomp alone, where bubblewrap cannot create
namespaces (unprivileged user namespaces turned off).

The confine helper (`sandboxes/bwrap/confine.c`) restricts the command before it runs, on the
host's own file system:

    reads     beneath the system's directories (/usr, /bin, /lib*, /etc, /opt, /proc, /sys,
              /dev, /nix, /snap where they exist), the workspace, the toolchains the command
              needs (`environments.bwrap.home`) and what a trusted file adds; the home, every
              other home, /tmp, /run and the runtime's own directories are unreadable; what
              the host keeps private (`environments.privatefiles`) is left out of those roots
              (a root holding a private entry is granted entry by entry around it: a directory
              on the way can be passed through but not listed)
    privileges  none: the helper drops every capability, so a command run as root reads
              what root owns and what every account may, never another owner's files
    writes    beneath the workspace (when the call may write), a private home and a private
              TMPDIR made for the call (removed after it), and /dev/null
    network   no IPv4 or IPv6 socket at all (seccomp: no UDP either), and no TCP bind or
              connect (Landlock ABI 4)
    seccomp   the same filter as @bwrap's: no AF_UNIX sockets, ptrace, keyrings, mounts, new
              namespaces, io_uring, TIOCSTI ...
    scope     no abstract Unix sockets or signals outside the call's own processes (ABI 6)

What it cannot do, and why its ceiling is the session (foundation.ceiling): Landlock adds
rights down a tree and cannot take them away again below, so beneath the writable workspace its
protected paths (`.git/hooks`, `codecoder.json`) stay writable (protected paths a call creates
or moves are still quarantined afterwards, as for every writable sandbox); the command is a host
process in the host's PID namespace, ended with its process group, which a process can leave,
and able to read what /proc shows of the user's other processes (their environment included);
and an egress allowlist cannot be offered without a network namespace of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.environments.bwrap.environ import contained_environ
from codecoder.environments.bwrap.helper import CONFINE_FAILED, CONFINE_PREFIX, confine_binary
from codecoder.environments.bwrap.home import home_directories, program_words, toolchains
from codecoder.environments.bwrap.settings import BwrapSettings
from codecoder.environments.privatefiles import Account, machine_private_files, readable_roots
from codecoder.environments.shell import ShellEnvironment, materialized
from codecoder.environments.workspaceguard import ProtectedScan, new_repository_hint, quarantine
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.foundation.scratch import scratch_directory

__all__ = ["SYSTEM_READS", "ConfinedEnvironment"]

SYSTEM_READS: Final = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/dev", "/nix", "/snap", "/gnu",
)  # fmt: skip
BASH: Final = "/bin/bash"


class ConfinedEnvironment(Environment[CommandRequest, CommandResult]):
    """Runs `CommandRequest`s as host processes restricted by the confine helper (see above)."""

    tag = EnvironmentTag.CONFINED

    def __init__(
        self,
        workspace: Path | str,
        settings: BwrapSettings | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        helper = confine_binary()
        if helper is None:
            raise SandboxUnavailable("@confined needs codecoder's confine helper")
        self.helper = helper
        self.workspace = Path(workspace).resolve()
        self.settings = settings or BwrapSettings()
        self._environ = dict(os.environ if environ is None else environ)
        self._shell = ShellEnvironment(BASH)
        self._writing = threading.Lock()
        self._scan: ProtectedScan | None = None

    def run(self, request: CommandRequest) -> CommandResult:
        if request.snapshot is not None:
            with materialized(request.snapshot) as directory:
                return self.run(dataclasses.replace(request, cwd=directory, snapshot=None))
        if not request.writable:
            return self._confined(request)
        with self._writing:
            if self._scan is None:
                self._scan = ProtectedScan(self.workspace)
            scan = self._scan
            scan.changes()  # what the host changed is the host's business
            try:
                result = self._confined(request)
            except BaseException:
                _guard(self.workspace, scan)
                raise
            _guard(self.workspace, scan)
            return result

    def _confined(self, request: CommandRequest) -> CommandResult:
        environ = self._environ if request.env is None else request.env
        with _private_directories() as (home, tmp):
            homes = home_directories(environ)
            words = list(request.argv[:1]) if request.argv is not None else []
            if request.script is not None:
                words = program_words(request.script)
            path = environ.get("PATH", os.defpath)
            found = toolchains(words, homes, path, Path(request.cwd), self.workspace)
            private = machine_private_files(environ).view(
                Account.current(), shown=[self.workspace, *found]
            )
            system = [Path(p) for p in SYSTEM_READS if os.path.isdir(p)]
            reads = [str(p) for p in readable_roots(system, private)]
            reads += [str(t) for t in found]
            for user_home in homes:
                reads += [str(p) for p in self.settings.home_paths(user_home) if p.exists()]
            writes = [str(home), str(tmp)]
            if request.writable:
                writes.insert(0, str(self.workspace))
            else:
                reads.append(str(self.workspace))
            if not Path(request.cwd).is_relative_to(self.workspace):
                reads.append(str(request.cwd))
            options = ["--require-landlock", "--no-tcp", "--no-inet", "--write-file", "/dev/null"]
            for directory in writes:
                options += ["--write", directory]
            for directory in dict.fromkeys(reads):
                options += ["--read", directory]
            command = (
                list(request.argv)
                if request.argv is not None
                else [BASH, "--noprofile", "--norc", "-c", request.script or ""]
            )
            env = contained_environ(environ, home=str(home), passed=self.settings.env)
            env["TMPDIR"] = str(tmp)
            argv = [str(self.helper), *options, "--", *command]
            result = self._shell.run_process(argv, request, env)
        said = result.stderr.strip()
        if result.exit_code == CONFINE_FAILED and said.startswith(CONFINE_PREFIX):
            raise ExecutionFailed(f"@confined could not restrict the command: {said}")
        return result


def _guard(workspace: Path, scan: ProtectedScan) -> None:
    """After a writable call: quarantine the protected paths it created or moved, and fail."""
    changes = scan.changes()
    if not changes:
        return
    why = (
        f"a writable @confined call {changes.describe()} in the workspace; sandboxed tools may "
        "never create or move protected paths"
    )
    moved = changes.appeared + changes.unreadable
    where = quarantine(workspace, moved, why) if moved else "nothing to move"
    raise ExecutionFailed(f"{why}. Quarantined: {where}{new_repository_hint(moved)}")


@contextlib.contextmanager
def _private_directories() -> Iterator[tuple[Path, Path]]:
    """A home and a TMPDIR of the call's own, gone when it ends."""
    root = scratch_directory("codecoder-confined-")
    try:
        (root / "home").mkdir(mode=0o700)
        (root / "tmp").mkdir(mode=0o700)
        yield root / "home", root / "tmp"
    finally:
        shutil.rmtree(root, ignore_errors=True)
