"""Change sets as a sandbox's agent writes them (changes.tar), for the copy-back's tests, and
snapshots of a workspace to tell whether anything of it changed."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path


def archive(*members: tuple[str, str, bytes | str]) -> bytes:
    """A changes.tar: (name, kind, content or link target) with kind file, dir, link, hardlink,
    fifo. Files carry setuid and setgid bits, which must never come back."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o6755 if kind == "file" else 0o755
            if kind == "file":
                assert isinstance(content, bytes)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "link": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind in ("link", "hardlink"):
                assert isinstance(content, str)
                info.linkname = content
            tar.addfile(info)
    return data.getvalue()


def snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry beneath `root` (symlinks not followed): kind, permission bits, content or
    link target."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            info = path.lstat()
            relative = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                found[relative] = ("link", 0, os.readlink(path).encode())
            elif stat.S_ISDIR(info.st_mode):
                found[relative] = ("dir", stat.S_IMODE(info.st_mode), b"")
            else:
                found[relative] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found
