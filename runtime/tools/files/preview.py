"""What a write would change, for its question: the path, the sizes and a diff (a new file:
its head), computed only when the human is asked (`PermissionKey.preview`).

The current file is read on the host beneath the workspace without following a symlink
(`foundation.openbeneath.Beneath`), as the write itself will not follow one; a file too large
to diff is summarised by its size. The lines are the file's text as it is: the question bounds
them and neutralises every control character as it shows them (`runtime.permissions.prompt`).
"""

from __future__ import annotations

import difflib
import functools
import os
import stat
from collections.abc import Callable
from pathlib import Path

from codecoder.foundation.openbeneath import Beneath
from codecoder.permissions.keys import Preview
from codecoder.tools.files.text import _is_binary

__all__ = ["edit_preview", "write_preview"]

DIFF_MAX_BYTES = 1024 * 1024  # a file larger than this is summarised, not diffed
HEAD_LINES = 20  # a new file shows this many lines
CONTEXT = 2  # lines of context around each change


def write_preview(workspace: Path, path: str, content: str) -> Callable[[], Preview]:
    """The preview of writing `content` to `path`."""
    return functools.partial(_write, workspace, path, content)


def edit_preview(
    workspace: Path, path: str, old: str, new: str, replace_all: bool
) -> Callable[[], Preview]:
    """The preview of replacing `old` with `new` in `path` (every occurrence with
    `replace_all`)."""
    return functools.partial(_edit, workspace, path, old, new, replace_all)


def _write(workspace: Path, path: str, content: str) -> Preview:
    data = content.encode("utf-8")
    current = _current(workspace, path)
    if current is None:
        return _new_file(path, data)
    if isinstance(current, str):
        return Preview(f"replaces {path} ({current}) with {_size(data)}")
    if current == data:
        return Preview(f"rewrites {path} with the same {_size(data)}: nothing changes")
    old_text = _text(current)
    if old_text is None:
        return Preview(f"replaces {path}, a binary file of {_size(current)}, with {_size(data)}")
    return _diff(f"replaces {path}: {_size(current)} → {_size(data)}", path, old_text, content)


def _edit(workspace: Path, path: str, old: str, new: str, replace_all: bool) -> Preview:
    current = _current(workspace, path)
    if current is None:
        return Preview(f"edits {path}, which does not exist: the edit will fail")
    if isinstance(current, str):
        return Preview(f"edits {path} ({current})")
    text = _text(current)
    if text is None:
        return Preview(f"edits {path}, a binary file of {_size(current)}: the edit will fail")
    count = text.count(old)
    if count == 0:
        return Preview(f"edits {path} ({_size(current)}): the text to replace does not occur")
    if count > 1 and not replace_all:
        return Preview(
            f"edits {path} ({_size(current)}): the text to replace occurs {count} times, and "
            "replace_all is not set: the edit will fail"
        )
    after = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    times = f"{count} replacements" if replace_all and count > 1 else "1 replacement"
    size = f"{_size(current)} → {_size(after.encode('utf-8'))}"
    return _diff(f"edits {path}: {times}, {size}", path, text, after)


def _current(workspace: Path, path: str) -> bytes | str | None:
    """The file's bytes; None when there is none; a phrase when it cannot be shown."""
    with Beneath(workspace) as tree:
        found = tree.lstat(path)
        if found is None:
            parent = path.rpartition("/")[0]
            if parent and tree.directory(parent) is None and _on_the_way(workspace, parent):
                return "a directory on its path is a symbolic link, not followed: the write fails"
            return None
        if stat.S_ISLNK(found.st_mode):
            return "a symbolic link, which is not followed: the write fails"
        if not stat.S_ISREG(found.st_mode):
            return "not a regular file"
        if found.st_size > DIFF_MAX_BYTES:
            return f"{found.st_size:,} bytes, too large to show a diff"
        try:
            return tree.read(path, DIFF_MAX_BYTES)
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"


def _on_the_way(workspace: Path, parent: str) -> bool:
    """Whether something that is not a real directory stands on the way to `parent`."""
    where = workspace
    for part in parent.split("/"):
        where = where / part
        if where.is_symlink() or (os.path.lexists(where) and not where.is_dir()):
            return True
    return False


def _new_file(path: str, data: bytes) -> Preview:
    summary = f"creates {path}: {_size(data)}"
    text = _text(data)
    if text is None:
        return Preview(f"{summary}, binary")
    lines = text.splitlines()
    head = tuple(lines[:HEAD_LINES])
    if len(lines) > HEAD_LINES:
        head += (f"… {len(lines) - HEAD_LINES} more lines",)
    return Preview(f"{summary}; its first lines:" if head else summary, head)


def _diff(summary: str, path: str, before: str, after: str) -> Preview:
    lines = difflib.unified_diff(
        before.splitlines(),
        after.splitlines(),
        f"{path} (now)",
        f"{path} (after)",
        n=CONTEXT,
        lineterm="",
    )
    return Preview(summary, tuple(lines))


def _text(data: bytes) -> str | None:
    if _is_binary(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _size(data: bytes) -> str:
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return f"{len(data):,} bytes, {lines:,} line{'s' if lines != 1 else ''}"
