"""@bwrap's settings (`"bwrap": {...}` in codecoder.json and the user's file): what a trusted file
adds to the sandbox. Kept apart from the environment so that reading codecoder.json imports
nothing else of it.

    home   directories or files under the home to show read-only in the sandbox's empty home
           (`"~/.m2"`, `"~/.cache/pip"`), besides the toolchains the command needs; never the
           home itself, never one that is, holds or lies in a credential path
           (`environments.bwrap.home.CREDENTIALS`)
    env    environment variables (names, or `*` patterns) passed through the scrubbing of
           secrets (`environments.bwrap.environ`)

Both widen the sandbox: an untrusted project file's entries are reported and ignored
(`runtime.config.untrusted`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BwrapSettings", "home_entry_problem"]

_VARIABLE_PATTERN = re.compile(r"[A-Za-z_*][A-Za-z0-9_*]*")


def home_entry_problem(entry: str, home: Path) -> str | None:
    """Why `entry` (as written: `~/x`, or relative to the home) cannot be shown, or None."""
    from codecoder.environments.bwrap.home import credential_in

    path = Path(os.path.normpath(home / entry.removeprefix("~/").removeprefix("~")))
    if entry.startswith("/") and not Path(entry).is_relative_to(home):
        return f"{entry} is not under the home directory ({home})"
    if ".." in Path(entry).parts:
        return f"{entry} must not leave the home directory with .."
    credential = credential_in(path, home)
    if credential is not None:
        return f"{entry} would show {credential}, which a sandbox never sees"
    return None


@dataclass(frozen=True, slots=True)
class BwrapSettings:
    """What the sandbox shows beyond its defaults: `home` entries (as written) and `env` names."""

    home: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in self.env:
            if not _VARIABLE_PATTERN.fullmatch(name):
                raise ValueError(f"env entry {name!r} is not a variable name or a * pattern")
            if name.strip("*") == "":
                raise ValueError(f"env entry {name!r} would pass every variable, secrets included")

    def home_paths(self, home: Path) -> tuple[Path, ...]:
        """The `home` entries under `home` that may be shown (the others are left out; the
        configuration reports them)."""
        paths = []
        for entry in self.home:
            if home_entry_problem(entry, home) is None:
                relative = entry.removeprefix("~/").removeprefix("~")
                paths.append(Path(os.path.normpath(home / relative)))
        return tuple(paths)
