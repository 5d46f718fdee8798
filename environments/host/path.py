"""Which program a name runs on the host, and whether a sandbox could have put it there.

A grant for `run_command:git` is a grant for the git the human has in mind. If PATH holds a
directory a sandbox can write (a workspace `.venv/bin`, `node_modules/.bin`, `.`, an empty
entry, `/tmp`), an executable a sandbox wrote there would run on the host under that grant. So
the runtime looks the program up itself, once, when it keys the call:

* found in a place no sandbox can write: the key stays `run_command:git`, and what executes is
  the path found (`/usr/bin/git`), so no second lookup can find something else;
* found in a place a sandbox can write: the key names that path instead of the program, spelled
  so that it can never equal a plain program name (`run_command:./.venv/bin/git` inside the
  workspace, `run_command:/tmp/bin/git` elsewhere), and the prompt says where it lives.

A place a sandbox can write (`sandbox_writable`) is the workspace (every sandbox may be given
it read-write), any directory other users can write (`/tmp`: whatever is there may have been
put there by anyone), and a relative PATH entry (it names a directory inside the workspace, the
cwd of every command). A symlink is judged by both its own place and where it leads.

Compound commands are run by bash, which does its own lookups while it runs; they get a PATH
without the sandbox-writable entries (`host_path`), so bash finds only what the human's own
PATH entries hold. A workspace program is then named by its path in the command itself, where
the human sees it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Program", "host_path", "locate", "sandbox_writable"]


@dataclass(frozen=True, slots=True)
class Program:
    """Where a program name leads on the host.

    `path` is the executable found (absolute; None when PATH holds none), `real` the file it is
    after symlinks, `writable` whether a sandbox could have written either.
    """

    name: str
    path: str | None
    real: str | None
    writable: bool
    workspace: str

    @property
    def key_action(self) -> str:
        """The key's action for a program in a writable place: `./rel/path` inside the
        workspace, the absolute path elsewhere. Both contain `/`, which no plain name can."""
        assert self.path is not None
        if _inside(self.path, self.workspace):
            return "./" + os.path.relpath(self.path, self.workspace)
        return self.path

    def where(self) -> str:
        """Where it lives, in words, for the prompt."""
        assert self.path is not None
        shown = self.key_action
        if self.real is not None and self.real != self.path:
            shown += f" (a symlink to {self.real})"
        if _inside(self.path, self.workspace) or (
            self.real is not None and _inside(self.real, self.workspace)
        ):
            return f"{shown}, inside the workspace, which sandboxes can write"
        return f"{shown}, in a directory other users or sandboxes can write"


def locate(name: str, workspace: Path, environ: Mapping[str, str] | None = None) -> Program:
    """Look `name` (no `/` in it) up in PATH as execvp would from `workspace` (a resolved
    path), and judge it. Strings and bare syscalls: this runs for every call on @shell."""
    environ = os.environ if environ is None else environ
    root = str(workspace)
    for entry in environ.get("PATH", os.defpath).split(os.pathsep):
        relative = not entry.startswith("/")
        # access() first: a miss is a False, not an exception, which for the dozen PATH
        # entries before /usr/bin is most of the cost.
        found = f"{root}/{entry}/{name}" if relative else f"{entry}/{name}"
        if not os.access(found, os.X_OK):
            continue
        try:
            info = os.stat(found)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        candidate = os.path.normpath(found)
        real = _real_path(candidate)
        writable = (
            relative or _writable(candidate, root) or (real != candidate and _writable(real, root))
        )
        return Program(name, candidate, real, writable, root)
    return Program(name, None, None, False, root)


def _real_path(path: str) -> str:
    """The path with every symlink resolved, by the kernel (os.path.realpath walks it in
    Python, a few times slower)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def sandbox_writable(path: Path, workspace: Path) -> bool:
    """Whether a sandbox (or another user) could have written the file at `path`: it lies in
    the workspace, or it or a directory above it can be written by others (other users may
    write it, or another user owns it)."""
    return _writable(str(path), str(workspace))


_TRUSTED_OWNERS: tuple[int, ...] = (0, os.geteuid())


def _writable(path: str, root: str) -> bool:
    if _inside(path, root):
        return True
    trusted_owners = _TRUSTED_OWNERS
    place, parent = path, os.path.dirname(path)
    while True:
        try:
            info = os.lstat(place) if place == path else os.stat(place)
        except FileNotFoundError:
            info = None  # judged by the directories above it
        except OSError:
            return True  # what cannot be checked is not trusted
        if info is not None:
            if info.st_uid not in trusted_owners:
                return True
            # A sticky directory (/tmp) lets others create names in it, not replace what sits
            # in a subdirectory they do not own: it counts only when it holds the file itself.
            sticky = info.st_mode & stat.S_ISVTX and place != parent
            if info.st_mode & stat.S_IWOTH and not stat.S_ISLNK(info.st_mode) and not sticky:
                return True
        if place == "/":
            return False
        place = os.path.dirname(place)


def host_path(workspace: Path, environ: Mapping[str, str] | None = None) -> str:
    """PATH without the entries a sandbox can write, for commands bash runs (see above)."""
    environ = os.environ if environ is None else environ
    workspace = workspace.resolve()
    kept = [
        entry
        for entry in environ.get("PATH", os.defpath).split(os.pathsep)
        if os.path.isabs(entry) and not _writable_directory(Path(entry), workspace)
    ]
    return os.pathsep.join(kept)


def _writable_directory(directory: Path, workspace: Path) -> bool:
    entry, real = str(directory), os.path.realpath(directory)
    root = str(workspace)
    return _writable(os.path.join(entry, "_"), root) or _writable(os.path.join(real, "_"), root)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
