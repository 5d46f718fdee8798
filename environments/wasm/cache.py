"""The disk cache of compiled modules: a private directory, every entry checked by an HMAC.

Compiling is the expensive part (about 0.1 s for fileops.wasm; a warm call takes under a
millisecond), so compiled modules are cached twice: in process (digest -> `InstancePre`, in
`WasmEnvironment`), and on disk, here, so a new process does not recompile.
`Module.deserialize` trusts its input completely (it is machine code), so the disk cache is used
only if its directory is private to this user, and every entry carries an HMAC, keyed by a
secret kept in that directory, over the entry's cache key and bytes: a corrupt, truncated,
renamed or foreign entry is deleted and the module recompiled, never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.metadata
import logging
import os
import platform
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codecoder.environments.wasm.compile import ENGINE_SETTINGS
from codecoder.foundation.atomicfile import replace_atomically

__all__ = [
    "WASMTIME_VERSION",
    "CacheStats",
    "DiskCache",
    "default_cache_dir",
    "engine_fingerprint",
]

log = logging.getLogger(__name__)

WASMTIME_VERSION = importlib.metadata.version("wasmtime")


@dataclass(slots=True)
class CacheStats:
    """What the module caches did since the environment was created (for tests and `doctor`)."""

    compiled: int = 0  # modules compiled from source
    disk_hits: int = 0  # modules deserialized from a verified disk entry
    memory_hits: int = 0  # calls served by the in-process cache
    discarded: int = 0  # disk entries deleted because they failed verification
    stored: int = 0  # disk entries written


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/codecoder/wasm`, else `~/.cache/codecoder/wasm`."""
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "codecoder" / "wasm"


_MAGIC = b"CCWASM\x01\n"
_MAC_SIZE = 32
_HEADER_SIZE = len(_MAGIC) + _MAC_SIZE + 8
_SECRET_NAME = "hmac.key"


def _private_dir_problem(st: os.stat_result) -> str | None:
    """Why a directory cannot hold machine code we will execute, or None if it can."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory (or is a symlink)"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.filemode(st.st_mode)})"
    return None


def _private_file_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by group or others"
    return None


class DiskCache:
    """Serialized modules in a private directory, each entry authenticated with an HMAC."""

    def __init__(self, directory: Path, stats: CacheStats) -> None:
        self.directory = directory
        self._stats = stats
        self._secret = self._open()

    @property
    def usable(self) -> bool:
        return self._secret is not None

    def _open(self) -> bytes | None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            problem = _private_dir_problem(os.lstat(self.directory))
            if problem is None:
                return self._secret_key()
        except OSError as exc:
            problem = f"cannot be used ({exc.strerror or exc})"
        log.warning("not using the wasm module cache %s: it %s", self.directory, problem)
        return None

    def _secret_key(self) -> bytes | None:
        path = self.directory / _SECRET_NAME
        for _ in range(2):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except FileNotFoundError:
                self._create_secret(path)
                continue
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                problem = _private_file_problem(st)
                if problem is None and st.st_mode & 0o077:
                    problem = "is readable by group or others"
                secret = f.read(64)
            if problem is None and len(secret) == 32:
                return secret
            log.warning("wasm cache key %s %s", path, problem or "has the wrong size")
            return None
        return None

    def _create_secret(self, path: Path) -> None:
        # Written to a temporary name and linked into place, so that a concurrent process
        # either sees no key or the whole key, and exactly one key wins.
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".key-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)

    def _entry(self, key: str) -> Path:
        return self.directory / f"{key}.cwasm"

    def _mac(self, key: str, payload: bytes) -> bytes:
        assert self._secret is not None
        mac = hmac.new(self._secret, key.encode() + b"\0", hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    def load(self, key: str) -> bytes | None:
        """The verified payload of the entry for `key`, or None (a bad entry is deleted)."""
        if self._secret is None:
            return None
        path = self._entry(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:
            self._discard(path, "cannot be opened (a symlink?)")
            return None
        with os.fdopen(fd, "rb") as f:
            problem = _private_file_problem(os.fstat(f.fileno()))
            blob = f.read() if problem is None else b""
        if problem is not None:
            self._discard(path, problem)
            return None
        header, payload = blob[:_HEADER_SIZE], blob[_HEADER_SIZE:]
        if (
            len(header) != _HEADER_SIZE
            or not header.startswith(_MAGIC)
            or int.from_bytes(header[-8:], "big") != len(payload)
            or not hmac.compare_digest(header[len(_MAGIC) : -8], self._mac(key, payload))
        ):
            self._discard(path, "failed verification")
            return None
        return payload

    def store(self, key: str, payload: bytes) -> None:
        if self._secret is None:
            return
        header = _MAGIC + self._mac(key, payload) + len(payload).to_bytes(8, "big")
        try:
            replace_atomically(self._entry(key), header + payload, 0o600)
            self._stats.stored += 1
        except OSError as exc:
            log.debug("cannot write to the wasm cache: %s", exc)

    def discard(self, key: str, reason: str) -> None:
        self._discard(self._entry(key), reason)

    def _discard(self, path: Path, reason: str) -> None:
        log.warning("discarding wasm cache entry %s: it %s", path.name, reason)
        self._stats.discarded += 1
        with contextlib.suppress(OSError):
            os.unlink(path)


def engine_fingerprint() -> str:
    described = ";".join(f"{k}={v}" for k, v in sorted(ENGINE_SETTINGS.items()))
    described += f";wasmtime={WASMTIME_VERSION};arch={platform.machine()};os={sys.platform}"
    return hashlib.sha256(described.encode()).hexdigest()[:16]
