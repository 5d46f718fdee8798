"""The git read tools stay within fixed bounds of memory and time whatever a sandbox wrote into
the repository: sparse work-tree files of any size, objects that inflate to gigabytes (loose,
packed, deltas), trees and indexes with more entries than they read, deep histories, deep and
wide trees, refs that are not refs, and objects or refs of another repository.

Each call runs in a subprocess whose peak RSS is measured against the same process before the
call (never a timed assertion)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import pytest
from dulwich import porcelain
from dulwich.index import Index, IndexEntry
from dulwich.objects import Blob
from dulwich.pack import write_pack_index

AUTHOR = b"Ada Lovelace <ada@example.org>"
GIB = 1024**3
# Peak RSS a call may add to its process, whatever the repository holds.
BOUND_KIB = 96 * 1024

CALL = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from codecoder.session import Runtime
    from codecoder.tools import gitread
    from codecoder.tools.git import GIT_TOOLS

    root, tool = Path(sys.argv[1]), sys.argv[2]
    args, limits = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    for name, value in limits.items():
        setattr(gitread, name, value)
    runtime = Runtime(root, asker=None, audit_log=None, tools={t.name: t for t in GIT_TOOLS})
    session = runtime.session()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = session.call(tool, args)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "grew_kib": after - before,
        "error": str(outcome.error) if outcome.error else None,
        "output": outcome.result.output if outcome.result else None,
        "data": outcome.result.data if outcome.result else None,
    }))
    """
)


def call(root: Path, tool: str, limits: dict[str, int] | None = None, **args: Any) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", CALL, str(root), tool, json.dumps(args), json.dumps(limits or {})],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def commit(root: Path, files: dict[str, bytes], message: bytes = b"commit") -> bytes:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    porcelain.add(str(root), paths=[str(root / name) for name in files])
    return porcelain.commit(str(root), message, author=AUTHOR, committer=AUTHOR)


@pytest.fixture
def repo(project: Path) -> Path:
    porcelain.init(str(project))
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    commit(project, {"big.bin": b"small\n", "a.txt": b"a\n"})
    return project


def within_bound(result: dict[str, Any]) -> bool:
    return bool(result["grew_kib"] < BOUND_KIB)


# --- sparse work-tree files ----------------------------------------------------------------------


@pytest.mark.parametrize("size", [GIB, 64 * GIB, 2**32 + len(b"small\n"), 2**40])
def test_git_status_on_a_sparse_file_of_any_size_stays_within_a_fixed_memory_bound(
    repo: Path, size: int
) -> None:
    os.truncate(repo / "big.bin", size)  # a hole: nothing on disk, `size` bytes to a reader
    status = call(repo, "git_status")
    diff = call(repo, "git_diff")

    assert status["output"] == "## main\n M big.bin"
    assert within_bound(status), status["grew_kib"]
    assert f"Large file ({len(b'small'):,}" not in diff["output"]
    assert f"{size:,} bytes) differs; not shown" in diff["output"]
    assert within_bound(diff), diff["grew_kib"]


def test_a_sparse_file_whose_size_matches_the_index_modulo_4_gib_is_not_read(repo: Path) -> None:
    # The index keeps 32 bits of a size: this one looks the same there, and is 4 GiB larger.
    os.truncate(repo / "big.bin", 2**32 + len(b"small\n"))
    os.utime(repo / "big.bin", (0, 0))
    status = call(repo, "git_status")

    assert status["output"] == "## main\n M big.bin"
    assert within_bound(status), status["grew_kib"]


# --- objects that inflate to gigabytes -----------------------------------------------------------


def zeros_id(size: int) -> bytes:
    hasher = hashlib.sha1(b"blob %d\0" % size)
    chunk = bytes(1 << 20)
    for _ in range(size // len(chunk)):
        hasher.update(chunk)
    return hasher.hexdigest().encode()


def deflated_zeros(size: int, header: bytes = b"") -> bytes:
    deflater = zlib.compressobj(9)
    parts = [deflater.compress(header)]
    chunk = bytes(1 << 20)
    for _ in range(size // len(chunk)):
        parts.append(deflater.compress(chunk))
    parts.append(deflater.flush())
    return b"".join(parts)


def stage_object(root: Path, name: str, sha: bytes, size: int) -> None:
    """An index entry for `name` naming the object `sha` (as `git add` of it would)."""
    index = Index(str(root / ".git" / "index"))
    index[name.encode()] = IndexEntry(
        ctime=(0, 0),
        mtime=(0, 0),
        dev=0,
        ino=0,
        mode=0o100644,
        uid=0,
        gid=0,
        size=size & 0xFFFFFFFF,
        sha=sha,
    )
    index.write()


def loose_bomb(root: Path, size: int) -> bytes:
    sha = zeros_id(size)
    path = root / ".git" / "objects" / sha[:2].decode() / sha[2:].decode()
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(deflated_zeros(size, b"blob %d\0" % size))
    return sha


def pack_header(kind: int, size: int) -> bytes:
    out = bytearray([(kind << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        out[-1] |= 0x80
        out.append(size & 0x7F)
        size >>= 7
    return bytes(out)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def write_pack(root: Path, entries: list[tuple[bytes, bytes]]) -> None:
    """A pack of (object id, entry bytes) and its index, in the repository's objects."""
    body = b"PACK" + struct.pack(">II", 2, len(entries))
    indexed = []
    for sha, entry in entries:
        indexed.append((bytes.fromhex(sha.decode()), len(body), zlib.crc32(entry)))
        body += entry
    checksum = hashlib.sha1(body).digest()
    pack = root / ".git" / "objects" / "pack" / f"pack-{checksum.hex()}"
    pack.parent.mkdir(parents=True, exist_ok=True)
    pack.with_suffix(".pack").write_bytes(body + checksum)
    with open(pack.with_suffix(".idx"), "wb") as index:
        write_pack_index(index, sorted(indexed), checksum)


def packed_bomb(root: Path, size: int) -> bytes:
    sha = zeros_id(size)
    write_pack(root, [(sha, pack_header(3, size) + deflated_zeros(size))])
    return sha


def delta_bomb(root: Path, size: int) -> bytes:
    """A 64 KiB blob of zeros, and a delta that copies it over and over to `size` bytes."""
    base = bytes(65536)
    base_sha = Blob.from_string(base).id
    copy = bytes([0x80 | 0x20]) + b"\x01"  # copy 0x10000 bytes from offset 0 (size byte 2 = 1)
    delta = varint(len(base)) + varint(size) + copy * (size // len(base))
    base_entry = pack_header(3, len(base)) + zlib.compress(base)
    ofs = varint_offset(len(base_entry))
    delta_entry = pack_header(6, len(delta)) + ofs + zlib.compress(delta, 9)
    sha = zeros_id(size)
    write_pack(root, [(base_sha, base_entry), (sha, delta_entry)])
    return sha


def varint_offset(back: int) -> bytes:
    """The negative offset of an OFS_DELTA's base, as git encodes it."""
    out = [back & 0x7F]
    back >>= 7
    while back:
        back -= 1
        out.append(0x80 | (back & 0x7F))
        back >>= 7
    return bytes(reversed(out))


@pytest.mark.parametrize("make", [loose_bomb, packed_bomb, delta_bomb])
def test_an_object_that_inflates_to_a_gigabyte_is_never_inflated(repo: Path, make: Any) -> None:
    sha = make(repo, GIB)
    stage_object(repo, "bomb.bin", sha, GIB)
    status = call(repo, "git_status")
    staged = call(repo, "git_diff", staged=True)

    assert status["output"].splitlines()[:2] == ["## main", "AD bomb.bin"]
    assert "Large file (1,073,741,824 bytes) differs; not shown" in staged["output"]
    assert staged["data"]["files"][0]["too_large"] is True
    assert within_bound(status) and within_bound(staged), (status, staged["grew_kib"])


def test_a_commit_too_large_to_read_fails_git_log_with_the_reason(repo: Path) -> None:
    tree = porcelain.open_repo(str(repo))[b"HEAD"].tree
    message = b"x" * (200 * 1024 * 1024)
    body = b"tree %s\nauthor %s 0 +0000\ncommitter %s 0 +0000\n\n" % (tree, AUTHOR, AUTHOR)
    raw = body + message
    sha = hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest().encode()
    deflater = zlib.compressobj(9)
    data = deflater.compress(b"commit %d\0" % len(raw) + body)
    data += deflater.compress(message) + deflater.flush()
    path = repo / ".git" / "objects" / sha[:2].decode() / sha[2:].decode()
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    (repo / ".git" / "refs" / "heads" / "main").write_bytes(sha + b"\n")
    log = call(repo, "git_log")

    assert log["error"] is not None
    assert f"is {len(raw):,} bytes, more than the git tools read" in log["error"]
    assert within_bound(log), log["grew_kib"]


# --- more entries than the tools read ------------------------------------------------------------


def loose(root: Path, kind: bytes, raw: bytes) -> bytes:
    """Write a loose object; its id."""
    data = b"%s %d\0" % (kind, len(raw)) + raw
    sha = hashlib.sha1(data).hexdigest().encode()
    path = root / ".git" / "objects" / sha[:2].decode() / sha[2:].decode()
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(zlib.compress(data))
    return sha


def tree_of(entries: list[tuple[bytes, bytes, bytes]]) -> bytes:
    return b"".join(
        b"%s %s\0" % (mode, name) + bytes.fromhex(sha.decode()) for mode, name, sha in entries
    )


def head_at(root: Path, tree: bytes) -> None:
    raw = b"tree %s\nauthor %s 0 +0000\ncommitter %s 0 +0000\n\nwide\n" % (tree, AUTHOR, AUTHOR)
    (root / ".git" / "refs" / "heads" / "main").write_bytes(loose(root, b"commit", raw) + b"\n")


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        ("one tree of 310,000 entries", "tree [0-9a-f]{12} of the repository is 11,160,000 bytes"),
        ("320 trees of 1,000 entries", "has more than 300,000 entries"),
    ],
)
def test_a_tree_with_more_entries_than_the_tools_read_is_refused_with_the_reason(
    repo: Path, shape: str, problem: str
) -> None:
    blob = loose(repo, b"blob", b"x")
    if shape.startswith("one"):
        files = [(b"100644", b"f%07d" % i, blob) for i in range(310_000)]
        top = loose(repo, b"tree", tree_of(files))
    else:
        sub = loose(repo, b"tree", tree_of([(b"100644", b"f%04d" % i, blob) for i in range(1000)]))
        top = loose(repo, b"tree", tree_of([(b"40000", b"d%04d" % i, sub) for i in range(320)]))
    head_at(repo, top)
    status = call(repo, "git_status")
    diff = call(repo, "git_diff", base="HEAD")

    for result in (status, diff):
        assert re.search(problem, result["error"]), result["error"]
        assert within_bound(result), result["grew_kib"]


def test_an_index_claiming_more_entries_than_the_tools_read_is_refused(repo: Path) -> None:
    index = repo / ".git" / "index"
    data = bytearray(index.read_bytes())
    data[8:12] = (5_000_000).to_bytes(4, "big")
    index.write_bytes(bytes(data))
    status = call(repo, "git_status")

    assert "index holds 5,000,000 entries" in status["error"]


def test_a_history_longer_than_the_budget_is_cut_with_a_note(repo: Path) -> None:
    for i in range(60):
        commit(repo, {"a.txt": b"%d\n" % i}, b"commit %d" % i)
    whole = call(repo, "git_log", max_count=5)
    cut = call(repo, "git_log", {"READ_BUDGET_OBJECTS": 40}, paths=["nowhere"])

    assert len(whole["data"]["commits"]) == 5 and whole["data"]["cut"] is None
    assert cut["error"] is None
    assert cut["data"]["commits"] == []
    assert "reads at most" in cut["data"]["cut"]
    assert cut["output"].endswith(
        "narrow the call (paths, a revision range) or use run_command to run git]"
    )


def test_deep_and_wide_work_trees_are_walked_without_recursion_or_a_descriptor_per_directory(
    repo: Path,
) -> None:
    deep = repo / "deep"
    path = deep
    for _ in range(40):  # 40 levels of 50 names: a path of 2,000 directories
        path = path / "/".join(["d"] * 50)
        path.mkdir(parents=True)
    (path / "leaf.txt").write_text("leaf\n")
    (deep / "d" / ".gitignore").write_text("*.tmp\n")
    commit(repo, {f"wide/w{i:04}/f": b"f\n" for i in range(2000)})
    script = CALL.replace(
        "import json, resource, sys",
        "import json, resource, sys\nresource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))",
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(repo), "git_status", "{}", "{}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        subprocess.run(["rm", "-rf", str(deep)], check=True)  # pytest's cleanup recurses
    result = json.loads(done.stdout)

    assert result["error"] is None
    assert result["output"] == "## main\n?? deep/"
    assert result["data"]["untracked_truncated"] is False


# --- what is not the repository's own -------------------------------------------------------------


def test_a_ref_file_that_is_not_a_ref_is_not_read_whole(repo: Path) -> None:
    (repo / ".git" / "refs" / "heads" / "main").write_bytes(b"a" * (64 * 1024 * 1024))
    log = call(repo, "git_log")

    assert "is a file of 67,108,864 bytes, not a ref" in log["error"]
    assert within_bound(log), log["grew_kib"]


def test_objects_of_another_repository_are_never_read_through_alternates(
    repo: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    porcelain.init(str(elsewhere))
    secret = commit(elsewhere, {"secret.txt": b"elsewhere\n"}, b"a secret history")
    info = repo / ".git" / "objects" / "info"
    info.mkdir(exist_ok=True)
    (info / "alternates").write_text(str(elsewhere / ".git" / "objects") + "\n")
    revision = call(repo, "git_log", revision=secret.decode())
    (repo / ".git" / "refs" / "heads" / "main").write_bytes(secret + b"\n")
    log = call(repo, "git_log")

    assert "which the repository itself does not hold" in log["error"]
    assert "unknown revision" in revision["error"]
    assert "a secret history" not in json.dumps([log, revision])


def test_a_commondir_pointing_elsewhere_is_refused(repo: Path, tmp_path: Path) -> None:
    (repo / ".git" / "commondir").write_text(str(tmp_path) + "\n")
    status = call(repo, "git_status")

    assert "commondir" in status["error"]
