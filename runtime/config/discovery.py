"""Which project a command works on when none is named: found as git finds its repository.

    the nearest directory, from the working directory upward, holding codecoder.json
    else the top level of the git repository it is in (the nearest `.git` upward)
    else the working directory itself

`--project` overrides all of it; the hooks start from the `cwd` their host sends. Agents `cd`
all the time: a command run in `src/` must meet the rules of the project's codecoder.json, not
the empty rules of a directory that has none.

A directory owned by another user is passed over (git's `safe.directory` rule for the same
reason): whoever owns `/tmp` or a shared parent cannot make the runtime adopt their
codecoder.json, or make their directory the workspace that the read tools may read.

This module imports nothing beyond the standard library: the hooks run it on every call.
"""

from __future__ import annotations

import enum
import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FoundBy", "ProjectPlace", "find_project"]

PROJECT_FILE = "codecoder.json"


class FoundBy(enum.StrEnum):
    """How the project directory was chosen."""

    OPTION = "--project"
    PROJECT_FILE = "the nearest codecoder.json"
    REPOSITORY = "the git repository's top level"
    WORKING_DIRECTORY = "the working directory (no codecoder.json or repository above it)"


@dataclass(frozen=True, slots=True)
class ProjectPlace:
    directory: Path
    found_by: FoundBy
    passed_over: tuple[Path, ...] = ()  # codecoder.json files owned by another user

    def describe(self) -> str:
        text = f"{self.directory} ({self.found_by.value})"
        if self.passed_over:
            others = ", ".join(str(p) for p in self.passed_over)
            text += f"; passed over, owned by another user: {others}"
        return text


def find_project(start: Path | None = None, *, uid: int | None = None) -> ProjectPlace:
    """The project of a command run in `start` (default: the working directory)."""
    here = Path(os.path.abspath(start if start is not None else os.getcwd()))
    uid = os.geteuid() if uid is None else uid
    passed_over: list[Path] = []
    chain = (here, *here.parents)
    for directory in chain:
        if _is_file(directory / PROJECT_FILE):
            if _owned_by(directory, uid):
                return ProjectPlace(directory, FoundBy.PROJECT_FILE, tuple(passed_over))
            passed_over.append(directory / PROJECT_FILE)
    for directory in chain:
        if os.path.lexists(directory / ".git") and _owned_by(directory, uid):
            return ProjectPlace(directory, FoundBy.REPOSITORY, tuple(passed_over))
    return ProjectPlace(here, FoundBy.WORKING_DIRECTORY, tuple(passed_over))


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _owned_by(directory: Path, uid: int) -> bool:
    try:
        return os.stat(directory).st_uid == uid
    except OSError:
        return False
