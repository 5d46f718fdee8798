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

The runtime's own writes keep what they find (`after_write`, called by `runtime.config.writing`
under the same file lock as the write):

* a file the runtime creates from nothing is trusted: nothing in it came from anywhere else;
* a write to a trusted file (a grant answered AlwaysThisProject, a revoke) records the new
  digest and the grant's setting, so the file stays trusted;
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

from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.errors import ConfigError
from codecoder.foundation.state import project_state_directory

__all__ = [
    "Setting",
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


def after_write(
    project: Path,
    before: bytes | None,
    after: bytes,
    *,
    granted: tuple[str, str | None] | None = None,
    revoked: str | None = None,
    trusted: bool = False,
) -> None:
    """Keep the trust the file had across a write the runtime itself made (see the module
    docstring). Called with the file's bytes before (None: it did not exist) and after;
    `trusted` when the file before was trusted by meaning (`TrustRecord.covers`)."""
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
        _write(
            project,
            TrustRecord(
                sha256=digest_of(after),
                trusted_at=record.trusted_at
                or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                widenings=record.widenings,
                settings=settings,
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
            TrustRecord(
                record.sha256,
                record.trusted_at,
                record.widenings,
                frozenset(approved),
                record.settings,
            ),
        )


def _write(project: Path, record: TrustRecord) -> None:
    path = record_path(project)
    document: dict[str, Any] = {
        "file": str(project / "codecoder.json"),
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
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        replace_atomically(path, (json.dumps(document, indent=2) + "\n").encode(), 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot record trust in {path}: {exc.strerror or exc}", path) from exc
