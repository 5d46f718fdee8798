"""Trust in a project's codecoder.json: given by the human, never inherited with the files.

A repository can be cloned with a codecoder.json in it, and a sandbox can write what ends up in
one. So the runtime obeys a project file only for what cannot widen access (deny rules, narrower
limits; `runtime.config.untrusted` classifies every setting) until the human has looked at what it
widens and trusted it: `codecoder trust` shows the widenings and records the SHA-256 of the file's
bytes here, in the runtime's state directory (`runtime.kernel.state`), where no tool of the project
can write. A file whose bytes changed since is untrusted again.

The record, `<state>/projects/<id>/trust.json`:

    {"file": "/abs/codecoder.json", "sha256": "<hex>" | null, "trusted_at": "<iso>",
     "widenings": ["what the human was shown", ...],
     "approved": [{"pattern": "run_capability:lint", "digest": "sha256:..."}, ...]}

The runtime's own writes keep what they find (`after_write`, called by `runtime.config.writing`
under the same file lock as the write):

* a file the runtime creates from nothing is trusted: nothing in it came from anywhere else;
* a write to a trusted file (a grant answered AlwaysThisProject, a revoke) records the new
  digest, so the file stays trusted;
* a grant written to an untrusted file is recorded in `approved`: that one entry was approved
  by the human at the prompt and is obeyed, while the file's other widenings stay ignored.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecoder.runtime.kernel.atomicfile import replace_atomically
from codecoder.runtime.kernel.errors import ConfigError
from codecoder.runtime.kernel.state import project_state_directory

__all__ = [
    "TrustRecord",
    "TrustState",
    "after_write",
    "digest_of",
    "forget",
    "read_record",
    "record_trust",
]

RECORD = "trust.json"


class TrustState(enum.StrEnum):
    """How the project file stands: what `check` and `trust` report."""

    TRUSTED = "trusted"  # its digest is the one the human trusted
    UNTRUSTED = "untrusted"  # it widens access and nobody trusted these bytes
    NOTHING_TO_TRUST = "nothing to trust"  # it widens nothing (or there is no file)


@dataclass(frozen=True, slots=True)
class TrustRecord:
    sha256: str | None = None
    trusted_at: str | None = None
    widenings: tuple[str, ...] = ()
    approved: frozenset[tuple[str, str | None]] = field(default_factory=frozenset)

    def trusts(self, digest: str | None) -> bool:
        return digest is not None and self.sha256 == digest


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_path(project: Path) -> Path:
    return project_state_directory(project) / RECORD


def read_record(project: Path) -> TrustRecord:
    """The project's record; an empty one when there is none or it cannot be read (which
    trusts nothing: the runtime fails closed, and `codecoder trust` writes a new one)."""
    try:
        document = json.loads(record_path(project).read_bytes())
    except (OSError, ValueError):
        return TrustRecord()
    if not isinstance(document, dict):
        return TrustRecord()
    sha = document.get("sha256")
    approved = document.get("approved")
    return TrustRecord(
        sha256=sha if isinstance(sha, str) else None,
        trusted_at=str(document.get("trusted_at") or "") or None,
        widenings=tuple(str(w) for w in document.get("widenings") or () if isinstance(w, str)),
        approved=frozenset(
            (str(item["pattern"]), item.get("digest"))
            for item in (approved if isinstance(approved, list) else ())
            if isinstance(item, dict) and isinstance(item.get("pattern"), str)
        ),
    )


def record_trust(project: Path, data: bytes, widenings: Iterable[str]) -> TrustRecord:
    """Trust the project file whose bytes are `data` (what the human was shown)."""
    record = TrustRecord(
        sha256=digest_of(data),
        trusted_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        widenings=tuple(widenings),
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


def after_write(
    project: Path,
    before: bytes | None,
    after: bytes,
    *,
    granted: tuple[str, str | None] | None = None,
    revoked: str | None = None,
) -> None:
    """Keep the trust the file had across a write the runtime itself made (see the module
    docstring). Called with the file's bytes before (None: it did not exist) and after."""
    record = read_record(project)
    if before is None or record.trusts(digest_of(before)):
        _write(
            project,
            TrustRecord(
                sha256=digest_of(after),
                trusted_at=record.trusted_at
                or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                widenings=record.widenings,
            ),
        )
        return
    approved = set(record.approved)
    if granted is not None:
        approved.add(granted)
    if revoked is not None:
        approved = {entry for entry in approved if entry[0] != revoked}
    if approved != set(record.approved):
        _write(
            project,
            TrustRecord(record.sha256, record.trusted_at, record.widenings, frozenset(approved)),
        )


def _write(project: Path, record: TrustRecord) -> None:
    path = record_path(project)
    document: dict[str, Any] = {
        "file": str(project / "codecoder.json"),
        "sha256": record.sha256,
        "trusted_at": record.trusted_at,
        "widenings": list(record.widenings),
        "approved": [
            {"pattern": pattern, "digest": digest} for pattern, digest in sorted(record.approved)
        ],
    }
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_atomically(path, (json.dumps(document, indent=2) + "\n").encode(), 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot record trust in {path}: {exc.strerror or exc}", path) from exc
