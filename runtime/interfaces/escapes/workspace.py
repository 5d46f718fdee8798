"""The scratch workspace the sandbox layers attack, in a private temporary directory: a copy of the
project's codecoder.json, the protected paths and some bait (a secret outside the workspace,
symlinks to it), owned like the project so that the sandbox runs as the same user. Snapshots of
it tell what an attempt changed; after each attempt it is put back as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final, TypeAlias

from codecoder.config.project import PROJECT_FILE
from codecoder.interfaces.escapes.probe import _probe_bytes

Snapshot: TypeAlias = dict[str, tuple[str, bytes]]


class _Workspace:
    """The workspace the sandbox layers attack: a copy of the project's codecoder.json, the
    protected paths, and bait. Owned like the project, so a container runs as the same user, and
    writable by anyone, so that a mount is all that protects the protected paths."""

    def __init__(self, root: Path, project: Path, token: str) -> None:
        self.path = root / "workspace"
        self.outside = root / "outside"
        self.token = token
        info = project.stat()
        self._owner = (info.st_uid, info.st_gid)
        source = project / PROJECT_FILE
        self.project_file = source.read_bytes() if source.is_file() else b"{}\n"
        self._build()
        self.pristine = self.state(("",))
        self.outside_state = _tree_state(self.outside, "")

    def _build(self) -> None:
        self.path.mkdir()
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(self.token + "\n")
        files = {
            PROJECT_FILE: self.project_file,
            ".git/config": b"[core]\n\trepositoryformatversion = 0\n",
            ".git/HEAD": b"ref: refs/heads/main\n",
            ".claude/settings.json": b"{}\n",
            "pkg/.claude/settings.json": b"{}\n",
            "pkg/.mcp.json": b"{}\n",
            "pkg/.vscode/tasks.json": b'{"tasks": []}\n',
            "pkg/.gemini/settings.json": b"{}\n",
            "vendor/lib/.git/config": b"[core]\n\trepositoryformatversion = 0\n",
            "vendor/lib/.git/HEAD": b"ref: refs/heads/main\n",
            "src/notes.txt": b"notes\n",
            "race/real-dir/secret.txt": b"inside\n",
            "bin/probe.wasm": _probe_bytes(),
        }
        for directory in (".codecoder", ".git/hooks", "vendor/lib/.git/hooks"):
            (self.path / directory).mkdir(parents=True)
        for name, data in files.items():
            self.write(name, data)
        links = {
            "link-out": "../outside",
            "link-secret": "../outside/secret.txt",
            "abs-link": str(self.outside),
            "src/link-out": "../../outside",
            "src/git-link": "../.git",
            "race/dir": "real-dir",
        }
        for name, target in links.items():
            (self.path / name).symlink_to(target)
        for path in [self.path, *self.path.rglob("*")]:
            self._own(path)

    def _own(self, path: Path) -> None:
        if path.is_symlink():
            return
        path.chmod(0o777 if path.is_dir() else 0o666)
        if os.geteuid() == 0:
            os.chown(path, *self._owner)

    def write(self, name: str, data: bytes) -> None:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        # In place, not replaced: a file bind-mounted into a running container must keep its
        # inode, or the container would go on seeing the old one.
        with open(path, "wb") as f:
            f.write(data)
        self._own(path)

    def state(self, paths: Iterable[str]) -> Snapshot:
        snapshot: Snapshot = {}
        for rel in paths:
            snapshot.update(_tree_state(self.path, rel))
        return snapshot

    def changed(self, before: Snapshot, paths: Iterable[str]) -> list[str]:
        after = self.state(paths)
        return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))

    def outside_changed(self) -> list[str]:
        after = _tree_state(self.outside, "")
        return sorted(
            p
            for p in set(self.outside_state) | set(after)
            if self.outside_state.get(p) != after.get(p)
        )

    def set_id_files(self) -> list[str]:
        """The files of the workspace with a set-uid or set-gid bit or file capabilities: what
        the host would run with other ids than its caller's."""
        found = []
        for directory, _, files in os.walk(self.path):
            for name in files:
                path = os.path.join(directory, name)
                try:
                    mode = os.lstat(path).st_mode
                    capable = _has_capabilities(path)
                except OSError:
                    continue
                if (stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID)) or capable:
                    found.append(os.path.relpath(path, self.path))
        return found

    def restore(self) -> None:
        """Put back what attempts changed (deepest first), so the next one starts the same."""
        current = self.state(("",))
        for rel in sorted(set(current) - set(self.pristine), key=len, reverse=True):
            _remove(self.path / rel)
        for rel, (kind, data) in sorted(self.pristine.items(), key=lambda item: len(item[0])):
            if current.get(rel) == (kind, data):
                continue
            path = self.path / rel
            if kind == "file":
                if path.is_symlink() or path.is_dir():
                    _remove(path)
                self.write(rel, data)
            elif kind == "dir":
                if path.is_symlink() or (path.exists() and not path.is_dir()):
                    _remove(path)
                path.mkdir(exist_ok=True)
                self._own(path)
            elif kind == "link":
                _remove(path)
                path.symlink_to(data.decode())
        outside = _tree_state(self.outside, "")
        for name in set(outside) - set(self.outside_state):
            _remove(self.outside / name)
        for name, (kind, data) in self.outside_state.items():
            if kind == "file" and outside.get(name) != (kind, data):
                (self.outside / name).write_bytes(data)


_SNAPSHOT_CONTENT: Final = 1024 * 1024


def _tree_state(root: Path, rel: str) -> Snapshot:
    """Every entry at and under `rel` (symlinks not followed): kind and content or target."""
    snapshot: Snapshot = {}
    top = root / rel if rel else root

    def record(path: Path) -> None:
        name = path.relative_to(root).as_posix() if path != root else "."
        try:
            info = path.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            snapshot[name] = ("link", os.readlink(path).encode())
        elif stat.S_ISREG(info.st_mode) and info.st_size > _SNAPSHOT_CONTENT:
            # A file an attempt wrote to fill the disk: its size and time tell a change.
            snapshot[name] = ("file", f"{info.st_size}:{info.st_mtime_ns}".encode())
        elif stat.S_ISREG(info.st_mode):
            snapshot[name] = ("file", path.read_bytes())
        elif stat.S_ISDIR(info.st_mode):
            snapshot[name] = ("dir", b"")
        else:
            snapshot[name] = ("other", b"")

    record(top)
    if top.is_dir() and not top.is_symlink():
        for directory, dirs, files in os.walk(top):
            for name in dirs + files:
                record(Path(directory) / name)
    if not snapshot:
        snapshot[rel or "."] = ("missing", b"")
    return snapshot


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _has_capabilities(path: str) -> bool:
    try:
        os.getxattr(path, "security.capability", follow_symlinks=False)
    except OSError:
        return False
    return True


class _Watcher:
    """Looks at the workspace's files while a call runs: which of them held the token."""

    def __init__(self, root: Path, token: str) -> None:
        self.seen: list[str] = []
        self._root = root
        self._token = token.encode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="codecoder-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for directory, _, files in os.walk(self._root):
                for name in files:
                    path = os.path.join(directory, name)
                    try:
                        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    except OSError:
                        continue  # a link (the bait's lead outside), gone, a FIFO ...
                    with os.fdopen(fd, "rb") as file:
                        try:
                            found = self._token in file.read(1 << 16)
                        except OSError:
                            continue
                    shown = os.path.relpath(path, self._root)
                    if found and shown not in self.seen:
                        self.seen.append(shown)
            self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
