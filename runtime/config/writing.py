"""Writing grants to codecoder.json without ever losing what is in it.

`add_allow_entry` and `remove_allow_entry` change only the allowlist object, under an exclusive
`flock` on `.codecoder/codecoder.json.lock` (`exclusive_lock_of`), after re-reading the file from
disk, so grants made at the same time by other processes are merged and never lost. A file with
errors is never written (`ConfigError` says where it is broken). The new text goes to a temporary
file in the same directory, is fsynced, renamed over the old one and the directory fsynced, so a
crash at any moment leaves either the old file or the new one. Under the same lock the trust
record is kept as it was (`runtime.config.trust.record_after`): a write by the runtime never
makes an untrusted file trusted, nor a trusted one untrusted. The file and its record are one
change: the record names the new file's digest before the file is renamed into place
(`trust.begin`), and only the new one after (`trust.commit`), so a writer killed between the two
renames leaves a state the next reader takes as meant (`trust.settle`), never one the user has to
repair.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codecoder.config import trust
from codecoder.config.projectfile import PROJECT_SCOPE
from codecoder.config.reading import ParsedText, decode_text, os_reason, parse_text
from codecoder.config.schema import pattern_problem
from codecoder.config.untrusted import covered_by_trust
from codecoder.foundation.atomicfile import exclusive_lock, replace_atomically
from codecoder.foundation.display import quoted as _quote
from codecoder.foundation.errors import ConfigError
from codecoder.foundation.regularfile import open_regular

__all__ = ["add_allow_entry", "add_user_allow_entry", "exclusive_lock_of", "remove_allow_entry"]


def add_allow_entry(
    path: Path, pattern: str, scope: str = PROJECT_SCOPE, digest: str | None = None
) -> None:
    """Grant `pattern` for the project in the codecoder.json at `path`, creating it if missing.

    Raises `ConfigError` if the file on disk is malformed (it is then left untouched) or cannot
    be written; `ValueError` for a pattern or scope the file could not hold.
    """
    if problem := pattern_problem(pattern):
        raise ValueError(f"cannot grant {_quote(pattern)}: {problem}")
    if scope != PROJECT_SCOPE:
        raise ValueError(
            f"cannot write scope {_quote(scope)} to codecoder.json: only {PROJECT_SCOPE} "
            "lasts beyond the session"
        )
    value: str | dict[str, str] = scope if digest is None else {"scope": scope, "digest": digest}
    _update(path, _granting(pattern, value), granted=(pattern, digest))


def _granting(pattern: str, value: str | dict[str, str]) -> Callable[[dict[str, Any]], bool]:
    """The edit that sets `pattern` to `value` in a document's allowlist (made where missing);
    it says whether anything changed."""

    def grant(document: dict[str, Any]) -> bool:
        if "allowlist" not in document:
            _insert_allowlist(document)
        allowlist: dict[str, Any] = document["allowlist"]
        if allowlist.get(pattern) == value:
            return False
        allowlist[pattern] = value
        return True

    return grant


def add_user_allow_entry(path: Path, pattern: str) -> None:
    """Grant `pattern` for every project in the user's own file at `path` (an EVERY_PROJECT
    answer), creating it if missing; the same care as `add_allow_entry`, without a trust
    record: the user's file is the human's own."""
    if problem := pattern_problem(pattern):
        raise ValueError(f"cannot grant {_quote(pattern)}: {problem}")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _update(path, _granting(pattern, PROJECT_SCOPE), granted=(pattern, None), keep_trust=False)


def remove_allow_entry(path: Path, pattern: str) -> bool:
    """Revoke `pattern` from the codecoder.json at `path`; True if it was there.

    Raises `ConfigError` like `add_allow_entry`; a missing file holds nothing to remove.
    """
    removed = False

    def revoke(document: dict[str, Any]) -> bool:
        nonlocal removed
        allowlist: dict[str, Any] = document.get("allowlist", {})
        if pattern in allowlist:
            del allowlist[pattern]
            removed = True
        return removed

    _update(path, revoke, revoked=pattern)
    return removed


def _update(
    path: Path,
    change: Callable[[dict[str, Any]], bool],
    *,
    granted: tuple[str, str | None] | None = None,
    revoked: str | None = None,
    keep_trust: bool = True,
) -> None:
    """Apply `change` to the document on disk under the lock; write if it says it changed, and
    keep the file's trust as it was (`runtime.config.trust.record_after`) under the same lock,
    as one change with the file (see the module docstring); a project file's only
    (`keep_trust`: the user's own file has no trust record)."""
    try:
        with exclusive_lock_of(path):
            _remove_stale_temporaries(path)
            document, mode, before = _read_for_update(path)
            root = path.parent.resolve()
            if keep_trust:
                # What a writer killed mid-way left is settled before anything else is read.
                trust.settle(root, None if before is None else trust.digest_of(before))
            if change(document):
                trusted = (
                    keep_trust and before is not None and _trusted_by_meaning(root, path, before)
                )
                after = _serialize(document)
                record = (
                    trust.record_after(
                        root, before, after, granted=granted, revoked=revoked, trusted=trusted
                    )
                    if keep_trust
                    else None
                )
                if record is not None:
                    trust.begin(root, after, record)
                replace_atomically(path, after, mode)
                if record is not None:
                    # The change is made: the record names the new file already (`begin`).
                    # Saying so alone can wait for the next writer or reader (`trust.settle`).
                    with contextlib.suppress(ConfigError):
                        trust.commit(root, record)
    except OSError as exc:
        raise ConfigError(f"cannot update {path.name}: {os_reason(exc)}", path) from exc


def _trusted_by_meaning(root: Path, path: Path, data: bytes) -> bool:
    """Whether the file as it is (readable: `_read_for_update` checked) is trusted, by its
    digest or because the human trusted every widening it holds."""
    record = trust.read_record(root)
    if record.trusts(trust.digest_of(data)):
        return True
    text = decode_text(path, data)
    assert isinstance(text, str)
    return covered_by_trust(root, parse_text(text).project_file(path), record)


def exclusive_lock_of(path: Path) -> contextlib.AbstractContextManager[None]:
    """The lock every change to the project file at `path` (and to its trust) is made under."""
    return exclusive_lock(trust.lock_path(path.parent))


def _read_for_update(path: Path) -> tuple[dict[str, Any], int | None, bytes | None]:
    """The document on disk, its permission bits and bytes; None for a file that does not
    exist."""
    try:
        descriptor = open_regular(path)
    except FileNotFoundError:
        return {}, None, None
    with os.fdopen(descriptor, "rb") as file:
        mode = stat.S_IMODE(os.fstat(file.fileno()).st_mode)
        data = file.read()
    text = decode_text(path, data)
    parse = parse_text(text) if isinstance(text, str) else ParsedText(diagnostics=[text])
    if errors := parse.errors():
        first = errors[0]
        raise ConfigError(
            f"{first.message}; the file is left as it is: fix it, then grant again",
            path,
            first.line,
            first.column,
        )
    document: dict[str, Any] = parse.document
    return document, mode, data


def _insert_allowlist(document: dict[str, Any]) -> None:
    # Where a reader looks for it: first, or right after "$schema".
    items = list(document.items())
    at = next((i + 1 for i, (key, _) in enumerate(items) if key == "$schema"), 0)
    items.insert(at, ("allowlist", {}))
    document.clear()
    document.update(items)


def _serialize(document: dict[str, Any]) -> bytes:
    try:
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (read from a "\ud800" escape) has no UTF-8 form; \u escapes keep
        # the very same value.
        return (json.dumps(document, indent=2) + "\n").encode("ascii")


def _remove_stale_temporaries(path: Path) -> None:
    # Only a writer holding the lock creates these, and we hold it: any left over belongs to a
    # writer that died between creating it and renaming it.
    stale = re.compile(rf"\.{re.escape(path.name)}\.[0-9a-f]{{16}}\.tmp")
    for candidate in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if stale.fullmatch(candidate.name):
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()
