"""The copy-back of sync mode: what a writable call changed in the volume, checked as a whole
against the workspace as it is, then applied whole or not at all.

The change set (`changes.tar` and the summary's `deleted`, written by the sandbox's agent, so
possibly by an attacker) is first *planned*, writing nothing:

* every name must lie beneath the workspace and be one the host can hold (no `..`, at most
  4,095 bytes, components of at most 255), and be a regular file, a directory or a symlink, sent
  once, never beneath something the change set sends as a file or a symlink;
* the files' apparent sizes together must fit the disk budget (a sparse file counts at its
  size: it is what a copy of it costs);
* protected paths (`foundation.protected`, every depth and spelling) never come back: they
  stay in the sandbox and the report says so (`kept`);
* a change that would take away, rename or turn into something else a directory of the
  workspace that holds a protected path at any depth (a nested repository's `.git`) refuses the
  whole change set, as bind mode fails the call: the host would otherwise delete that
  repository with it;
* every symlink is judged where it resolves once the change set is in place, through the links
  beside it (new or already in the workspace) as the host's kernel will resolve it: one that
  leads out of the workspace (`a -> .` plus `up -> a/..`), or into a protected path, stays in
  the sandbox; a link already in the workspace that the change set would make lead out refuses
  the whole change set.

Only then is it applied (`environments.docker.swap.StagedSwap`): staged, swapped in with an undo
log, never through a symlink, holding a bounded number of descriptors. A failure half way puts
back everything.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from codecoder.environments.docker.swap import STAGE_PREFIX, StagedSwap
from codecoder.foundation.errors import ExecutionFailed
from codecoder.foundation.protected import is_protected_entry, is_protected_path

__all__ = ["SyncReport", "apply_changes", "check_name", "resolves_outside"]

MAX_PATH_BYTES: Final = 4095
MAX_NAME_BYTES: Final = 255
MAX_SYMLINK_HOPS: Final = 40  # what the kernel allows in one lookup
MAX_RESOLVE_STEPS: Final = 4096

Kind = Literal["d", "f", "l"]
# (kind, symlink target); None for nothing there.
Found = tuple[Kind, str | None] | None


@dataclass(slots=True)
class SyncReport:
    """What came back from the sandbox after a writable call."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # what stays in the volume, never copied back
    unreadable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "written": len(self.written),
            "deleted": len(self.deleted),
            "kept_in_sandbox": self.kept,
            "unreadable": self.unreadable,
        }


def check_name(name: str) -> str:
    """`name` as a canonical workspace-relative path; ExecutionFailed unless it is one beneath
    the workspace that the host can hold."""
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or ".." in pure.parts or pure.as_posix() in ("", "."):
        raise ExecutionFailed(f"the sandbox's changes name {name!r}, which is not beneath it")
    path = pure.as_posix()
    encoded = os.fsencode(path)
    if b"\0" in encoded or len(encoded) > MAX_PATH_BYTES:
        raise ExecutionFailed(
            f"the sandbox's changes name a path of {len(encoded):,} bytes, longer than the "
            f"host can hold ({MAX_PATH_BYTES:,}); nothing was copied back"
        )
    if any(len(os.fsencode(part)) > MAX_NAME_BYTES for part in pure.parts):
        raise ExecutionFailed(
            f"the sandbox's changes name {path[:120]!r}, with a component longer than "
            f"{MAX_NAME_BYTES} bytes; nothing was copied back"
        )
    return path


def _parents(path: str) -> Iterable[str]:
    parent = path.rpartition("/")[0]
    while parent:
        yield parent
        parent = parent.rpartition("/")[0]


class _Host:
    """The workspace as it is now, looked up without following a symlink: an entry is looked
    at only when every directory above it is a real one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._found: dict[str, Found] = {}

    def entry(self, path: str) -> Found:
        if path in self._found:
            return self._found[path]
        # From the nearest ancestor already looked at, down: iterative, for deep paths.
        parts = path.split("/")
        start = len(parts) - 1
        while start > 0 and "/".join(parts[:start]) not in self._found:
            start -= 1
        found: Found = self._found["/".join(parts[:start])] if start else ("d", None)
        for depth in range(start + 1, len(parts) + 1):
            walked = "/".join(parts[:depth])
            found = self._lstat(walked) if found is not None and found[0] == "d" else None
            self._found[walked] = found
        return found

    def _lstat(self, path: str) -> Found:
        try:
            info = os.lstat(self.root / path)
        except OSError:
            return None
        if stat.S_ISDIR(info.st_mode):
            return ("d", None)
        if stat.S_ISLNK(info.st_mode):
            try:
                return ("l", os.readlink(self.root / path))
            except OSError:
                return ("l", "")  # unreadable: judged as leading out
        return ("f", None)

    def protected_beneath(self, path: str) -> str | None:
        """A protected entry at any depth beneath the real directory `path`, or a reason it
        cannot be known; None when there is none."""
        pending = [path]
        while pending:
            current = pending.pop()
            try:
                with os.scandir(self.root / current) as entries:
                    for item in entries:
                        child = f"{current}/{item.name}"
                        if is_protected_entry(child):
                            return child
                        if item.is_dir(follow_symlinks=False):
                            pending.append(child)
            except OSError as exc:
                return f"{current} (which cannot be looked into: {exc.strerror or exc})"
        return None


class _View:
    """The workspace as it will be once the change set is in place (or, without one, as it is)."""

    def __init__(
        self,
        host: _Host,
        entries: Mapping[str, tuple[Kind, str | None]] | None = None,
        deleted: Iterable[str] = (),
    ) -> None:
        self.host = host
        self.entries = dict(entries or {})
        self.implicit = {parent for path in self.entries for parent in _parents(path)}
        self.deleted = set(deleted)

    def entry(self, path: str) -> Found:
        if path in self.entries:
            return self.entries[path]
        if path in self.implicit:
            return ("d", None)
        if path in self.deleted or any(parent in self.deleted for parent in _parents(path)):
            return None
        for parent in _parents(path):
            changed = self.entries.get(parent)
            if changed is not None and changed[0] != "d":
                return None  # beneath what the change set makes a file or a link
        # What the host has: only beneath directories that are real ones on the host too.
        return self.host.entry(path)


def resolves_outside(view: _View, path: str, target: str) -> str | None:
    """Why the symlink at `path` with `target` leads out of the workspace or into a protected
    path once resolved as the kernel would, through the links of `view`; None if it stays."""
    if not target:
        return "it is empty"
    if target.startswith("/"):
        return f"its target {target!r} is absolute"
    where: list[str] = path.split("/")[:-1]
    pending = deque(target.split("/"))
    hops = steps = 0
    while pending:
        steps += 1
        if steps > MAX_RESOLVE_STEPS:
            return "it takes too many steps to resolve"
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not where:
                return "it leads above the workspace"
            where.pop()
            continue
        candidate = "/".join((*where, part))
        if is_protected_path(candidate):
            return f"it leads into the protected path {candidate}"
        found = view.entry(candidate)
        if found is not None and found[0] == "l":
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return "it goes through too many symlinks"
            link = found[1] or ""
            if not link or link.startswith("/"):
                return f"it goes through {candidate}, which leads out"
            pending.extendleft(reversed(link.split("/")))
            continue
        # A directory, a file, or nothing yet: what is missing is taken for a directory that
        # may appear, so `..` after it comes back here (the strictest reading).
        where.append(part)
    return None


@dataclass(slots=True)
class _Plan:
    members: dict[str, tarfile.TarInfo] = field(default_factory=dict)  # what is written
    deleted: list[str] = field(default_factory=list)  # topmost paths taken away
    report: SyncReport = field(default_factory=SyncReport)


def _plan(
    workspace: Path,
    members: list[tarfile.TarInfo],
    summary: Mapping[str, Any],
    budget: int,
    host_links: Mapping[str, str],
) -> _Plan:
    plan = _Plan(report=SyncReport(unreadable=[str(p) for p in summary.get("unreadable") or []]))
    sent: dict[str, tarfile.TarInfo] = {}
    total = 0
    for member in members:
        path = check_name(member.name)
        if not (member.isfile() or member.isdir() or member.issym()):
            raise ExecutionFailed(
                f"the sandbox's changes hold {member.name!r} of a kind never copied back"
            )
        if path in sent:
            raise ExecutionFailed(f"the sandbox's changes hold {path!r} twice")
        if path.split("/")[0].startswith(STAGE_PREFIX):
            raise ExecutionFailed(f"the sandbox's changes name {path!r}, the copy-back's own")
        sent[path] = member
        total += member.size if member.isfile() else 0
    if total > budget:
        raise ExecutionFailed(
            f"the call wrote {total:,} bytes of files (apparent sizes: a sparse file counts "
            f"whole), more than its disk budget of {budget:,}; nothing was copied back"
        )
    raw_deleted = summary.get("deleted") or []
    if not isinstance(raw_deleted, list):
        raise ExecutionFailed("the sandbox's changes.json has no list of deleted paths")
    # What is sent again is replaced by the write, not deleted (nor is what lies beneath it).
    deleted = {check_name(str(path)) for path in raw_deleted} - set(sent)
    host = _Host(workspace)
    for path in sorted(deleted):
        if any(parent in deleted for parent in _parents(path)):
            continue  # taken away with its directory
        if is_protected_path(path):
            plan.report.kept.append(path)
        else:
            plan.deleted.append(path)
    for path, member in sent.items():
        if is_protected_path(path):
            plan.report.kept.append(path)
        else:
            plan.members[path] = member
    _refuse_lost_protected(host, plan)
    _judge_symlinks(host, plan, host_links)
    # What is left must be a tree: nothing beneath what comes back as a file or a symlink
    # (beneath one kept in the sandbox, a directory is made).
    for path in plan.members:
        for parent in _parents(path):
            above = plan.members.get(parent)
            if above is not None and not above.isdir():
                raise ExecutionFailed(
                    f"the sandbox's changes hold {path!r} beneath {parent!r}, which they send "
                    "as a file or a symlink; nothing was copied back"
                )
    return plan


def _refuse_lost_protected(host: _Host, plan: _Plan) -> None:
    """Refuse the change set when it would take away or replace a directory of the workspace
    that holds a protected path (deleting or renaming `vendor/lib` takes `vendor/lib/.git`)."""
    replaced = [path for path, member in plan.members.items() if not member.isdir()]
    for path in [*plan.deleted, *replaced]:
        found = host.entry(path)
        if found is None or found[0] != "d":
            continue
        inside = host.protected_beneath(path)
        if inside is not None:
            how = (
                f"deleted or renamed {path}"
                if path in plan.deleted
                else f"replaced {path} with a file or a symlink"
            )
            raise ExecutionFailed(
                f"the sandbox {how}, which holds {inside}: a protected path is never "
                "taken away with its directory (as in bind mode, the call fails); nothing was "
                "copied back, and the sandbox's copy of the workspace is reset"
            )


def _judge_symlinks(host: _Host, plan: _Plan, host_links: Mapping[str, str]) -> None:
    links = {path: m.linkname for path, m in plan.members.items() if m.issym()}
    replaces_link = any((host.entry(path) or ("", None))[0] == "l" for path in plan.members)
    if not links and not plan.deleted and not replaces_link:
        return  # nothing the change set does can move where a link resolves
    entries: dict[str, tuple[Kind, str | None]] = {
        path: ("l", m.linkname) if m.issym() else ("d" if m.isdir() else "f", None)
        for path, m in plan.members.items()
    }
    # A link judged out is not written, so the others are judged again without it, until none
    # is left out (each round removes at least one).
    while True:
        view = _View(host, entries, plan.deleted)
        out = {path for path, target in links.items() if resolves_outside(view, path, target)}
        if not out:
            break
        for path in sorted(out):
            plan.report.kept.append(path)
            del plan.members[path], entries[path], links[path]
    before = _View(host)
    for path, target in sorted(host_links.items()):
        if view.entry(path) != ("l", target) or resolves_outside(before, path, target):
            continue  # replaced, gone, or already leading out (the user's own)
        why = resolves_outside(view, path, target)
        if why is not None:
            raise ExecutionFailed(
                f"with the sandbox's changes in place, the workspace's symlink {path} -> "
                f"{target} would lead out of it ({why}); nothing was copied back"
            )


def apply_changes(
    workspace: Path,
    tar: tarfile.TarFile,
    summary: Mapping[str, Any],
    budget: int,
    owner: tuple[int, int] | None,
    host_links: Mapping[str, str] | None = None,
) -> SyncReport:
    """Check the change set in `tar` and `summary` whole, then apply it whole (see the module
    docstring); ExecutionFailed, with nothing changed, when it is refused or fails."""
    plan = _plan(workspace, tar.getmembers(), summary, budget, host_links or {})
    report = plan.report
    if not plan.members and not plan.deleted:
        return report
    order = sorted(plan.members)
    try:
        swap = StagedSwap(workspace, owner)
    except OSError as exc:
        raise ExecutionFailed(
            f"the sandbox's changes could not be staged in {workspace}: {exc.strerror or exc}; "
            "nothing was copied back"
        ) from None
    try:
        staged: dict[str, str] = {}
        try:
            for path in order:
                member = plan.members[path]
                if member.isfile():
                    source = tar.extractfile(member)
                    assert source is not None
                    staged[path] = swap.stage_file(source, member.size, member.mode)
                elif member.issym():
                    staged[path] = swap.stage_symlink(member.linkname)
        except (OSError, tarfile.TarError) as exc:
            swap.rollback()
            raise ExecutionFailed(
                f"the sandbox's changes could not be staged ({_why(exc)}); nothing was copied back"
            ) from None
        current = ""
        try:
            for current in plan.deleted:
                if swap.delete(current):
                    report.deleted.append(current)
            for current in order:
                member = plan.members[current]
                if member.isdir():
                    swap.directory(current, member.mode)
                else:
                    swap.put(current, staged[current])
                report.written.append(current)
        except OSError as exc:
            failed = swap.rollback()
            undone = (
                "everything it had changed was put back"
                if not failed
                else f"these could not be put back: {'; '.join(failed)} (what they replaced is "
                f"in {workspace / swap.stage})"
            )
            raise ExecutionFailed(
                f"copying the sandbox's changes back failed at {current or 'the start'} "
                f"({_why(exc)}); {undone}"
            ) from None
        swap.commit()
    finally:
        swap.close()
    return report


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)
