"""The warm pool: sandboxes made and greeted ahead of the sessions that will claim them.

What is decided when a sandbox is made, and what when it is claimed:

* **Made** (the template, `environments.engineseam.SandboxTemplate`): the image and runtime, the
  hardening and limits, the workspace's bind mount and whether it is writable, the read-only
  mounts over every protected path, and the command user, all as the claimer computed them
  from the workspace when it first asked. The pool greets the agent (the session key, the
  command user), reads its hello and checks the limits in force, exactly as a session does.
* **Claimed**: the template must match in full (its key is a digest of all of it): a workspace
  replaced by another directory of the same name (its inode), a protected path that appeared,
  went or was replaced, another owner of the workspace (the command user) or other settings
  make another template, which nothing warm matches. The session's own state starts empty: no
  command ever ran in a pooled sandbox, and its first call is made as under a new grant.
* **Egress**: a template with an egress directory (`engineseam.TemplateMount`, kind `egress`)
  gets one made for each sandbox, empty and private (`<state dir>/pool/egress/`), handed out
  with it: the claiming session binds its own proxy's socket there (its questions go to its
  own gate), and removes the directory with the sandbox. A directory is never handed out
  twice, nor to any other sandbox, so no session can reach another's proxy.
* **Never pooled**: a synced workspace (its volume is the session's).

A claimed sandbox belongs to the claiming session alone: it leaves the pool when it is handed
out and never comes back; `release` removes it. The pool refills in the background (after a
claim that left two or more warm, `REFILL_QUIET` later, so that the claimer's first calls do
not share the engine with it), within `max_total` sandboxes and within the engine's memory: the
memory limits of the warm sandboxes never add up to more than half of what the engine has.

Sized by demand. A script or a CI loop claims back to back, faster than one sandbox is made: a
pool of the size a session asks for would be empty every other claim. So each template keeps
warm what its recent claims need (`_Template.demand`): the most claims that came within the
time making one takes (measured, doubled), lately, never fewer than asked nor more than
`MAX_SIZE`; while it is short of more than one, up to `MAKERS` are made at once. A
template nobody claimed for `DEMAND_WINDOW` seconds goes back to the size asked (what it keeps
beyond that is removed). A template whose sandboxes fail to start is retried later and later
(up to a minute apart); a template nobody claimed for `key_idle` seconds is dropped with its
sandboxes.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import re
import select
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from codecoder.environments.docker.channel import Mode
from codecoder.environments.docker.greeting import greet
from codecoder.environments.docker.labels import (
    LABEL_MODE,
    LABEL_PID,
    LABEL_POOL,
    _process_start,
)
from codecoder.environments.docker.settings import MAX_POOL, WORKSPACE_MOUNT
from codecoder.environments.egress import SOCKET_NAME
from codecoder.environments.engineseam import Greeted, Sandbox, SandboxEngine, SandboxTemplate
from codecoder.environments.placeholders import PLACEHOLDERS, Placeholders
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable

__all__ = [
    "DEMAND_WINDOW",
    "KEY_IDLE",
    "MAKERS",
    "MAX_SIZE",
    "MAX_TOTAL",
    "REFILL_QUIET",
    "Ready",
    "WarmPool",
    "sweep_egress",
]

log = logging.getLogger(__name__)

MAX_SIZE: Final = MAX_POOL  # warm sandboxes of one template at most, whatever a claim asks
MAX_TOTAL: Final = 16  # warm sandboxes of all templates at most
KEY_IDLE: Final = 600.0  # seconds without a claim after which a template is dropped
# After a claim that left another sandbox warm, the refill waits this long: making one keeps the
# engine busy for a few hundred ms, which the claimer's first calls would otherwise share.
REFILL_QUIET: Final = 0.3
# Sandboxes made at once for a template short of what its claims need (one otherwise).
MAKERS: Final = 3
# How far back claims count towards a template's demand.
DEMAND_WINDOW: Final = 60.0
# An egress directory whose maker is unknown (named before they carried it) and that holds no
# socket anyone listens on is removed once it is this old.
_UNOWNED_EGRESS_AGE: Final = 86400.0
_EGRESS_NAME: Final = re.compile(r"egress-(\d+)\.(\d+)-")
_FIRST_MAKE_SECONDS: Final = 1.0  # what making one is taken to cost until one was measured
_BACKOFF_MAX: Final = 60.0
_TICK: Final = 5.0


@dataclass(slots=True)
class Ready:
    """A warm sandbox: created, greeted, its stream waiting to be handed over."""

    id: str
    name: str
    stream: socket.socket
    greeted: Greeted
    image: str  # the id of the image it was made from
    created: float = field(default_factory=time.monotonic)
    egress: Path | None = None  # its egress directory, when its template has one

    def alive(self) -> bool:
        """Nothing arrived on the stream since the hello: no EOF (the agent or the container
        died), no stray output (a protocol violation)."""
        poller = select.poll()
        poller.register(self.stream, select.POLLIN | select.POLLHUP | select.POLLERR)
        return not poller.poll(0)

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()

    def forget_egress(self) -> None:
        """Remove its egress directory: the sandbox goes unclaimed (a claimed one's is its
        session's to remove)."""
        if self.egress is not None:
            shutil.rmtree(self.egress, ignore_errors=True)
            self.egress = None


@dataclass(slots=True)
class _Template:
    template: SandboxTemplate
    want: int  # what the claims ask for (`size`)
    last_claim: float
    ready: deque[Ready] = field(default_factory=deque)
    creating: int = 0
    failures: int = 0
    retry_at: float = 0.0
    problem: str | None = None
    claims: deque[float] = field(default_factory=lambda: deque(maxlen=4 * MAX_SIZE))
    make_seconds: float = _FIRST_MAKE_SECONDS  # how long making one took, lately

    def demand(self, now: float) -> int:
        """How many to keep warm: what was asked, or what the claims of the last moments
        need, whichever is more (see the module docstring)."""
        recent = [at for at in self.claims if now - at <= DEMAND_WINDOW]
        if not recent:
            return self.want
        # The most claims that came within the time making one takes (twice, for the engine's
        # bad moments), lately: each needed one ready, and a stream at that pace finds one
        # only if that many are.
        span = max(self.make_seconds, 0.1) * 2
        peak = max(sum(1 for other in recent if 0 <= at - other <= span) for at in recent)
        return min(MAX_SIZE, max(self.want, peak))

    def short(self, now: float) -> int:
        return self.demand(now) - len(self.ready) - self.creating


class WarmPool:
    """Warm sandboxes per template, made by `engine` and labelled with `labels`.

    `memory` is the engine's memory in bytes (None: unknown, no memory bound). `identity_ok`
    says whether a template's bind sources are still the directories it was made for (made
    replaceable for tests); a template whose sources changed is dropped.
    """

    def __init__(
        self,
        engine: SandboxEngine,
        labels: Mapping[str, str],
        *,
        max_total: int = MAX_TOTAL,
        key_idle: float = KEY_IDLE,
        memory: int | None = None,
        identity_ok: Callable[[SandboxTemplate], bool] | None = None,
        egress_root: Path | None = None,
    ) -> None:
        self.engine = engine
        self.labels = {**labels, LABEL_POOL: "1"}
        self.max_total = max_total
        self.key_idle = key_idle
        self.memory = memory
        self._identity_ok = identity_ok or sources_unchanged
        # Where each warm sandbox's egress directory is made (the server's: its state dir).
        self._egress_root = egress_root
        self._egress_swept = False  # what a killed server left there, removed at the first use
        self._templates: dict[str, _Template] = {}
        self._claimed: dict[str, float] = {}
        # The egress directories of claimed sandboxes: their sessions remove them, and this
        # pool does when a session died without (its sandbox found stopped, or released).
        self._claimed_egress: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._names = itertools.count(1)
        self._closed = False
        self._filler: threading.Thread | None = None
        # Removals take an engine call each: they happen here, never while a claim waits.
        self._removals: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._remover = threading.Thread(
            target=self._remove_queued, name="codecoder-pool-remove", daemon=True
        )
        self.served = 0
        self.missed = 0
        self._placeholders = _HeldPlaceholders()

    # -- what the server asks ----------------------------------------------------------------

    def start(self) -> None:
        self._filler = threading.Thread(target=self._fill, name="codecoder-pool-fill", daemon=True)
        self._filler.start()
        self._remover.start()

    def claim(self, template: SandboxTemplate, size: int) -> Ready | None:
        """A warm sandbox of `template`, now the caller's alone, or None; either way the
        template is kept warm (`size` sandboxes, at most `MAX_SIZE`) for the next claim."""
        key = template.key
        dead: list[Ready] = []
        found: Ready | None = None
        # A tag names another image once it is rebuilt: only a sandbox of the image the tag
        # names now is handed out, and none when the engine cannot say which that is.
        current = self.engine.image_id(template.image)
        with self._lock:
            if self._closed:
                return None
            entry = self._templates.get(key)
            if entry is None:
                entry = self._templates[key] = _Template(template, 0, time.monotonic())
            entry.want = max(0, min(size, MAX_SIZE))
            entry.last_claim = time.monotonic()
            if entry.want:
                entry.claims.append(entry.last_claim)
            while entry.ready and current is not None:
                candidate = entry.ready.popleft()
                if candidate.image != current:
                    log.warning(
                        "%s is of an image %s no longer names; removed",
                        candidate.name,
                        template.image,
                    )
                elif candidate.alive():
                    found = candidate
                    self._claimed[found.id] = time.monotonic()
                    if found.egress is not None:
                        self._claimed_egress[found.id] = found.egress
                    break
                else:
                    log.warning("%s died while warm; removed", candidate.name)
                dead.append(candidate)
            if found is None:
                self.missed += 1
            else:
                self.served += 1
                if len(entry.ready) >= 2:
                    entry.retry_at = max(entry.retry_at, time.monotonic() + REFILL_QUIET)
            self._wake.notify_all()
        for sandbox in dead:
            sandbox.drop()
            sandbox.forget_egress()
            self._removals.put(sandbox.id)
        self._keep_placeholders()
        return found

    def _keep_placeholders(self) -> None:
        with self._lock:
            templates = [entry.template for entry in self._templates.values()]
        self._placeholders.keep(templates)

    def release(self, sandbox_id: str) -> bool:
        """Remove a sandbox this pool handed out (its session is done with it)."""
        with self._lock:
            known = self._claimed.pop(sandbox_id, None) is not None
            egress = self._claimed_egress.pop(sandbox_id, None)
        if egress is not None:
            shutil.rmtree(egress, ignore_errors=True)
        if known:
            self._removals.put(sandbox_id)
        return known

    def handed_over(self, ready: Ready) -> None:
        """The claimer has the stream: the pool's own descriptor goes."""
        ready.drop()

    def claimed_running(self) -> int:
        with self._lock:
            return len(self._claimed)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "templates": [
                    {
                        "key": key,
                        "image": entry.template.image,
                        "runtime": entry.template.runtime,
                        "want": entry.want,
                        "demand": entry.demand(time.monotonic()),
                        "ready": [r.id for r in entry.ready],
                        "creating": entry.creating,
                        "failures": entry.failures,
                        "problem": entry.problem,
                    }
                    for key, entry in self._templates.items()
                ],
                "claimed": sorted(self._claimed),
                "served": self.served,
                "missed": self.missed,
            }

    def close(self) -> None:
        """Stop refilling and remove every warm sandbox; claimed ones are their sessions'."""
        with self._lock:
            self._closed = True
            ready = [r for entry in self._templates.values() for r in entry.ready]
            self._templates.clear()
            self._wake.notify_all()
        for sandbox in ready:
            sandbox.drop()
            sandbox.forget_egress()
            self._removals.put(sandbox.id)
        if self._filler is not None:
            self._filler.join(timeout=60)
        self._removals.put(None)
        if self._remover.is_alive():
            self._remover.join(timeout=120)
        else:  # never started: remove here
            self._remove_queued()
        self._remove_unclaimed()
        self._placeholders.keep(())

    def _remove_unclaimed(self) -> None:
        """The last sweep of a closing pool: every container it made that no session claimed
        goes, whatever path lost track of it (what is claimed is its session's)."""
        try:
            found = self.engine.list({LABEL_POOL: "1", LABEL_PID: str(os.getpid())})
        except SandboxUnavailable as exc:
            log.warning("listing the pool's containers: %s", exc)
            return
        with self._lock:
            claimed = set(self._claimed)
        for summary in found:
            if summary.id not in claimed:
                self._remove_id(summary.id)

    # -- keeping it warm ---------------------------------------------------------------------

    def _fill(self) -> None:
        last_tick = 0.0
        makers: list[threading.Thread] = []
        while True:
            with self._lock:
                if self._closed:
                    break
                now = time.monotonic()
                makers = [maker for maker in makers if maker.is_alive()]
                expired = self._expire(now) if now - last_tick >= _TICK else []
                job = self._next_job(now, len(makers))
                if job is None and not expired and now - last_tick < _TICK:
                    self._wake.wait(timeout=min(_TICK, self._next_retry(now)))
                    continue
                if job is not None:
                    job.creating += 1
            for sandbox in expired:
                self._remove(sandbox)
            if now - last_tick >= _TICK:
                last_tick = now
                self._reap()
                self._keep_placeholders()
            if job is not None:
                maker = threading.Thread(
                    target=self._make_and_wake, args=(job,), name="codecoder-pool-make"
                )
                maker.start()
                makers.append(maker)
        for maker in makers:
            maker.join(timeout=60)

    def _make_and_wake(self, entry: _Template) -> None:
        try:
            self._make(entry)
        finally:
            with self._lock:
                self._wake.notify_all()  # a maker is free: the filler may start the next

    def _next_job(self, now: float, making: int) -> _Template | None:
        """The template most short of warm sandboxes that may have one more now: one made at a
        time, up to `MAKERS` at once for a template short of more than one."""
        warm = sum(len(e.ready) + e.creating for e in self._templates.values())
        if warm >= self.max_total or making >= MAKERS:
            return None
        memory = sum(
            (len(e.ready) + e.creating) * e.template.memory_bytes for e in self._templates.values()
        )
        best: _Template | None = None
        best_short = 0
        for entry in self._templates.values():
            short = entry.short(now)
            if short <= best_short or entry.retry_at > now:
                continue
            if making and short <= 1:
                continue  # one at a time unless claims outrun it
            if self.memory is not None and memory + entry.template.memory_bytes > self.memory // 2:
                continue
            best, best_short = entry, short
        return best

    def _next_retry(self, now: float) -> float:
        waits = [e.retry_at - now for e in self._templates.values() if e.retry_at > now]
        return max(0.05, min(waits, default=_TICK))

    def _make(self, entry: _Template) -> None:
        template = entry.template
        writable = any(not m.read_only for m in template.mounts if m.target == WORKSPACE_MOUNT)
        mode: Mode = "rw" if writable else "ro"
        name = f"codecoder-pool-{os.getpid()}-{next(self._names)}"
        ready: Ready | None = None
        problem: str | None = None
        moved = False
        started = time.monotonic()
        try:
            if not self._identity_ok(template):
                moved = True
                problem = "its workspace or a protected path is no longer the directory it was"
            else:
                labels = {**self.labels, LABEL_MODE: mode}
                directory = self._egress_directory() if template.egress_target else None
                try:
                    sandbox = self.engine.create(template.resolved(directory), name, labels)
                except BaseException:
                    if directory is not None:
                        shutil.rmtree(directory, ignore_errors=True)
                    raise
                sandbox.egress = directory
                ready = self._greet(sandbox, template, mode)
                if ready is not None and not self._identity_ok(template):
                    self._remove(ready)
                    ready, problem = None, "its workspace changed while it started"
        except SandboxUnavailable as exc:
            problem = str(exc)
        except Exception as exc:  # the filler must outlive whatever one sandbox does
            problem = f"{type(exc).__name__}: {exc}"
            log.exception("making a warm sandbox")
        stale: list[Ready] = []
        with self._lock:
            entry.creating -= 1
            current = self._templates.get(template.key)
            if ready is not None and current is entry and not self._closed:
                entry.ready.append(ready)
                entry.failures, entry.problem = 0, None
                took = time.monotonic() - started
                entry.make_seconds = 0.5 * entry.make_seconds + 0.5 * took
                ready = None
            elif problem is not None:
                entry.failures += 1
                entry.problem = problem
                entry.retry_at = time.monotonic() + min(_BACKOFF_MAX, 2.0**entry.failures)
                if moved and current is entry:
                    # The template is dropped, and with it what it kept warm: a sandbox of a
                    # directory that is no longer there is never handed out, and must not be
                    # left running either (its stream would keep it alive until the server
                    # ends, and nothing would remove it then).
                    del self._templates[template.key]
                    stale.extend(entry.ready)
                    entry.ready.clear()
        if ready is not None:  # its template was dropped (or the pool closed) meanwhile
            self._remove(ready)
        for gone in stale:
            self._remove(gone)
        if problem is not None:
            log.warning("a warm sandbox of %s could not be made: %s", template.image, problem)

    def _egress_directory(self) -> Path:
        """A new, empty directory private to this user, for one warm sandbox's egress."""
        root = self._egress_root
        if root is None:
            from codecoder.environments.docker.pool.wire import socket_directory

            root = self._egress_root = socket_directory() / "egress"
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self._egress_swept:
            self._egress_swept = True
            sweep_egress(root)
        # Named after this server (pid and start time), so that a later one can tell whether
        # the server that made it still runs.
        me = os.getpid()
        return Path(tempfile.mkdtemp(prefix=f"egress-{me}.{_process_start(me) or 0}-", dir=root))

    def _greet(self, sandbox: Sandbox, template: SandboxTemplate, mode: Mode) -> Ready:
        def removed() -> None:
            self.engine.remove(sandbox.id)
            if sandbox.egress is not None:
                shutil.rmtree(sandbox.egress, ignore_errors=True)

        try:
            channel = greet(self.engine, sandbox, template, mode, handover=True)
        except BaseException:
            removed()
            raise
        stream = channel.release()
        if stream is None:
            channel.close()
            removed()
            raise SandboxUnavailable(f"the agent of {sandbox.name} wrote after its hello")
        try:
            image = self.engine.inspect(sandbox.id).image
        except BaseException:
            stream.close()
            removed()
            raise
        return Ready(
            sandbox.id, sandbox.name, stream, channel.greeted(), image, egress=sandbox.egress
        )

    def _expire(self, now: float) -> list[Ready]:
        """Templates nobody claimed for `key_idle` seconds, dropped, and what a template keeps
        beyond its demand now that claims slowed: the warm sandboxes to remove."""
        gone: list[Ready] = []
        for key, entry in list(self._templates.items()):
            if now - entry.last_claim > self.key_idle and not entry.creating:
                gone.extend(entry.ready)
                del self._templates[key]
                continue
            while len(entry.ready) > entry.demand(now):
                gone.append(entry.ready.pop())  # the newest: the oldest goes out first
        return gone

    def _reap(self) -> None:
        """Remove this pool's containers that no longer run: a claimed one whose session died
        without releasing it (its stream closed, so its agent exited), or one that died warm."""
        try:
            found = self.engine.list({LABEL_POOL: "1", LABEL_PID: str(os.getpid())})
        except SandboxUnavailable as exc:
            log.warning("listing the pool's containers: %s", exc)
            return
        for summary in found:
            if summary.running:
                continue
            with self._lock:
                self._claimed.pop(summary.id, None)
                egress = self._claimed_egress.pop(summary.id, None)
            if egress is not None:  # its session died without removing it
                shutil.rmtree(egress, ignore_errors=True)
            with self._lock:
                for entry in self._templates.values():
                    for ready in list(entry.ready):
                        if ready.id == summary.id:
                            entry.ready.remove(ready)
                            ready.drop()
                            ready.forget_egress()
            self._remove_id(summary.id)

    def _remove(self, ready: Ready) -> None:
        ready.drop()
        self._remove_id(ready.id)
        ready.forget_egress()

    def _remove_queued(self) -> None:
        while True:
            sandbox_id = self._removals.get()
            if sandbox_id is None:
                return
            self._remove_id(sandbox_id)

    def _remove_id(self, sandbox_id: str) -> None:
        try:
            self.engine.remove(sandbox_id)
        except SandboxUnavailable as exc:
            log.warning("removing %s: %s", sandbox_id, exc)


class _HeldPlaceholders:
    """The workspaces' placeholders (environments.placeholders) that warm sandboxes mount, held
    by the pool's server while it keeps a template of them: the session that made them ends,
    and would remove them, while a warm sandbox stands on them (the next session would make
    others, of other inodes, and every claim would miss)."""

    _MOUNTS: Final = frozenset(f"{WORKSPACE_MOUNT}/{name}" for name in PLACEHOLDERS)

    def __init__(self) -> None:
        self._held: dict[str, Placeholders] = {}
        self._lock = threading.Lock()

    def keep(self, templates: Iterable[SandboxTemplate]) -> None:
        """Hold the placeholders of the workspaces `templates` mount some of, release the rest."""
        wanted = set()
        for template in templates:
            targets = {mount.target: mount.source for mount in template.mounts}
            if WORKSPACE_MOUNT in targets and not self._MOUNTS.isdisjoint(targets):
                wanted.add(targets[WORKSPACE_MOUNT])
        with self._lock:
            for workspace in wanted - self._held.keys():
                placeholders = Placeholders(Path(workspace))
                try:
                    placeholders.hold()
                except ExecutionFailed as exc:
                    log.warning("the placeholders of %s: %s", workspace, exc)
                    continue
                self._held[workspace] = placeholders
            for workspace in self._held.keys() - wanted:
                with contextlib.suppress(OSError):
                    self._held.pop(workspace).release()


def sources_unchanged(template: SandboxTemplate) -> bool:
    """Whether every bind source of `template` is still the directory (inode) it was made for."""
    for mount in template.mounts:
        if mount.kind != "bind" or mount.identity is None:
            continue
        try:
            info = os.lstat(mount.source)
        except OSError:
            return False
        if (info.st_dev, info.st_ino) != mount.identity:
            return False
    return True


def sweep_egress(root: Path) -> list[Path]:
    """Remove the egress directories in `root` that nothing uses any more; the removed ones.

    A directory is in use while the pool server that made it runs (its pid and start time are
    in the name: a warm sandbox's, not yet claimed, is empty) or while a session listens on the
    proxy socket in it (a claimed sandbox's, whatever became of the server). A server killed
    with warm sandboxes, or a session that died with its pool server, left the others behind.
    One named before names carried their maker is removed when nobody listens in it and it is
    a day old."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith("egress-") or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        maker = _EGRESS_NAME.match(entry.name)
        if maker is not None:
            pid, started = int(maker[1]), maker[2]
            if _process_start(pid) == started:
                continue
        else:
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age < _UNOWNED_EGRESS_AGE:
                continue
        if _listened_on(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _listened_on(directory: Path) -> bool:
    """Whether a process accepts connections on the proxy socket in `directory` (reached through
    a descriptor of the directory: a state directory's path may be too long for a socket's)."""
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            probe.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
            return True
    except OSError:
        return False
    finally:
        os.close(fd)
