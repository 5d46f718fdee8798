"""The confine helper (`sandboxes/bwrap/confine.c`): the static program that applies Landlock and
the seccomp filter as the last step before a contained command runs, where to find it, and how
a sandbox runs it.

A sandbox hides the homes and the host's /tmp, where codecoder is often installed (a venv in a
clone in the home, under /tmp), so bubblewrap is not given the helper's path: it is given an
open descriptor of it (`helper_command`) and runs /proc/self/fd/N, which resolves to the file
whatever the sandbox shows. The helper closes every inherited descriptor, that one included,
before the command runs (`close_range`), so the command never holds it."""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import os
import platform
from pathlib import Path

__all__ = ["CONFINE_FAILED", "confine_binary", "confine_problem", "helper_command"]

# The helper's exit status when it could not restrict itself (nothing ran), and the start of
# what it says then on standard error.
CONFINE_FAILED = 125
CONFINE_PREFIX = "codecoder-confine:"

_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@functools.cache
def confine_binary() -> Path | None:
    """The helper built for this machine's architecture, if it is installed and executable."""
    arch = _ARCHES.get(platform.machine().lower())
    if arch is None:
        return None
    path = Path(str(importlib.resources.files("codecoder.sandboxes").joinpath("bwrap")))
    binary = path / f"confine-{arch}"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def confine_problem() -> str | None:
    """Why the helper cannot be used here, or None."""
    arch = _ARCHES.get(platform.machine().lower())
    if arch is None:
        return f"the confine helper is built for x86_64 and aarch64, not {platform.machine()}"
    if confine_binary() is None:
        return (
            f"the confine helper (codecoder/sandboxes/bwrap/confine-{arch}) is missing or not "
            "executable; reinstall codecoder"
        )
    return None


def helper_command(helper: Path, stack: contextlib.ExitStack) -> tuple[str, int]:
    """What bubblewrap runs for `helper` (`/proc/self/fd/N`) and the descriptor N to pass it,
    closed when `stack` closes."""
    fd = os.open(helper, os.O_RDONLY | os.O_CLOEXEC)
    stack.callback(os.close, fd)
    return f"/proc/self/fd/{fd}", fd
