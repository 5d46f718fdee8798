"""What host git runs of a workspace, as the human last saw it: refused when it has changed.

Any git the host runs (a granted `git commit`, a `make` that calls git, the `commit` tool) runs
the hooks of the repository it works in and the programs its configuration names
(`core.fsmonitor`, filter and diff drivers, aliases, `core.hooksPath` …). A granted host
command that writes files (`cp -rT fixture .`, `cp -r tpl/. .`, `tar -x`) can write those too,
and the next granted `git status` would run them. So before every host command the runtime
compares what git would run now with what the human last saw, and refuses the command while
anything was added or changed; after one, it says at once what the command changed.

What git would run, per repository (every `.git` of the workspace, at any depth, found by
`environments.workspaceguard.ProtectedScan`; a `gitdir:` file or link is followed to the
repository it names, wherever that is):

    hooks     every entry of the hooks directory (`core.hooksPath` when the repository sets
              it, else `hooks/` of the common git directory) but `*.sample`, by content
    config    every entry of `config` and `config.worktree` except the few that cannot make git
              run a program or read another file (`_HARMLESS`: user.name, remote.*.url,
              branch.*.merge, core.filemode …); an `include`/`includeIf` entry also by the
              content of the file it includes. A line that cannot be parsed counts as an entry.

The same look finds the other protected entries a host command created (`GitGuard.after`:
`codecoder.json`, `.codecoder/`, an agent's settings at the top of the workspace), which the
dispatcher quarantines as it does what a sandbox leaves behind.

`RepositoryState` is that, and `GitSeen` the record of what was seen, in the project's state
directory (out of every tool's reach): the first look records what is there (before it,
nothing codecoder ran could have changed it); `codecoder trust --git` shows what changed and
records the state as it is then. Removing a hook or an entry needs no acceptance: only what
was not seen is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from codecoder.environments.placeholders import is_placeholder
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.foundation.atomicfile import replace_atomically
from codecoder.foundation.errors import ConfigError, ExecutionFailed
from codecoder.foundation.protected import is_git_name
from codecoder.foundation.regularfile import read_regular_file
from codecoder.foundation.state import project_state_directory

__all__ = [
    "ACCEPT_COMMAND",
    "GitGuard",
    "GitSeen",
    "RepositoryState",
    "parse_git_config",
    "refusal",
    "repository_state",
]

ACCEPT_COMMAND: Final = "codecoder trust --git"
RECORD: Final = "git-seen.json"
_MAX_HOOK: Final = 4 << 20  # bytes of a hook read for its digest (its size counts as well)
_MAX_INCLUDE_DEPTH: Final = 10  # git's own limit on nested includes

# Configuration that cannot make git run a program or read another file: changing it needs
# nobody's acceptance. Everything else does (fail closed: an unknown key is a program until
# shown otherwise). Keys are `section.name` or `section.*.name` (any subsection).
_HARMLESS: Final = frozenset(
    {
        *("core.repositoryformatversion", "core.filemode", "core.bare", "core.ignorecase"),
        *("core.logallrefupdates", "core.precomposeunicode", "core.symlinks", "core.autocrlf"),
        *("core.eol", "core.safecrlf", "core.quotepath", "core.abbrev", "core.compression"),
        *("core.loosecompression", "core.checkstat", "core.trustctime", "core.untrackedcache"),
        *("core.splitindex", "core.sparsecheckout", "core.sparsecheckoutcone", "core.commentchar"),
        *("core.whitespace", "core.preloadindex", "core.multipackindex", "core.commitgraph"),
        *("core.warnambiguousrefs", "core.bigfilethreshold", "core.protecthfs", "core.protectntfs"),
        *("user.name", "user.email", "user.signingkey", "author.name", "author.email"),
        *("committer.name", "committer.email", "init.defaultbranch"),
        *("remote.*.url", "remote.*.pushurl", "remote.*.fetch", "remote.*.push", "remote.*.prune"),
        *("remote.*.tagopt", "remote.*.mirror", "remote.*.prunetags", "remote.*.promisor"),
        *("remote.*.partialclonefilter", "remote.*.skipdefaultupdate", "remote.*.skipfetchall"),
        *("branch.*.remote", "branch.*.pushremote", "branch.*.merge", "branch.*.rebase"),
        *("branch.*.description", "pull.rebase", "pull.ff", "push.default", "push.followtags"),
        *(
            "push.autosetupremote",
            "fetch.prune",
            "fetch.prunetags",
            "merge.ff",
            "rebase.autosquash",
        ),
        *("merge.conflictstyle", "rebase.autostash", "rebase.updaterefs", "status.short"),
        *("status.branch", "status.showuntrackedfiles", "diff.renames", "diff.algorithm"),
        *("diff.mnemonicprefix", "diff.noprefix", "diff.context", "diff.colormoved", "log.date"),
        *("log.decorate", "gc.auto", "gc.reflogexpire", "index.version", "feature.manyfiles"),
        *("extensions.objectformat", "extensions.worktreeconfig", "extensions.refstorage"),
        *("submodule.*.url", "submodule.*.active", "submodule.*.branch", "color.ui"),
        *("advice.detachedhead", "i18n.commitencoding", "i18n.logoutputencoding"),
    }
)
_INCLUDES: Final = ("include.path", "includeif.*.path")


@dataclass(frozen=True, slots=True)
class RepositoryState:
    """What git would run of one repository: its hooks (name → digest) and its configuration
    entries that are not harmless (`(key, value)`, includes with the digest of the file)."""

    hooks: Mapping[str, str] = field(default_factory=dict)
    config: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"hooks": dict(sorted(self.hooks.items())), "config": [list(e) for e in self.config]}

    @classmethod
    def from_json(cls, data: Any) -> RepositoryState:
        if not isinstance(data, dict):
            raise ValueError("not an object")
        hooks, config = data.get("hooks", {}), data.get("config", [])
        if not isinstance(hooks, dict) or not isinstance(config, list):
            raise ValueError("hooks or config of the wrong type")
        entries = tuple((str(k), str(v)) for k, v in config)
        return cls({str(k): str(v) for k, v in hooks.items()}, entries)

    def unseen(self, seen: RepositoryState | None) -> list[str]:
        """What this state holds that `seen` did not, in words."""
        before_hooks = seen.hooks if seen is not None else {}
        before_config = set(seen.config) if seen is not None else set()
        found = []
        for name, digest in sorted(self.hooks.items()):
            if name not in before_hooks:
                found.append(f"hook {name} was added ({digest[:16]}…)")
            elif before_hooks[name] != digest:
                found.append(f"hook {name} was changed ({digest[:16]}…)")
        found += [
            f"config {key} = {value!r} was added"
            for key, value in self.config
            if (key, value) not in before_config
        ]
        return found


def repository_state(workspace: Path, git_entry: str) -> RepositoryState:
    """The state of the repository whose `.git` is at the workspace-relative `git_entry`."""
    git_dir = _git_dir(workspace / git_entry)
    if git_dir is None:
        return RepositoryState(config=(("unreadable", f"{git_entry} names no git directory"),))
    common = _common_dir(git_dir)
    work_tree = (workspace / git_entry).parent
    config: list[tuple[str, str]] = []
    for path in (common / "config", git_dir / "config.worktree"):
        config += _code_running(path, workspace, work_tree)
    hooks_path = next((value for key, value in config if key == "core.hookspath"), None)
    if hooks_path is not None:
        hooks_dir = work_tree / os.path.expanduser(hooks_path)
    else:
        hooks_dir = common / "hooks"
    return RepositoryState(_hooks(hooks_dir, workspace), tuple(config))


class GitSeen:
    """The record of what git would run that the human has seen, per repository."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.path = project_state_directory(workspace) / RECORD
        # The record as last read, and the file it was read from (device, inode, size, mtime):
        # every host command looks twice, and the record changes only when the human accepts.
        self._read: tuple[tuple[int, int, int, int], dict[str, RepositoryState]] | None = None

    def read(self) -> dict[str, RepositoryState] | None:
        """The record; None when there is none. An unreadable one is an error (it could not
        be told apart from a record of nothing). Read again only when the file is another
        (it is always replaced whole, `write`) or changed."""
        try:
            # The file as it is before the read: replaced meanwhile, the next look reads again.
            mark = _mark(os.stat(self.path))
            if self._read is not None and self._read[0] == mark:
                return dict(self._read[1])
            data = json.loads(read_regular_file(self.path))
            repositories = data["repositories"]
            if not isinstance(repositories, dict):
                raise ValueError("repositories is not an object")
            states = {str(k): RepositoryState.from_json(v) for k, v in repositories.items()}
            self._read = (mark, states)
            return dict(states)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"the record of what git runs cannot be read ({exc}); see and accept the "
                f"workspace's git hooks and configuration with `{ACCEPT_COMMAND}`",
                self.path,
            ) from exc

    def write(self, states: Mapping[str, RepositoryState]) -> None:
        document = {
            "workspace": str(self.workspace),
            "repositories": {rel: state.to_json() for rel, state in sorted(states.items())},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            replace_atomically(self.path, (json.dumps(document, indent=1) + "\n").encode(), 0o600)
        except OSError as exc:
            raise ConfigError(
                f"cannot record what git runs: {exc.strerror or exc}", self.path
            ) from exc


def _mark(info: os.stat_result) -> tuple[int, int, int, int]:
    """Which file, as it is now: replaced or written, it differs."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class GitGuard:
    """The check around host commands of one workspace (see the module docstring). Keeps its
    scan of the workspace's repositories between commands, so a look costs one `lstat` per
    directory after the first."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.seen = GitSeen(workspace)
        self._scan: ProtectedScan | None = None
        self._planted: set[str] = set()
        self._lock = threading.Lock()  # calls of a server may run at once

    def repositories(self) -> list[str]:
        with self._lock:
            if self._scan is None:
                self._scan = ProtectedScan(self.workspace)
            else:
                appeared = self._scan.changes().appeared
                self._planted.update(
                    e for e in appeared if not _is_git(e) and not is_placeholder(self.workspace, e)
                )
            return sorted(e for e in self._scan.entries if _is_repository(e))

    def after(self) -> tuple[list[str], list[str]]:
        """After a host command, one look: the protected entries other than git's
        (codecoder.json, `.codecoder/`, an agent's settings at the top) that appeared since
        `before()`, which the command created; and what git would now run that the human has
        not seen (repositories and `.gitmodules` are judged by that)."""
        changes = self.unseen()
        with self._lock:
            return sorted(self._planted), changes

    def current(self) -> dict[str, RepositoryState]:
        return {rel: repository_state(self.workspace, rel) for rel in self.repositories()}

    def unseen(self) -> list[str]:
        """What git would run now that the human has not seen; the first look records what is
        there and finds nothing."""
        current = self.current()
        seen = self.seen.read()
        if seen is None:
            self.seen.write(current)
            return []
        return [
            f"{rel}: {change}"
            for rel, state in current.items()
            for change in state.unseen(seen.get(rel))
        ]

    def baseline(self) -> None:
        """Record what git would run now, unless a record exists: called before any sandboxed
        call, so that what a sandbox changes (a file `.git/config` includes, a script a config
        value names) is judged against what was there before any sandbox ran, whatever the
        order of calls. A record that cannot be read is left to the host's check (which
        refuses, saying why)."""
        with contextlib.suppress(ConfigError):
            if self.seen.read() is None:
                self.seen.write(self.current())

    def before(self) -> None:
        """Refuse a host command while git would run something the human has not seen."""
        changes = self.unseen()
        with self._lock:
            self._planted.clear()  # made before this command, by someone else (the runtime)
        if changes:
            raise ExecutionFailed(refusal(changes))

    def accept(self) -> list[str]:
        """Record what git would run now as seen; returns what was not seen before."""
        current = self.current()
        seen = self.seen.read() or {}
        changes = [
            f"{rel}: {change}"
            for rel, state in current.items()
            for change in state.unseen(seen.get(rel))
        ]
        self.seen.write(current)
        return changes


def refusal(changes: Iterable[str], *, by_this_command: bool = False) -> str:
    """What changed, and what to do: the refusal of a host command, or (`by_this_command`)
    the note on the result of the command that made the change."""
    listed = "; ".join(changes)
    what = (
        "this command changed what the workspace's git runs"
        if by_this_command
        else "what the workspace's git runs changed since you last saw it"
    )
    return (
        f"{what}: {listed}. Host commands (which may run git) are refused until you look at "
        f"it and accept it with `{ACCEPT_COMMAND}`"
    )


def _is_git(entry: str) -> bool:
    return is_git_name(entry.rsplit("/", 1)[-1])


def _is_repository(entry: str) -> bool:
    name = entry.rsplit("/", 1)[-1]
    return name.casefold().rstrip(". ") == ".git" or name.casefold().startswith("git~")


def _git_dir(entry: Path) -> Path | None:
    """The git directory a `.git` entry stands for: itself, where its link leads, or what its
    `gitdir:` line names."""
    try:
        info = os.stat(entry)
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return Path(os.path.realpath(entry))
    first = (_small_file(entry) or b"").decode("utf-8", "replace").split("\n", 1)[0]
    if not first.startswith("gitdir:"):
        return None
    named = Path(first[len("gitdir:") :].strip())
    return Path(os.path.realpath(entry.parent / named))


def _common_dir(git_dir: Path) -> Path:
    try:
        named = os.fsdecode(read_regular_file(git_dir / "commondir", limit=4096)).strip()
    except OSError:
        return git_dir
    return Path(os.path.realpath(git_dir / named)) if named else git_dir


def _hooks(directory: Path, workspace: Path) -> dict[str, str]:
    """Each hook (by where it is: workspace-relative inside it, absolute elsewhere) and its
    digest."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}
    shown = os.path.normpath(directory)
    if shown == str(workspace) or shown.startswith(f"{workspace}/"):
        shown = os.path.relpath(shown, workspace)
    return {
        f"{shown}/{name}": _digest(directory / name)
        for name in names
        if not name.endswith(".sample")
    }


def _digest(path: Path) -> str:
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            return "link:" + os.readlink(path) + ":" + _digest(Path(os.path.realpath(path)))
        if not stat.S_ISREG(info.st_mode):
            return f"mode:{stat.S_IFMT(info.st_mode):o}"
    except OSError as exc:
        return f"unreadable:{exc.strerror or exc}"
    data = _small_file(path, max(info.st_size, 0))
    if data is None:
        return f"unreadable:{info.st_size} bytes"
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _harmless(key: str) -> bool:
    parts = key.split(".")
    if len(parts) > 2:
        return f"{parts[0]}.*.{parts[-1]}" in _HARMLESS
    return key in _HARMLESS


def _small_file(path: Path, limit: int = _MAX_HOOK) -> bytes | None:
    """The bytes of a regular file no larger than `limit`; None for anything else (a FIFO
    planted as a config file must not hang the check)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(limit + 1)
    finally:
        os.close(fd)


def _code_running(
    path: Path, workspace: Path, work_tree: Path, depth: int = 0
) -> list[tuple[str, str]]:
    """The entries of a configuration file that are not harmless; an included file's entries
    follow its include (to git's own depth limit), and a value naming a file of the workspace
    (`core.sshCommand = ./tools/ssh.sh`, `core.fsmonitor = .husky/fsmonitor`,
    `core.attributesFile = .gitattributes-extra`) is followed by that file's digest: a sandbox
    may write those files, and git would run or read them."""
    if not os.path.lexists(path):
        return []
    data = _small_file(path)
    if data is None:
        return [("unreadable", f"{path}: not a regular file of at most {_MAX_HOOK} bytes")]
    text = data.decode("utf-8", "replace")
    found = []
    for key, value in parse_git_config(text):
        if _harmless(key):
            continue
        if key in ("include.path",) or (key.startswith("includeif.") and key.endswith(".path")):
            included = path.parent / os.path.expanduser(value)
            found.append((key, f"{value} ({_digest(included)})"))
            if depth < _MAX_INCLUDE_DEPTH:
                found += _code_running(included, workspace, work_tree, depth + 1)
            continue
        found.append((key, value))
        for named in _files_named(value, workspace, work_tree):
            shown = os.path.relpath(named, workspace)
            found.append((f"{key} names", f"{shown} ({_digest(named)})"))
    return found


def _files_named(value: str, workspace: Path, work_tree: Path) -> list[Path]:
    """The files of the workspace that the words of a configuration value name as paths."""
    found = []
    for word in value.lstrip("!").replace("'", " ").replace('"', " ").split():
        if "/" not in word and not word.startswith("."):
            continue  # a program looked up on PATH, not a file of the workspace
        candidate = Path(os.path.expanduser(word))
        real = Path(os.path.realpath(work_tree / candidate))
        if real.is_relative_to(workspace) and real.is_file() and real not in found:
            found.append(real)
    return found


# --- git's configuration syntax -----------------------------------------------------------------

_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]')
_NAME = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(=?)")
_UNESCAPE = re.compile(r"\\(.)")


def parse_git_config(text: str) -> list[tuple[str, str]]:
    """The `(key, value)` entries of a git configuration file, in order, keys as git prints
    them (`section.subsection.name`, section and name lower-cased). A line this reader cannot
    make sense of is an entry of its own (`unparsed`), never skipped."""
    entries: list[tuple[str, str]] = []
    section = ""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        rest = line
        match = _SECTION.match(rest)
        if match:
            name, sub = match.group(1), match.group(2)
            if sub is not None:
                section = name.lower() + "." + _UNESCAPE.sub(r"\1", sub)
            elif "." in name:
                head, _, tail = name.partition(".")
                section = f"{head.lower()}.{tail.lower()}"
            else:
                section = name.lower()
            rest = rest[match.end() :]
        stripped = rest.strip()
        if not stripped or stripped[0] in "#;":
            continue
        named = _NAME.match(rest)
        if not named or not section:
            entries.append(("unparsed", line))
            continue
        key = f"{section}.{named.group(1).lower()}"
        if not named.group(2):
            if rest[named.end() :].strip() and rest[named.end() :].strip()[0] not in "#;":
                entries.append(("unparsed", line))
            else:
                entries.append((key, "true"))
            continue
        value, i = _value(rest[named.end() :], lines, i)
        if value is None:
            entries.append(("unparsed", line))
            continue
        entries.append((key, value))
    return entries


_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}


def _value(text: str, lines: list[str], i: int) -> tuple[str | None, int]:
    """A value as git reads it: quotes, escapes, comments and continued lines."""
    out: list[str] = []
    quoted = False
    pending_space = ""
    j = 0
    while True:
        if j >= len(text):
            if quoted:
                return None, i
            return "".join(out).strip(), i
        char = text[j]
        j += 1
        if char == "\\":
            if j >= len(text):  # continued on the next line
                if i >= len(lines):
                    return None, i
                text, j, i = lines[i], 0, i + 1
                continue
            escaped = _ESCAPES.get(text[j])
            if escaped is None:
                return None, i
            out.append(pending_space + escaped)
            pending_space = ""
            j += 1
        elif char == '"':
            quoted = not quoted
        elif not quoted and char in "#;":
            return "".join(out).strip(), i
        elif not quoted and char in " \t":
            pending_space += char if out else ""
        else:
            out.append(pending_space + char)
            pending_space = ""
