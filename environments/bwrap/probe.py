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
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from codecoder.environments.bwrap.helper import confine_binary, confine_problem, helper_command
from codecoder.environments.bwrap.home import hidden_paths, home_directories
from codecoder.environments.bwrap.plan import NAMESPACE_OPTIONS, SandboxPlan
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.sandboxes.landlock.worker import landlock_abi

__all__ = ["CommandSandbox", "bwrap_binary", "command_sandbox", "probe"]

# Where bubblewrap is looked for: the system's directories only, never a PATH entry a sandbox
# could write.
SYSTEM_DIRECTORIES: Final = "/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin"
TRIAL_SECONDS: Final = 10.0


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
    """`probe()` on this machine, once per process."""
    return probe()


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
        plan = _trial_plan()
        with contextlib.ExitStack() as stack:
            inside, fd = helper_command(Path(helper), stack)
            failed = _trial(
                [
                    found,
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
