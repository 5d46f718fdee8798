"""Reading a repository a sandbox may have written, within fixed bounds of memory and time.

The git read tools (`runtime.tools.git`) need no permission, and what they read may have been
written by a sandbox: the work tree always, and in @bwrap git's own files too (objects, refs, the
index). A 64 GiB sparse file costs nothing on disk and a zlib stream of 1 MiB inflates to 1 GiB,
so nothing is read whole on trust:

* **Objects** (`BoundedStore`): an object's size is read from its header before it is inflated
  (a loose object's zlib stream; a pack entry's header, and for a delta the size it expands to
  and the bases it expands from). A blob larger than `MAX_OBJECT_BYTES`, or a tree, commit or
  tag larger than `MAX_STRUCTURE_BYTES` (parsed, a tree costs tens of times its size), is
  refused (`ObjectTooLarge`: a diff shows it as too large, anything else fails with the
  reason). Only
  objects of the repository itself are read: never through `objects/info/alternates`, which
  could name any repository on the machine.
* **A call's budget** (`ReadBudget`): at most `READ_BUDGET_BYTES` of objects inflated and
  `READ_BUDGET_OBJECTS` objects read, and at most `READ_BUDGET_BYTES` of work-tree files hashed;
  past it the tool stops (`OverBudget`, which git_log turns into a note).
* **Work-tree files** are hashed as git hashes them, in chunks (`blob_id`), and only when their
  stat does not settle it: a size other than the index's is "modified" without a read, and a
  file larger than `MAX_HASH_BYTES` is reported modified without being read.
* **Counts**: the index and the trees walked hold at most `MAX_ENTRIES` entries.
"""

from __future__ import annotations

import errno
import hashlib
import os
import zlib
from collections.abc import Iterator
from typing import Any, Final

from dulwich.objects import ObjectID, RawObjectID, ShaFile, hex_to_sha, sha_to_hex

from codecoder.foundation.errors import ExecutionFailed

__all__ = [
    "MAX_ENTRIES",
    "MAX_HASH_BYTES",
    "MAX_OBJECT_BYTES",
    "READ_BUDGET_BYTES",
    "READ_BUDGET_OBJECTS",
    "BoundedStore",
    "ObjectTooLarge",
    "OverBudget",
    "ReadBudget",
    "blob_id",
    "check_index",
]

MAX_OBJECT_BYTES: Final = 64 * 1024 * 1024
MAX_STRUCTURE_BYTES: Final = 4 * 1024 * 1024
MAX_HASH_BYTES: Final = 256 * 1024 * 1024
MAX_ENTRIES: Final = 300_000
READ_BUDGET_BYTES: Final = 1024 * 1024 * 1024
READ_BUDGET_OBJECTS: Final = 500_000
MAX_INDEX_BYTES: Final = 128 * 1024 * 1024
MAX_DELTA_CHAIN: Final = 100
HASH_CHUNK: Final = 1024 * 1024
_TYPES: Final = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
_NAMES: Final = {number: name.decode() for name, number in _TYPES.items()}
_BLOB: Final = 3
_OFS_DELTA, _REF_DELTA = 6, 7
# (type, size): the type of the object (a delta's is its base's), the largest size of its chain.
_Sized = tuple[int, int]


class ObjectTooLarge(ExecutionFailed):
    """An object of the repository is larger than the git tools read."""

    def __init__(self, sha: str, kind: str, size: int, limit: int) -> None:
        super().__init__(
            f"{kind} {sha[:12]} of the repository is {size:,} bytes, more than the git tools "
            f"read ({limit:,}); use run_command to run git on it"
        )
        self.size = size


class OverBudget(ExecutionFailed):
    """A call read as much as one call may."""


class ReadBudget:
    """What one call of a git tool may read: bytes and objects, counted as they are read (the
    limits are this module's when the call starts, so that a test may lower them)."""

    def __init__(self) -> None:
        self.max_bytes, self.max_objects = READ_BUDGET_BYTES, READ_BUDGET_OBJECTS
        self.bytes = self.objects = 0

    def spend(self, size: int, what: str) -> None:
        self.bytes += size
        self.objects += 1
        if self.bytes > self.max_bytes or self.objects > self.max_objects:
            raise OverBudget(
                f"stopped while reading {what}: one call of the git tools reads at most "
                f"{self.max_bytes:,} bytes in {self.max_objects:,} objects and files, and this "
                "repository needs more; narrow the call (paths, a revision range) or use "
                "run_command to run git"
            )


class BoundedStore:
    """The repository's object store, read only within `MAX_OBJECT_BYTES` per object and the
    call's `budget`; what dulwich's walkers and diffs need of a store (`store[sha]`, `in`)."""

    def __init__(self, store: Any, budget: ReadBudget) -> None:
        self._store = store
        self.budget = budget
        self._sizes: dict[bytes, tuple[int, int]] = {}

    def __getattr__(self, name: str) -> Any:
        if name in ("alternates", "get_raw", "iter_unpacked_subset", "get_unpacked_object"):
            raise AttributeError(name)  # everything is read through __getitem__, bounded
        return getattr(self._store, name)

    def __contains__(self, sha: object) -> bool:
        try:
            self.size(_hex(sha))
        except KeyError:
            return False
        return True

    def size(self, sha: bytes) -> int:
        """The size `sha` inflates to (the largest of its delta chain); KeyError if the
        repository itself does not hold it."""
        return self._kind_and_size(sha)[1]

    def _kind_and_size(self, sha: bytes) -> tuple[int, int]:
        found = self._sizes.get(sha)
        if found is None:
            found = self._sizes[sha] = _object_size(self._store, sha, 0)
        return found

    def __getitem__(self, sha: object) -> ShaFile:
        hexsha = _hex(sha)
        kind, size = self._kind_and_size(hexsha)
        limit = MAX_OBJECT_BYTES if kind == _BLOB else MAX_STRUCTURE_BYTES
        if size > limit:
            name = _NAMES.get(kind, "object")
            raise ObjectTooLarge(hexsha.decode("ascii", "replace"), name, size, limit)
        self.budget.spend(size, f"object {hexsha[:12].decode('ascii', 'replace')}")
        obj: ShaFile = self._store[hexsha]
        return obj


def _hex(sha: object) -> bytes:
    if not isinstance(sha, bytes):
        raise KeyError(sha)
    return sha_to_hex(RawObjectID(sha)) if len(sha) == 20 else sha


def _object_size(store: Any, sha: bytes, depth: int) -> _Sized:
    if depth > MAX_DELTA_CHAIN:
        return 0, MAX_OBJECT_BYTES + 1  # a chain deeper than git makes: never resolved
    raw = hex_to_sha(ObjectID(sha))
    for pack in store.packs:
        try:
            offset = pack.index.object_offset(raw)
        except KeyError:
            continue
        return _pack_entry_size(store, pack._data_path, offset, depth)
    path = os.path.join(store.path, sha[:2].decode("ascii"), sha[2:].decode("ascii"))
    return _loose_size(path, sha)


def _loose_size(path: str, sha: bytes) -> _Sized:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise KeyError(sha) from None
        raise
    with os.fdopen(fd, "rb") as file:
        inflater = zlib.decompressobj()
        head = b""
        while b"\0" not in head:
            chunk = file.read(4096)
            if not chunk or len(head) > 64:
                raise ValueError(f"loose object {sha[:12]!r} has no readable header")
            head += inflater.decompress(chunk, 64)
    kind, _, size = head.split(b"\0", 1)[0].partition(b" ")
    if kind not in _TYPES or not size.isdigit():
        raise ValueError(f"loose object {sha[:12]!r} has a malformed header")
    return _TYPES[kind], int(size)


def _pack_entry_size(store: Any, pack_path: str, offset: int, depth: int) -> _Sized:
    """The size of the object at `offset` of the pack, and of the bases a delta needs."""
    with open(pack_path, "rb") as pack:
        pack.seek(offset)
        head = pack.read(64)
        if not head:
            raise ValueError(f"pack {pack_path} ends before offset {offset}")
        byte = head[0]
        kind, size, shift, i = (byte >> 4) & 7, byte & 0x0F, 4, 1
        while byte & 0x80:
            byte = head[i]
            size |= (byte & 0x7F) << shift
            shift, i = shift + 7, i + 1
        if kind not in (_OFS_DELTA, _REF_DELTA):
            return kind, size
        if kind == _OFS_DELTA:
            byte = head[i]
            i += 1
            back = byte & 0x7F
            while byte & 0x80:
                byte = head[i]
                i += 1
                back = ((back + 1) << 7) | (byte & 0x7F)
            base_offset: int | None = offset - back
            base_sha = b""
        else:
            base_offset, base_sha = None, head[i : i + 20]
            i += 20
        pack.seek(offset + i)
        target = _delta_target_size(pack)
    if base_offset is not None:
        kind, base_size = _pack_entry_size(store, pack_path, base_offset, depth + 1)
    else:
        kind, base_size = _object_size(store, sha_to_hex(RawObjectID(base_sha)), depth + 1)
    return kind, max(target, base_size)


def _delta_target_size(pack: Any) -> int:
    """The size a delta expands to: the second varint of its (inflated) header."""
    inflater = zlib.decompressobj()
    head = b""
    while len(head) < 20:
        chunk = pack.read(256)
        if not chunk:
            break
        head += inflater.decompress(chunk, 20 - len(head))
        if inflater.eof:
            break
    numbers = []
    i = 0
    for _ in range(2):
        value, shift = 0, 0
        while True:
            if i >= len(head):
                raise ValueError("a delta in a pack has a malformed header")
            byte = head[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        numbers.append(value)
    return numbers[1]


def blob_id(fd: int, size: int, budget: ReadBudget) -> bytes:
    """The git object id of the file open at `fd` (of `size` bytes), read in chunks."""
    budget.spend(size, "a file of the work tree")
    hasher = hashlib.sha1(b"blob %d\0" % size)  # git's object id
    left = size
    while left > 0:
        chunk = os.read(fd, min(HASH_CHUNK, left))
        if not chunk:
            break  # it shrank: what was read is hashed, and will not match
        hasher.update(chunk)
        left -= len(chunk)
    return hasher.hexdigest().encode("ascii")


def check_index(path: str) -> None:
    """Refuse an index file too large to load within the bounds (its size, its entry count)."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            head = file.read(12)
    except FileNotFoundError:
        return
    count = int.from_bytes(head[8:12], "big") if len(head) == 12 else 0
    if size > MAX_INDEX_BYTES or count > MAX_ENTRIES:
        raise ExecutionFailed(
            f"the repository's index holds {count:,} entries in {size:,} bytes, more than the "
            f"git tools read ({MAX_ENTRIES:,} entries, {MAX_INDEX_BYTES:,} bytes); use "
            "run_command to run git"
        )


def bounded_entries(entries: Iterator[Any], what: str) -> Iterator[Any]:
    """`entries`, refusing past `MAX_ENTRIES`."""
    for count, entry in enumerate(entries, 1):
        if count > MAX_ENTRIES:
            raise ExecutionFailed(
                f"{what} has more than {MAX_ENTRIES:,} entries, more than the git tools read; "
                "narrow the call with paths or use run_command to run git"
            )
        yield entry
