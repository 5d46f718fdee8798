"""Which environment contains commands on this machine, and why (`command_sandbox`).

Tried, not guessed: bubblewrap is run once with the very namespaces, hidden directories and
helper every call uses (`bwrap ... /proc/self/fd/N -- /bin/true`, the helper passed by
descriptor from wherever codecoder is installed: a trial that saw more of the host than a call
does would pass where every call fails); where that fails (bubblewrap missing, unprivileged user
namespaces turned off, a seccomp or AppArmor policy refusing them), the confine helper is run
alone with Landlock required; where that fails too, commands run on the host (@shell). The
answer is kept for the life of the process (the decision server asks once, before it forks).

    @bwrap      bubblewrap's namespaces, Landlock and seccomp (environments.bwrap.environment)
    @confined   Landlock and seccomp alone (environments.bwrap.confined)
    @shell      nothing (environments.shell)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from codecoder.environments.bwrap import remembered
from codecoder.environments.bwrap.helper import confine_binary, confine_problem, helper_command
from codecoder.environments.bwrap.home import hidden_paths, home_directories
from codecoder.environments.bwrap.plan import NAMESPACE_OPTIONS, SandboxPlan
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.sandboxes.landlock.worker import landlock_abi

__all__ = [
    "CommandSandbox",
    "bwrap_binary",
    "command_sandbox",
    "forget_bwrap_works",
    "machine_key",
    "probe",
]

# Where bubblewrap is looked for: the system's directories only, never a PATH entry a sandbox
# could write.
SYSTEM_DIRECTORIES: Final = "/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin"
TRIAL_SECONDS: Final = 10.0
TRIAL_ATTEMPTS: Final = 3
_REMEMBERED: Final = "command-sandbox"
# The kernel's switches for unprivileged user namespaces (Debian, upstream, Ubuntu's AppArmor).
_USERNS_SWITCHES: Final = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)


@dataclass(frozen=True, slots=True)
class CommandSandbox:
    """Where commands run here by default (`tag`), and why, in words a user can act on."""

    tag: EnvironmentTag
    reason: str
    bwrap: str | None = None
    bwrap_version: str | None = None
    landlock_abi: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "environment": self.tag.value,
            "reason": self.reason,
            "bwrap": self.bwrap,
            "bwrap_version": self.bwrap_version,
            "landlock_abi": self.landlock_abi,
        }


def bwrap_binary() -> str | None:
    """bubblewrap, from the system's directories."""
    return shutil.which("bwrap", path=SYSTEM_DIRECTORIES)


@functools.cache
def command_sandbox() -> CommandSandbox:
    """`probe()` on this machine, once per process; that bubblewrap works is remembered
    between processes for as long as what it depends on stays the same (`machine_key`)."""
    key = machine_key()
    if key is not None:
        known = remembered.recall(_REMEMBERED, key)
        if isinstance(known, dict):
            try:
                found = CommandSandbox(**{**known, "tag": EnvironmentTag(known["tag"])})
            except (KeyError, TypeError, ValueError):
                found = None
            if found is not None and found.tag is EnvironmentTag.BWRAP:
                return found
    found = probe()
    if key is not None and found.tag is EnvironmentTag.BWRAP:
        remembered.remember(_REMEMBERED, key, {**asdict(found), "tag": found.tag.value})
    return found


def forget_bwrap_works() -> None:
    """A sandbox failed to build: the next process probes again."""
    remembered.forget(_REMEMBERED)


def machine_key() -> dict[str, Any] | None:
    """What the probe's answer depends on: bubblewrap's binary (which file, which version of
    it), the confine helper (its digest), the kernel, the boot, the user-namespace switches,
    the user, this process's confinement (`_process_context`), Landlock's ABI and what the
    trial sandbox mounts (`_trial_plan`). None where there is no bubblewrap or helper to
    remember."""
    bwrap, helper = bwrap_binary(), confine_binary()
    if bwrap is None or helper is None:
        return None
    try:
        real = os.path.realpath(bwrap)
        info = os.stat(real)
        digest = hashlib.sha256(helper.read_bytes()).hexdigest()
    except OSError:
        return None
    switches: dict[str, str | None] = {}
    for path in _USERNS_SWITCHES:
        try:
            with open(path) as file:
                switches[path] = file.read().strip()
        except OSError:
            switches[path] = None
    boot: str | None = None
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as file:
        boot = file.read().strip()
    uname = os.uname()
    return {
        "bwrap": [real, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns],
        "helper": [str(helper), digest],
        "kernel": [uname.release, uname.version, uname.machine],
        "boot": boot,
        "userns": switches,
        "uid": [os.getuid(), os.geteuid()],
        "process": _process_context(),
        "landlock": landlock_abi(),
        # The trial sandbox hides what a call's hides (the homes, the runtime's directories).
        "trial": [str(part) for part in _trial_plan().mounts(None)],
    }


def _process_context() -> dict[str, str | None]:
    """What of this process decides whether it may make namespaces: its capabilities (the
    bounding set included), no_new_privs, its seccomp filters, its user and mount namespaces
    and its security label. A client confined otherwise than the process that remembered
    probes for itself."""
    context: dict[str, str | None] = {}
    try:
        with open("/proc/self/status") as file:
            for line in file:
                name, _, value = line.partition(":")
                if name.startswith("Cap") or name in ("NoNewPrivs", "Seccomp", "Seccomp_filters"):
                    context[name] = value.strip()
    except OSError:
        context["status"] = None
    for namespace in ("user", "mnt"):
        try:
            context[namespace] = os.readlink(f"/proc/self/ns/{namespace}")
        except OSError:
            context[namespace] = None
    try:
        with open("/proc/self/attr/current") as file:
            context["label"] = file.read().strip("\0\n ")
    except OSError:
        context["label"] = None
    return context


def probe(bwrap: str | None = None) -> CommandSandbox:
    """Try bubblewrap (`bwrap`, else the system's), then Landlock alone; see the module
    docstring."""
    abi = landlock_abi()
    problem = confine_problem()
    if problem is not None:
        return CommandSandbox(EnvironmentTag.SHELL, f"commands run on the host: {problem}")
    helper = str(confine_binary())
    found = bwrap or bwrap_binary()
    if found is None:
        why = "bubblewrap is not installed (apt-get install bubblewrap)"
        version = None
    else:
        version = _version(found)
        failed = _bwrap_trial(found, helper)
        if failed is None:
            return CommandSandbox(
                EnvironmentTag.BWRAP,
                f"bubblewrap {version or ''} creates the sandbox's namespaces; "
                + (f"Landlock ABI {abi} and " if abi else "no Landlock in this kernel; ")
                + "seccomp on top",
                found,
                version,
                abi,
            )
        why = f"bubblewrap cannot create namespaces here ({failed})"
    if abi < 1:
        return CommandSandbox(
            EnvironmentTag.SHELL,
            f"commands run on the host, unconfined: {why}, and this kernel has no Landlock",
            found,
            version,
            abi,
        )
    refused = _trial([helper, "--require-landlock", "--no-tcp", "--read", "/", "--", "/bin/true"])
    if refused is not None:
        return CommandSandbox(
            EnvironmentTag.SHELL,
            f"commands run on the host, unconfined: {why}, and Landlock refused ({refused})",
            found,
            version,
            abi,
        )
    return CommandSandbox(
        EnvironmentTag.CONFINED,
        f"{why}; Landlock ABI {abi} and seccomp confine commands instead (no namespaces: "
        "grants last the session)",
        found,
        version,
        abi,
    )


def _bwrap_trial(bwrap: str, helper: str) -> str | None:
    """None when a trial sandbox was built and ran `/bin/true`; else what went wrong the last of
    `TRIAL_ATTEMPTS` times. Tried again, from a new plan, as every call's sandbox is: bubblewrap
    fails now and then while the host's mounts change (containers/bubblewrap#650), a private
    entry planned can vanish before bubblewrap binds over it, and a loaded machine can take
    longer than `TRIAL_SECONDS`. One such moment must not make a whole process (an MCP server, a
    decision server) fall back to @confined for its life."""
    failed: str | None = None
    for _ in range(TRIAL_ATTEMPTS):
        plan = _trial_plan()
        with contextlib.ExitStack() as stack:
            inside, fd = helper_command(Path(helper), stack)
            failed = _trial(
                [
                    bwrap,
                    *NAMESPACE_OPTIONS,
                    *plan.mounts(None),
                    "--",
                    inside,
                    *plan.helper_options(None, None),
                    "--",
                    "/bin/true",
                ],
                pass_fds=(fd,),
            )
        if failed is None:
            return None
    return failed


def _trial_plan() -> SandboxPlan:
    """A read-only sandbox that hides what a call's hides (the homes, /run, /tmp, the
    runtime's own directories). Its workspace is /usr,
    which every sandbox shows read-only anyway (binding / again would undo the hiding)."""
    homes = home_directories(os.environ)
    return SandboxPlan(
        workspace=Path("/usr"),
        cwd=Path("/"),
        writable=False,
        homes=homes,
        hidden=hidden_paths(os.environ, homes),
        tmp_size=1024**2,
    )


def _trial(argv: list[str], pass_fds: tuple[int, ...] = ()) -> str | None:
    """None when `argv` ran and exited 0; else what went wrong, in a line."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TRIAL_SECONDS,
            check=False,
            pass_fds=pass_fds,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    said = (done.stderr or done.stdout).strip().splitlines()
    return said[-1] if said else f"exit code {done.returncode}"


def _version(bwrap: str) -> str | None:
    try:
        done = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = done.stdout.split()
    return words[-1] if done.returncode == 0 and words else None
