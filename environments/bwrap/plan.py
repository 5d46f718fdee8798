"""The bubblewrap command line of one contained call: its namespaces, its mounts, its helper.

Mounts are made in this order, each over what came before (`SandboxPlan.argv`):

    --ro-bind / /                  the whole file system, read-only
    --dev /dev, --proc /proc       a minimal /dev (null, zero, random, tty, shm ...), a procfs of
                                   the sandbox's PID namespace, its /proc/sys read-only
    --tmpfs HIDDEN                 every home, /root, /home, /run (the Docker socket, D-Bus,
                                   every service's socket), the runtime's state and configuration
                                   directories wherever XDG puts them; a private /tmp and /var/tmp
    --ro-bind /dev/null SECRET     the host's own secrets the account can read (/etc/shadow ...)
    --ro-bind TOOLCHAIN            what the command needs of the home, read-only, the credentials
                                   in it covered (`environments.bwrap.home`)
    --file FD ~/.gitconfig         a generated git identity and `safe.directory`
    --bind WORKSPACE               writable, or --ro-bind for a read-only call; git directories
                                   outside it that a linked worktree writes
    --tmpfs HIDDEN-INSIDE          what lies in the workspace but must stay hidden, again
    --ro-bind PROTECTED            every protected path inside (`environments.bwrap.protection`)
    --ro-bind BUNDLE               the credential broker's CA bundle, at /run/codecoder/ (its
                                   key stays in the runtime's memory: `environments.broker`)
    --chdir CWD

Namespaces: user (the caller's uid and gid mapped to themselves; no capability, and no further
user namespace), mount, PID (bubblewrap's init is PID 1: when the command ends, the kernel
kills whatever it left), network (only a loopback of its own), IPC, UTS and cgroup;
`--die-with-parent` (the sandbox dies with the runtime) and `--new-session` (no controlling
terminal: nothing can be typed into the human's). Then the confine helper applies Landlock and
seccomp (`sandboxes/bwrap/confine.c`) and runs the command. A command may trace its own
processes (`--ptrace`: a debugger, LeakSanitizer) and nothing else: Landlock refuses ptrace on
any process outside its domain (bubblewrap's init included), and no other process is in the
sandbox's PID namespace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["NAMESPACE_OPTIONS", "SandboxPlan"]

NAMESPACE_OPTIONS: Final = (
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)
# Writable tmpfs mounts: private /tmp, /var/tmp and the home, each bounded.
_PRIVATE_TMP: Final = (Path("/tmp"), Path("/var/tmp"))
_HIDDEN_SIZE: Final = 64 * 1024  # an empty directory needs nothing


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(slots=True)
class SandboxPlan:
    """What one call's sandbox holds; `argv` spells it for bubblewrap and the helper."""

    workspace: Path
    cwd: Path
    writable: bool
    homes: tuple[Path, ...] = ()
    hidden: list[Path] = field(default_factory=list)
    masked: list[Path] = field(default_factory=list)  # the host's secret files
    toolchains: tuple[Path, ...] = ()
    covered: list[Path] = field(default_factory=list)  # credentials inside the toolchains
    read_only: list[Path] = field(default_factory=list)  # protected paths inside
    writable_extra: list[Path] = field(default_factory=list)  # git directories outside
    snapshot: Path | None = None
    tmp_size: int = 1024**3
    ca_bundle: Path | None = None  # the credential broker's CA bundle (environments.broker)

    def mounts(self, gitconfig_fd: int | None) -> list[str]:
        args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        writable_roots = [self.workspace, *self.writable_extra]
        hidden_outside = [
            h
            for h in self.hidden
            if not any(_inside(h, other) for other in self.hidden if other != h)
        ]
        for path in hidden_outside:
            if path in self.homes:
                continue  # below, with a size and the user's permissions
            args += ["--size", str(_HIDDEN_SIZE), "--perms", "0755", "--tmpfs", str(path)]
        for home in self.homes:
            args += ["--size", str(self.tmp_size), "--perms", "0700", "--tmpfs", str(home)]
        for path in _PRIVATE_TMP:
            args += ["--size", str(self.tmp_size), "--perms", "1777", "--tmpfs", str(path)]
        for secret in self.masked:
            args += ["--ro-bind", "/dev/null", str(secret)]
        for toolchain in self.toolchains:
            args += ["--ro-bind", str(toolchain), str(toolchain)]
        for secret in self.covered:
            if secret.is_dir():
                args += ["--size", str(_HIDDEN_SIZE), "--perms", "0700", "--tmpfs", str(secret)]
            else:
                args += ["--ro-bind", "/dev/null", str(secret)]
        if gitconfig_fd is not None and self.homes:
            args += ["--perms", "0600", "--file", str(gitconfig_fd), f"{self.homes[0]}/.gitconfig"]
        args += [
            "--bind" if self.writable else "--ro-bind",
            str(self.workspace),
            str(self.workspace),
        ]
        if self.writable:
            for extra in self.writable_extra:
                args += ["--bind", str(extra), str(extra)]
        for path in self.hidden:
            if any(_inside(path, root) and path != root for root in writable_roots):
                args += ["--size", str(_HIDDEN_SIZE), "--perms", "0755", "--tmpfs", str(path)]
        if self.writable:
            for path in self.read_only:
                args += ["--ro-bind", str(path), str(path)]
        if self.snapshot is not None:
            args += ["--ro-bind", str(self.snapshot), str(self.snapshot)]
        if self.ca_bundle is not None:
            from codecoder.environments.broker import BUNDLE_PATH

            args += ["--ro-bind", str(self.ca_bundle), BUNDLE_PATH]
        args += ["--chdir", str(self.cwd)]
        return args

    def helper_options(self, ready_fd: int | None, listen_fd: int | None) -> list[str]:
        """What the confine helper restricts: writes beneath the workspace (when writable), the
        private /tmp, /var/tmp, the home and /dev; signals and abstract sockets scoped; tracing
        left to Landlock, which keeps it within the sandbox's own processes (`--ptrace`: a
        debugger or LeakSanitizer traces its own; the PID namespace shows nothing else)."""
        writes = [*_PRIVATE_TMP, *self.homes, Path("/dev")]
        if self.writable:
            writes = [self.workspace, *self.writable_extra, *writes]
        options: list[str] = ["--ptrace"]
        for path in writes:
            options += ["--write", str(path)]
        if ready_fd is not None:
            options += ["--ready", str(ready_fd)]
        if listen_fd is not None:
            from codecoder.environments.egress import PROXY_PORT

            options += ["--listen", str(PROXY_PORT), str(listen_fd)]
        return options
