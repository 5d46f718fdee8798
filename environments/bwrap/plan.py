"""The bubblewrap command line of one contained call: its namespaces, its mounts, its helper.

Mounts are made in this order, each over what came before (`SandboxPlan.argv`):

    --ro-bind / /                  the whole file system, read-only
    --dev /dev, --proc /proc       a minimal /dev (null, zero, random, tty, shm ...), a procfs of
                                   the sandbox's PID namespace, its /proc/sys read-only, and
                                   the kernel's files there only root may read covered
    --tmpfs /sys                   of the kernel's /sys, only the parts commands read
                                   (`environments.privatefiles.SHOWN_SYS`), read-only
    --tmpfs /tmp, /var/tmp         private, writable, bounded (before the homes: a home beneath
                                   /tmp is mounted in it, not covered by it)
    --tmpfs HIDDEN                 every home, /root, /home, /run (the Docker socket, D-Bus,
                                   every service's socket), the runtime's state and configuration
                                   directories wherever XDG puts them
    --tmpfs PRIVATE, --ro-bind EMPTY PRIVATE
                                   what the host keeps private (not readable by every account)
                                   and the account could read, whatever its name: an empty
                                   tmpfs over a directory, an empty file over a file
                                   (`environments.privatefiles`)
    --ro-bind TOOLCHAIN            what the command needs of the home, read-only, the credentials
                                   in it covered (`environments.bwrap.home`), its configuration
                                   files replaced by an empty file
    --file FD ~/.gitconfig         a generated git identity and `safe.directory`
    --bind WORKSPACE               writable, or --ro-bind for a read-only call; git directories
                                   outside it that a linked worktree writes; each git directory
                                   inside it bound onto itself (a mount point: it cannot be
                                   renamed or replaced)
    --tmpfs HIDDEN-INSIDE          what lies in the workspace but must stay hidden, again
    --ro-bind PROTECTED            every protected path inside (`environments.bwrap.protection`)
    --ro-bind BUNDLE               the credential broker's CA bundle, at /run/codecoder/ (its
                                   key stays in the runtime's memory: `environments.broker`)
    --chdir CWD

The confine helper is handed to bubblewrap as an open descriptor and run as /proc/self/fd/N
(`environments.bwrap.helper.helper_command`): wherever codecoder is installed (a venv in a home
or under /tmp, which every sandbox hides), whatever the sandbox shows, the helper runs, and it
closes the descriptor with every other inherited one before the command starts.

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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from codecoder.environments.privatefiles import PrivateView

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
    private: PrivateView = field(default_factory=PrivateView)  # the host's private entries
    kernel_private: tuple[Path, ...] = ()  # in /proc (environments.privatefiles)
    sys_shown: tuple[Path, ...] = ()  # the parts of /sys shown
    toolchains: tuple[Path, ...] = ()
    covered: list[Path] = field(default_factory=list)  # credentials inside the toolchains
    emptied: list[Path] = field(default_factory=list)  # their configuration files
    empty_file: Path | None = None  # an empty regular file of the runtime's, bound over those
    read_only: list[Path] = field(default_factory=list)  # protected paths inside
    writable_extra: list[Path] = field(default_factory=list)  # git directories outside
    pinned: list[Path] = field(default_factory=list)  # git directories inside, onto themselves
    snapshot: Path | None = None
    tmp_size: int = 1024**3
    ca_bundle: Path | None = None  # the credential broker's CA bundle (environments.broker)

    def mounts(self, gitconfig_fd: int | None) -> list[str]:
        args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--ro-bind", "/proc/sys", "/proc/sys"]
        empty = str(self.empty_file or "/dev/null")
        for secret in self.kernel_private:
            args += ["--ro-bind", empty, str(secret)]
        args += ["--size", str(_HIDDEN_SIZE), "--perms", "0755", "--tmpfs", "/sys"]
        for shown in self.sys_shown:
            args += ["--ro-bind", str(shown), str(shown)]
        # The private /tmp first: a home or hidden directory beneath it (HOME=/tmp/...) is then
        # mounted in it, rather than covered by it.
        for path in _PRIVATE_TMP:
            args += ["--size", str(self.tmp_size), "--perms", "1777", "--tmpfs", str(path)]
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
        # Outermost first: a $HOME inside the account's home is mounted over it, not under.
        for home in sorted(self.homes, key=lambda p: len(p.parts)):
            args += ["--size", str(self.tmp_size), "--perms", "0700", "--tmpfs", str(home)]
        # What the host keeps private is covered where it still is: an entry removed since
        # the plan was made hides nothing, and its mount point could not be made in the
        # read-only root (bubblewrap would fail the whole sandbox; a warm one is built later).
        for directory in self.private.directories:
            if os.path.lexists(directory):
                args += ["--size", str(_HIDDEN_SIZE), "--perms", "0700", "--tmpfs", str(directory)]
        for secret in self.private.files:
            if os.path.lexists(secret):
                args += ["--ro-bind", empty, str(secret)]
        for toolchain in self.toolchains:
            args += ["--ro-bind", str(toolchain), str(toolchain)]
        for secret in self.covered:
            if secret.is_dir():
                args += ["--size", str(_HIDDEN_SIZE), "--perms", "0700", "--tmpfs", str(secret)]
            else:
                args += ["--ro-bind", "/dev/null", str(secret)]
        for setting in self.emptied:
            # An empty regular file (a tool reads "no settings"), never the device, which a
            # nodev mount makes unreadable (a tool would fail on its configuration).
            args += ["--ro-bind", empty, str(setting)]
        if gitconfig_fd is not None and self.homes:
            args += ["--perms", "0600", "--file", str(gitconfig_fd), f"{self.homes[0]}/.gitconfig"]
        args += [
            "--bind" if self.writable else "--ro-bind",
            str(self.workspace),
            str(self.workspace),
        ]
        if self.writable:
            for extra in (*self.writable_extra, *self.pinned):
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
