"""The agent across calls: what it keeps between them, and each request served in turn.

One call at a time. A call owns the container: when it ends (its main process exits, its
deadline passes, its disk budget is spent or the host hangs up) every other process in the
container is killed (kill(-1) by root reaches all but init and the agent) and /proc is checked
until none is left; the answer is sent only then, and says how many survived (the host
discards a container where any did). Before a call made under another grant than the one
before (`"fresh"`), every place the command uid can write besides the workspace (the tmpfs
mounts found in /proc/self/mountinfo, POSIX message queues, System V IPC) is emptied and checked
empty, so nothing planted by one grant's calls runs under another's.

A call may carry a capability (its approved files, placed under /opt/codecoder/capability and
checked against the approved digest) and, in sync mode, takes the workspace's listing before and
after it, to send its changes back (sync.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
from typing import Any

from cgroups import OOM_COUNTER_FILES, PIDS_COUNTER_FILES, limits, read_counter
from channel import PROTOCOL, Channel, Message
from command import run_command, runas_works
from command_user import as_user
from egress import Relay
from exitwatch import ExitWatch
from hardening import drop_bounding_set
from image import BASH, SNAPSHOT_DIR, WORKSPACE
from leftovers import state_directories, wipe
from sync import NotReadable, Unlistable, delete_paths, differences, listing, write_changes

CAPABILITY_DOMAIN = b"codecoder-capability/1\0"


def capability_digest(root: str) -> str:
    """The digest runtime.config.capabilities gives these files (read back from where they run)."""
    files: dict[str, bytes] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, root)] = file.read()
    hasher = hashlib.sha256(CAPABILITY_DOMAIN)
    for path in sorted(files):
        encoded, data = path.encode("utf-8"), files[path]
        hasher.update(len(encoded).to_bytes(8, "big") + encoded)
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return "sha256:" + hasher.hexdigest()


class Agent:
    """What the agent keeps between calls, and each request served in turn."""

    def __init__(self, channel: Channel, uid: int, gid: int, outbox: str | None = None) -> None:
        self.channel = channel
        self.uid = uid
        self.gid = gid
        self.outbox = outbox
        self.listing: dict[str, list[Any]] | None = None  # the workspace after the last call
        self.state_dirs, self.wipe_complete = state_directories(uid, gid)
        self.exits = ExitWatch()
        self.snapshot_digest: str | None = None
        self.runas = False
        self.relay: Relay | None = None
        self.outbox_fds: tuple[int, int] | None = None  # changes.tar and changes.json

    def choose_launcher(self) -> str | None:
        """Start commands through runas where it works; else through subprocess's `user=`
        (from a fork of this process: then nothing executed needs a capability)."""
        self.runas = runas_works(self.uid, self.gid)
        return None if self.runas else drop_bounding_set(keep=0)

    def hello(self, problem: str | None) -> Message:
        return {
            "hello": PROTOCOL,
            "problem": problem,
            "limits": limits(),
            "oom_counter": read_counter(OOM_COUNTER_FILES) is not None,
            "pids_counter": read_counter(PIDS_COUNTER_FILES) is not None,
            "state_dirs": self.state_dirs,
            "wipe_complete": self.wipe_complete,
            "pidfd": self.exits.pidfd_works,
            "runas": self.runas,
            "bash": os.path.exists(BASH),
            "egress": self.relay is not None,
        }

    def serve(self, request: Message) -> Message:
        if "delete" in request:
            self.listing = None
            return {"deleted": as_user(self.uid, self.gid, delete_paths, request["delete"])}
        if request.get("fresh"):
            left = wipe(self.uid, self.gid, self.state_dirs)
            if left is not None:
                return {
                    "error": f"what earlier calls left could not be removed: {left}",
                    "discard": True,
                    "ran": False,
                }
        capability = request.get("capability")
        if capability is not None:
            problem = self.place_snapshot(capability)
            if problem is not None:
                return {"error": problem}
        if not (request.get("sync") and self.outbox):
            return self.run(request)
        # The host says when nothing went into the volume since this agent last listed it
        # (after its last writable call): that listing is then the one before this call.
        before = self.listing if request.get("unchanged") else None
        self.listing = None
        if before is None:
            before = self.list_workspace()
        response = self.run(request)
        budget = request.get("disk_budget")
        response["changes"] = self.collect_changes(before, budget)
        return response

    def list_workspace(self) -> dict[str, list[Any]]:
        """The workspace's listing (sync.listing): made by the agent itself when it may list
        every directory, else by a child that is the command user."""
        try:
            return listing(WORKSPACE, strict=True)
        except Unlistable:
            found: dict[str, list[Any]] = as_user(self.uid, self.gid, listing, WORKSPACE)
            return found

    def collect_changes(self, before: dict[str, list[Any]], budget: int | None) -> Message:
        """Write what the call changed in the workspace to the outbox, for the host to fetch
        (nothing at all when it changed nothing)."""
        assert self.outbox is not None
        after = self.list_workspace()
        changed, deleted, unreadable = differences(before, after)
        if not changed and not deleted and not unreadable:
            self.listing = after
            return {"entries": 0, "files": 0, "bytes": 0, "deleted": 0, "over_budget": False}
        tar_fd, summary_fd = self.outbox_files()
        try:
            return write_changes(before, after, tar_fd, summary_fd, budget, strict=True)
        except NotReadable:
            pass  # a file only its owner may read: the changes are written as the command user
        finally:
            self.listing = after
        tar_fd, summary_fd = self.outbox_files()
        changes: Message = as_user(
            self.uid, self.gid, write_changes, before, after, tar_fd, summary_fd, budget
        )
        return changes

    def outbox_files(self) -> tuple[int, int]:
        """changes.tar and changes.json in the outbox, emptied: opened once, as root, in a
        directory only root can reach (a child writes them as the command user)."""
        assert self.outbox is not None
        if self.outbox_fds is None:
            fds = []
            for name in ("changes.tar", "changes.json"):
                path = f"{self.outbox}/{name}"
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                fds.append(os.open(path, flags, 0o600))
            self.outbox_fds = (fds[0], fds[1])
        for fd in self.outbox_fds:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        return self.outbox_fds

    def place_snapshot(self, capability: Message) -> str | None:
        files = capability.get("files")
        if files is not None:
            self.snapshot_digest = None
            for name in os.listdir(SNAPSHOT_DIR):
                path = os.path.join(SNAPSHOT_DIR, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            for relative, encoded in files.items():
                parts = relative.split("/")
                if relative.startswith("/") or ".." in parts or "" in parts:
                    return f"refusing capability file name {relative!r}"
                path = os.path.join(SNAPSHOT_DIR, *parts)
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o555)
                with os.fdopen(descriptor, "wb") as file:
                    file.write(base64.b64decode(encoded))
            self.snapshot_digest = capability_digest(SNAPSHOT_DIR)
        if self.snapshot_digest != capability.get("digest"):
            return (
                f"the capability's snapshot has digest {self.snapshot_digest}, not the approved "
                f"{capability.get('digest')}"
            )
        return None

    def run(self, request: Message) -> Message:
        return run_command(request, self.channel, self.exits, self.uid, self.gid, self.runas)
