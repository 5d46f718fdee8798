"""Paths in tool arguments, and the read roots they may name.

Paths in tool arguments are workspace-relative POSIX paths; absolute paths and `..` are refused
when the arguments are validated, naming the field. Extra read roots (from the project file,
passed in `ToolContext.extra["read_roots"]` as a mapping of name to directory) are read as
`@name/relative/path`, read-only.

Where the caller stands. A person at a terminal in `src/` means `src/x` by `x`: the arguments
are validated with the caller's directory in the workspace as context (`STANDING`, a
workspace-relative directory, "." for the workspace itself), and a relative path is joined to
it; leading `..` climb back towards the workspace, never out of it. What comes out is the
workspace-relative path, so a key (`write_file:src/x`) is the same wherever it was asked from.
An agent (MCP, the Python API) stands at the workspace itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo

from codecoder.foundation.display import unspelled
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.openbeneath import open_root

# The key of a validation context that holds where the caller stands in the workspace.
STANDING = "standing"


def normalise_path(value: str, *, allow_root: bool = False, standing: str = ".") -> str:
    """The canonical workspace-relative POSIX form of `value` ("." for the workspace itself),
    read from `standing` (a canonical workspace-relative directory) when it is relative.

    Raises ValueError for absolute paths, `~`, `..` components that are not leading ones
    climbing back from `standing` (or climb out of the workspace) and NUL bytes: paths are
    checked before anything runs, and the key of a write is this canonical form.
    """
    if "\0" in value:
        raise ValueError("the path contains a NUL byte")
    # A name that is not UTF-8 comes back as the tools show it (`n\\xe9e.txt`).
    value = unspelled(value)
    relative_to = (
        "the workspace"
        if standing == "."
        else f"where you stand ({standing}/ in the workspace; `..` climbs back up to it)"
    )
    if value.startswith("/"):
        raise ValueError(f"{value!r} is absolute; paths are relative to {relative_to}")
    if value.startswith("~"):
        raise ValueError(f"{value!r}: `~` is not expanded; paths are relative to {relative_to}")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    base = [] if standing == "." or value.startswith("@") else standing.split("/")
    while parts and parts[0] == ".." and base:
        parts.pop(0)
        base.pop()
    if ".." in parts:
        if standing == ".":
            raise ValueError(f"{value!r} leaves the workspace (`..` is not allowed)")
        where = "climbs out of it" if parts[0] == ".." else "has `..` past its start"
        raise ValueError(
            f"{value!r} leaves the workspace: it {where}; paths are relative to {relative_to}"
        )
    parts = base + parts
    if not parts:
        if allow_root:
            return "."
        raise ValueError("the path names the workspace itself, not a file in it")
    return "/".join(parts)


def standing_of(info: ValidationInfo | None) -> str:
    """Where the caller stands, from a validation's context ("." when none is given)."""
    context = info.context if info is not None else None
    standing = context.get(STANDING, ".") if isinstance(context, dict) else "."
    return standing if isinstance(standing, str) and standing else "."


def _file_path(value: str, info: ValidationInfo) -> str:
    return normalise_path(value, standing=standing_of(info))


def _dir_path(value: str, info: ValidationInfo) -> str:
    return normalise_path(value, allow_root=True, standing=standing_of(info))


def _write_path(value: str, info: ValidationInfo) -> str:
    path = normalise_path(value, standing=standing_of(info))
    if any("\udc80" <= ch <= "\udcff" for ch in path):
        raise ValueError(
            "the name is not UTF-8 (a byte shown as \\xHH): the write tools create and change "
            "files with UTF-8 names only (the sandbox takes its paths as text); the read tools "
            "read such files"
        )
    if path.startswith("@"):
        raise ValueError(
            f"{value!r}: paths starting with `@` name the project's read roots, which are "
            "read-only; write tools write only the workspace"
        )
    return path


FilePath = Annotated[str, AfterValidator(_file_path)]
DirPath = Annotated[str, AfterValidator(_dir_path)]
WritePath = Annotated[str, AfterValidator(_write_path)]


def _join(base: str, rel: str) -> str:
    return rel if base == "." else f"{base}/{rel}"


def _under_git(rel: str) -> bool:
    return ".git" in rel.casefold().split("/")


def _as_checked(name: str, root: Path) -> Path:
    """`root` (the read root @name), if it is still the directory checked when the project was
    loaded: no symlink in its path. A root inside the workspace is as writable as the rest of
    it, so a sandbox could have replaced it with a link to `/` since; that is refused here, and
    the sandboxes pin what they open (`foundation.openbeneath.open_root`)."""
    try:
        os.close(open_root(root))
    except OSError as exc:
        raise ExecutionFailed(
            f"the read root @{name} ({root}) is refused: {exc.strerror or exc}; it is no longer "
            "the directory checked when the project was loaded (/reload checks it again)"
        ) from exc
    return root
