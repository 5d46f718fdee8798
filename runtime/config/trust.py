"""Trust in a project's codecoder.json: given by the human, never inherited with the files.

A repository can be cloned with a codecoder.json in it, and a sandbox can write what ends up in
one. So the runtime obeys a project file only for what cannot widen access (deny rules, narrower
limits; `runtime.config.untrusted` classifies every setting) until the human has looked at what it
widens and trusted it: `codecoder trust` shows the widenings and records the SHA-256 of the file's
bytes here, in the runtime's state directory (`foundation.state`), where no tool of the project
can write, together with what each widening *is* (`settings`: its section, name and value).

Trust follows meaning, not bytes. A file whose bytes changed since is still trusted when every
widening it holds now is one the human trusted (`covers`): the same grant, binding, host or
directory, or the same limit no larger than it was. Adding a deny rule, removing a grant or
lowering a limit keeps the file trusted; a new grant, a higher limit, another host makes it
untrusted again, and only the new widening is what `codecoder trust` shows as new.

The record, `<state>/projects/<id>/trust.json`:

    {"file": "/abs/codecoder.json", "sha256": "<hex>" | null, "trusted_at": "<iso>",
     "widenings": ["what the human was shown", ...],
     "settings": [{"section": "allowlist", "name": "run_command:git", "value": null}, ...],
     "approved": [{"pattern": "run_capability:lint", "digest": "sha256:..."}, ...]}

A record without `settings` (written before they were kept) trusts its digest only.

The runtime's own writes keep what they find (`record_after`, asked by `runtime.config.writing`
under the same file lock as the write):

* a file the runtime creates from nothing is trusted: nothing in it came from anywhere else;
* a write to a trusted file (a grant answered AlwaysThisProject, a revoke) records the new
  digest and the grant's setting, so the file stays trusted;
* a grant written to an untrusted file is recorded in `approved`: that one entry was approved
  by the human at the prompt and is obeyed, while the file's other widenings stay ignored.

One change, two files. A grant changes codecoder.json and this record, and no rename changes two
files at once. So while the runtime writes, the record names both states (`begin`): beside the
record for the file as it is, `pending` holds the record for the file about to be written, with
that file's digest. A reader pairs the file it read with the record meant for exactly those
bytes (`read_record(project, file_digest)`), so a process killed between the two renames leaves
a file that is trusted as it was meant to be, old or new, never "untrusted". The next writer,
or the first reader that finds the lock free, settles it (`settle`): the pending record becomes
the record if the file holds exactly the bytes it was written for, and is dropped otherwise.
Recovery trusts nothing the human did not: it applies only to the very bytes the runtime wrote
for a grant the human gave; a hand edit changes the digest and matches neither (the record
for the file as it was applies, as after any edit).

A reader also never pairs a file with a record written after it (`read_with_file`): it reads
the record, the file, the record again, and reads again if the record changed meanwhile (each
record written carries a fresh `version`, so no two are the same bytes).
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import fcntl
import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.errors import ConfigError
from codecoder.foundation.regularfile import read_regular_file
from codecoder.foundation.state import project_state_directory, workspace_directory

__all__ = [
    "Setting",
    "TrustRecord",
    "TrustState",
    "begin",
    "commit",
    "digest_of",
    "forget",
    "lock_path",
    "read_record",
    "read_with_file",
    "record_after",
    "record_trust",
    "settle",
]

RECORD = "trust.json"
PROJECT_FILE = "codecoder.json"
# How often a reader reads again when a writer changed the record while it read the file.
_READ_ATTEMPTS = 50
_T = TypeVar("_T")


class TrustState(enum.StrEnum):
    """How the project file stands: what `check` and `trust` report."""

    TRUSTED = "trusted"  # its digest is the one the human trusted
    UNTRUSTED = "untrusted"  # it widens access and nobody trusted these bytes
    NOTHING_TO_TRUST = "nothing to trust"  # it widens nothing (or there is no file)


# What one widening is: (section, name, value), the value as JSON would hold it.
Setting = tuple[str, str, Any]
# Settings where a smaller number is a narrower setting (a limit): a widening with a value no
# larger than the trusted one is covered. Any other setting is covered by the same value only.
_LIMITS = frozenset(
    {
        *("limits.timeout", "limits.max_output", "web.max_bytes", "web.timeout"),
        *("web.max_redirects", "agent.max_turns", "agent.timeout", "docker.memory"),
        *("docker.cpus", "docker.pids_limit", "docker.tmpfs_size"),
    }
)


@dataclass(frozen=True, slots=True)
class TrustRecord:
    sha256: str | None = None
    trusted_at: str | None = None
    widenings: tuple[str, ...] = ()
    approved: frozenset[tuple[str, str | None]] = field(default_factory=frozenset)
    # What the trusted widenings are; None in a record written before they were kept.
    settings: tuple[Setting, ...] | None = None

    def trusts(self, digest: str | None) -> bool:
        return digest is not None and self.sha256 == digest

    def covers(self, settings: Iterable[Setting]) -> bool:
        """Whether every one of `settings` (a file's widenings now) was trusted: a file that
        widens nothing beyond what the human trusted keeps its trust (see the module
        docstring)."""
        if self.settings is None or self.sha256 is None:
            return False
        trusted: dict[tuple[str, str], list[Any]] = {}
        for section, name, value in self.settings:
            trusted.setdefault((section, name), []).append(value)
        for section, name, value in settings:
            values = trusted.get((section, name), [])
            if value in values:
                continue
            if (
                name in _LIMITS
                and _number(value)
                and any(_number(v) and value <= v for v in values)
            ):
                continue
            return False
        return True


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_path(project: Path) -> Path:
    return project_state_directory(project) / RECORD


def lock_path(project: Path) -> Path:
    """The lock every change to the project's codecoder.json, and to its trust, is made under
    (`runtime.config.writing.exclusive_lock_of`): in `.codecoder/`, never replaced."""
    return workspace_directory(project) / f"{PROJECT_FILE}.lock"


def read_record(project: Path, file_digest: str | None = None) -> TrustRecord:
    """The record meant for the project file whose digest is `file_digest` (None: the file as
    the record stands, without a write in flight); an empty record when there is none or it
    cannot be read (which trusts nothing: the runtime fails closed, and `codecoder trust`
    writes a new one)."""
    return _parse(_record_bytes(project), file_digest)


def read_with_file(
    project: Path, read: Callable[[], _T], digest: Callable[[_T], str | None]
) -> tuple[_T, TrustRecord]:
    """The project file as `read` gives it, and the record meant for it (`digest` says the
    file's): never a record a writer wrote after the file was read, nor before the file it
    read (see the module docstring). A write in flight that nobody finishes (its writer was
    killed) is settled here when no writer holds the lock."""
    before = _record_bytes(project)
    value, after = read(), _record_bytes(project)
    for attempt in range(_READ_ATTEMPTS):
        if after == before:
            break
        # A writer changed the record while the file was read: read both again.
        time.sleep(0.001 * min(attempt + 1, 10))
        before = after
        value, after = read(), _record_bytes(project)
    document = _document(after)
    file_digest = digest(value)
    if document is not None and "pending" in document:
        _settle_if_free(project)
    return value, _record_of(document, file_digest)


def _record_bytes(project: Path) -> bytes | None:
    try:
        return read_regular_file(record_path(project), limit=_RECORD_LIMIT)
    except (OSError, ConfigError):
        return None


# A record holds what the human was shown of one file: far less than this.
_RECORD_LIMIT = 16 * 1024 * 1024


def _document(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _parse(data: bytes | None, file_digest: str | None) -> TrustRecord:
    return _record_of(_document(data), file_digest)


def _record_of(document: dict[str, Any] | None, file_digest: str | None) -> TrustRecord:
    """The record in `document` meant for the file with `file_digest`: the pending one for the
    very bytes a write in flight is putting there, else the record as it stands."""
    if document is None:
        return TrustRecord()
    pending = document.get("pending")
    if (
        file_digest is not None
        and isinstance(pending, dict)
        and pending.get("file_sha256") == file_digest
        and isinstance(pending.get("record"), dict)
    ):
        document = pending["record"]
    return _from_document(document)


def _from_document(document: dict[str, Any]) -> TrustRecord:
    sha = document.get("sha256")
    approved = document.get("approved")
    settings = document.get("settings")
    return TrustRecord(
        sha256=sha if isinstance(sha, str) else None,
        trusted_at=str(document.get("trusted_at") or "") or None,
        widenings=tuple(str(w) for w in document.get("widenings") or () if isinstance(w, str)),
        approved=frozenset(
            (str(item["pattern"]), item.get("digest"))
            for item in (approved if isinstance(approved, list) else ())
            if isinstance(item, dict) and isinstance(item.get("pattern"), str)
        ),
        settings=_settings(settings) if isinstance(settings, list) else None,
    )


def _settings(items: list[Any]) -> tuple[Setting, ...] | None:
    """The settings of a record; None (trust the digest only) if any cannot be read."""
    read: list[Setting] = []
    for item in items:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("section"), str)
            and isinstance(item.get("name"), str)
        ):
            return None
        read.append((item["section"], item["name"], item.get("value")))
    return tuple(read)


def record_trust(
    project: Path,
    data: bytes,
    widenings: Iterable[str],
    settings: Iterable[Setting] | None = None,
) -> TrustRecord:
    """Trust the project file whose bytes are `data` (what the human was shown: `widenings`
    in words, `settings` what each is; without them only these exact bytes are trusted)."""
    record = TrustRecord(
        sha256=digest_of(data),
        trusted_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        widenings=tuple(widenings),
        settings=None if settings is None else tuple(settings),
    )
    _write(project, record)
    return record


def forget(project: Path) -> bool:
    """Withdraw trust; True if there was a record."""
    try:
        record_path(project).unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ConfigError(f"cannot remove the trust record: {exc.strerror or exc}") from exc
    return True


def record_after(
    project: Path,
    before: bytes | None,
    after: bytes,
    *,
    granted: tuple[str, str | None] | None = None,
    revoked: str | None = None,
    trusted: bool = False,
) -> TrustRecord | None:
    """The record that keeps the trust the file had across a write the runtime itself makes
    (see the module docstring), or None when the record stays as it is. Given the file's
    bytes before (None: it did not exist) and after; `trusted` when the file before was
    trusted by meaning (`TrustRecord.covers`). Asked under the lock, before the write:
    `begin`, write the file, `commit`."""
    record = read_record(project)
    if before is None or trusted or record.trusts(digest_of(before)):
        settings = record.settings
        if settings is not None or before is None:
            # The grant the human just gave is trusted as one of the file's settings, and a
            # revoked one no longer is: a hand edit that brings it back is a new widening.
            kept = [s for s in settings or () if not (s[0] == "allowlist" and s[1] == revoked)]
            if granted is not None:
                kept.append(("allowlist", granted[0], granted[1]))
            settings = tuple(kept)
        return TrustRecord(
            sha256=digest_of(after),
            trusted_at=record.trusted_at
            or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            widenings=record.widenings,
            settings=settings,
        )
    approved = set(record.approved)
    if granted is not None:
        approved.add(granted)
    if revoked is not None:
        approved = {entry for entry in approved if entry[0] != revoked}
    if approved == set(record.approved):
        return None
    return TrustRecord(
        record.sha256, record.trusted_at, record.widenings, frozenset(approved), record.settings
    )


def begin(project: Path, after: bytes, record: TrustRecord) -> None:
    """Before the file becomes `after`: the record names both states (the one as it stands,
    and `record` for exactly these bytes). Under the lock."""
    current = _document(_record_bytes(project))
    base = _from_document(current) if current is not None else TrustRecord()
    _write(project, base, pending=(digest_of(after), record), exists=current is not None)


def commit(project: Path, record: TrustRecord) -> None:
    """Once the file is written: `record` alone. Under the lock."""
    _write(project, record)


def settle(project: Path, file_digest: str | None) -> None:
    """Finish what a writer killed between `begin` and `commit` left: the pending record if the
    file (its digest `file_digest`, None if missing) holds exactly the bytes it was written
    for, else the record as it stood. Under the lock."""
    document = _document(_record_bytes(project))
    if document is None or "pending" not in document:
        return
    settled = _record_of(document, file_digest)
    if document.get("sha256", ...) is ... and settled == TrustRecord():
        # There was no record before the write began, and it did not happen: none now.
        with contextlib.suppress(OSError):
            record_path(project).unlink()
        return
    _write(project, settled)


def _settle_if_free(project: Path) -> None:
    """`settle`, if no writer holds the lock now (one that does settles it itself)."""
    try:
        descriptor = os.open(lock_path(project), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            data: bytes | None = read_regular_file(project / PROJECT_FILE, limit=None)
        except FileNotFoundError:
            data = None
        settle(project, None if data is None else digest_of(data))
    except (OSError, ConfigError):
        pass  # a reader only tidies up; the next writer settles it anyway
    finally:
        os.close(descriptor)


def _write(
    project: Path,
    record: TrustRecord,
    *,
    pending: tuple[str, TrustRecord] | None = None,
    exists: bool = True,
) -> None:
    path = record_path(project)
    document: dict[str, Any] = _to_document(record) if exists else {}
    document = {"file": str(project / PROJECT_FILE), **document}
    if pending is not None:
        document["pending"] = {"file_sha256": pending[0], "record": _to_document(pending[1])}
    # Every record written is new bytes, so a reader can tell it changed (`read_with_file`).
    document["version"] = secrets.token_hex(8)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_atomically(path, (json.dumps(document, indent=2) + "\n").encode(), 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot record trust in {path}: {exc.strerror or exc}", path) from exc


def _to_document(record: TrustRecord) -> dict[str, Any]:
    return {
        "sha256": record.sha256,
        "trusted_at": record.trusted_at,
        "widenings": list(record.widenings),
        **(
            {}
            if record.settings is None
            else {
                "settings": [
                    {"section": section, "name": name, "value": value}
                    for section, name, value in record.settings
                ]
            }
        ),
        "approved": [
            {"pattern": pattern, "digest": digest} for pattern, digest in sorted(record.approved)
        ],
    }
