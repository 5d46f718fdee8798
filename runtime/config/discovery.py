"""Which project a command works on when none is named: found as git finds its repository.

    the nearest directory, from the working directory upward, holding codecoder.json
    else the top level of the git repository it is in, found exactly as git finds it
    else the working directory itself

`--project` overrides all of it; the hooks start from the `cwd` their host sends. Agents `cd`
all the time: a command run in `src/` must meet the rules of the project's codecoder.json, not
the empty rules of a directory that has none.

The walk is git's (`setup_git_directory_gently` in git's setup.c), so the project is never
wider than the repository git itself would work on:
- it starts from the physical directory (symbolic links resolved, as `getcwd` gives it);
- it stops below a ceiling of `GIT_CEILING_DIRECTORIES` and at a filesystem boundary (unless
  `GIT_DISCOVERY_ACROSS_FILESYSTEM` is true), for codecoder.json as for `.git`;
- a `.git` counts only where git would take it for a repository: a directory that is a valid
  git directory (`HEAD` a symbolic ref under `refs/` or an object id, `objects/` and `refs/`
  present, through `commondir` for a linked worktree), or a file `gitdir: <path>` naming one.
  An empty `.git` directory, or one missing any of these, is passed over as git passes it over
  (an empty `/tmp/.git` must not make every project under /tmp resolve to /tmp);
- where git would stop with an error (a `.git` file that names no repository, a bare
  repository, which has no top level, a repository owned by another user) or `GIT_DIR` is set
  (git then searches nothing), no repository is found: the working directory is the project.

What makes a path protected is a different question, answered wider on purpose
(`foundation.protected`): a `.git` git would not read today may be one it reads tomorrow.

A directory owned by another user is passed over (git's `safe.directory` rule for the same
reason): whoever owns `/tmp` or a shared parent cannot make the runtime adopt their
codecoder.json, or make their directory the workspace that the read tools may read.

This module imports nothing beyond the standard library: the hooks run it on every call.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FoundBy", "ProjectPlace", "find_project", "is_git_directory"]

PROJECT_FILE = "codecoder.json"
_GITFILE_LIMIT = 1 << 20  # git reads no larger `.git` file (read_gitfile_gently)
_HEX = frozenset("0123456789abcdefABCDEF")
_GIT_SPACE = " \t\n\r"  # git's own isspace()
_TRUE = frozenset({"1", "true", "yes", "on"})


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
    # codecoder.json files, or a repository's .git, owned by another user
    passed_over: tuple[Path, ...] = ()

    def describe(self) -> str:
        text = f"{self.directory} ({self.found_by.value})"
        if self.passed_over:
            others = ", ".join(str(p) for p in self.passed_over)
            text += f"; passed over, owned by another user: {others}"
        return text


def find_project(
    start: Path | None = None, *, uid: int | None = None, environ: Mapping[str, str] | None = None
) -> ProjectPlace:
    """The project of a command run in `start` (default: the working directory)."""
    environ = os.environ if environ is None else environ
    here = Path(os.path.realpath(start if start is not None else os.getcwd()))
    uid = os.geteuid() if uid is None else uid
    passed_over: list[Path] = []
    chain = tuple(_searched(here, environ))
    for directory in chain:
        if _is_file(directory / PROJECT_FILE):
            if _owned_by(directory, uid):
                return ProjectPlace(directory, FoundBy.PROJECT_FILE, tuple(passed_over))
            passed_over.append(directory / PROJECT_FILE)
    if not (environ.get("GIT_DIR") or environ.get("GIT_WORK_TREE")):
        for directory in chain:
            found = _repository_at(directory, environ)
            if found is _Found.NOTHING:
                continue
            if found is _Found.WORK_TREE:
                if _owned_by(directory, uid):
                    return ProjectPlace(directory, FoundBy.REPOSITORY, tuple(passed_over))
                passed_over.append(directory / ".git")
            break  # git stops here, with a repository or an error: never look wider
    return ProjectPlace(here, FoundBy.WORKING_DIRECTORY, tuple(passed_over))


def _searched(here: Path, environ: Mapping[str, str]) -> Iterator[Path]:
    """The directories git looks at, from `here` upward: none at or above the nearest ceiling
    (`GIT_CEILING_DIRECTORIES`), none on another filesystem than `here`'s."""
    ceilings = _ceilings(environ.get("GIT_CEILING_DIRECTORIES", ""))
    across = environ.get("GIT_DISCOVERY_ACROSS_FILESYSTEM", "").strip().lower() in _TRUE
    try:
        device = os.stat(here).st_dev
    except OSError:
        device = None
    yield here
    for directory in here.parents:
        if str(directory) in ceilings:
            return
        if not across:
            try:
                if os.stat(directory).st_dev != device:
                    return
            except OSError:
                return
        yield directory


def _ceilings(value: str) -> frozenset[str]:
    """GIT_CEILING_DIRECTORIES as git reads it: absolute entries, resolved unless they follow
    an empty entry; relative ones ignored."""
    entries: set[str] = set()
    resolve = True
    for entry in value.split(os.pathsep):
        if not entry:
            resolve = False
        elif os.path.isabs(entry):
            entries.add(os.path.realpath(entry) if resolve else entry)
    return frozenset(entries)


class _Found(enum.Enum):
    NOTHING = enum.auto()  # git would look further up
    WORK_TREE = enum.auto()  # the directory is a repository's top level
    STOP = enum.auto()  # git stops here without a work tree: a bare repository, or an error


def _repository_at(directory: Path, environ: Mapping[str, str]) -> _Found:
    """What git makes of `directory` while looking for a repository (setup.c, in its order:
    `.git` as a file, `.git` as a directory, the directory itself as a bare repository)."""
    dotgit = directory / ".git"
    try:
        info = os.stat(dotgit)  # a symbolic link is followed, as git's stat() does
    except OSError:
        info = None
    gitdir: Path | None = None
    if info is not None and stat.S_ISREG(info.st_mode):
        gitdir = _gitfile_target(dotgit, info)
        if gitdir is None or not is_git_directory(gitdir, environ):
            return _Found.STOP
    elif info is not None and is_git_directory(dotgit, environ):
        gitdir = dotgit
    if gitdir is not None:
        # A repository whose configuration makes it bare or puts its work tree elsewhere
        # has no top level here (git would work on another directory, or on none).
        return _Found.STOP if _worktree_elsewhere(gitdir) else _Found.WORK_TREE
    if is_git_directory(directory, environ):
        return _Found.STOP
    return _Found.NOTHING


def _gitfile_target(path: Path, info: os.stat_result) -> Path | None:
    """The directory a `.git` file names (`gitdir: <path>`, relative to the file's directory),
    or None where git would refuse the file."""
    if info.st_size > _GITFILE_LIMIT:
        return None
    try:
        with open(path, "rb") as file:
            data = file.read(_GITFILE_LIMIT + 1)
    except OSError:
        return None
    if not data.startswith(b"gitdir: "):
        return None
    named = data.split(b"\0", 1)[0].rstrip(b"\r\n")[len(b"gitdir: ") :]
    if not named:
        return None
    target = os.fsdecode(named)
    return Path(target if os.path.isabs(target) else os.path.join(path.parent, target))


def is_git_directory(path: Path, environ: Mapping[str, str] | None = None) -> bool:
    """Whether git takes `path` for a git directory (setup.c `is_git_directory`): a valid
    HEAD, and `objects/` and `refs/` in its common directory."""
    environ = os.environ if environ is None else environ
    if not _valid_head(path / "HEAD"):
        return False
    common = _common_directory(path, environ)
    if common is None:
        return False
    objects = environ.get("GIT_OBJECT_DIRECTORY") or os.path.join(common, "objects")
    return os.access(objects, os.X_OK) and os.access(os.path.join(common, "refs"), os.X_OK)


def _valid_head(head: Path) -> bool:
    """git's `validate_headref`: a symbolic link into `refs/`, a symbolic ref `ref: refs/...`,
    or a detached HEAD (an object id, SHA-1 or SHA-256)."""
    try:
        if os.path.islink(head):
            return os.readlink(head).startswith("refs/")
        with open(head, "rb") as file:
            content = file.read(255).decode("latin-1")
    except OSError:
        return False
    if content.startswith("ref:") and content[4:].lstrip(_GIT_SPACE).startswith("refs/"):
        return True
    return any(len(content) >= n and set(content[:n]) <= _HEX for n in (40, 64))


def _common_directory(path: Path, environ: Mapping[str, str]) -> str | None:
    """Where the objects and refs of the git directory `path` are: GIT_COMMON_DIR, else what
    its `commondir` file names (a linked worktree), else itself; None where git would fail."""
    if environ.get("GIT_COMMON_DIR"):
        return environ["GIT_COMMON_DIR"]
    named = path / "commondir"
    if not os.path.exists(named):
        return str(path)
    try:
        value = named.read_bytes().rstrip(b"\r\n")
    except OSError:
        return None
    if not value:
        return None
    common = os.fsdecode(value)
    return os.path.realpath(common if os.path.isabs(common) else os.path.join(path, common))


def _worktree_elsewhere(gitdir: Path) -> bool:
    """Whether the repository's own configuration sets `core.bare` true or any
    `core.worktree` (read plainly: a file that cannot be read counts as setting it). git reads
    neither from a linked worktree's shared configuration (`commondir`)."""
    if os.path.exists(gitdir / "commondir"):
        return False
    try:
        text = (gitdir / "config").read_text(errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    section = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if line.startswith("["):
            section = line[1:].split("]", 1)[0].strip().lower()
            line = line.split("]", 1)[1].strip() if "]" in line else ""
        if section != "core" or not line:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip().lower(), value.strip().strip('"').lower()
        if key == "worktree" or (key == "bare" and value in (*_TRUE, "")):
            return True
    return False


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
