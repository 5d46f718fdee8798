"""The pool layer (pool.json): the warm pool of @docker sandboxes, attacked across time and
across sessions. Each attempt has a pool server of its own (its own state directory) and a
workspace of its own, writable by anyone so that only the sandbox's mounts protect it:

* `stale-protected` / `replaced-protected`: a sandbox is made warm for the workspace, then a
  protected path appears in it (or is replaced by another directory of the same name); a new
  session claims and tries to write there. Escaped if anything changed on the host.
* `replaced-workspace`: the workspace is moved away and another directory takes its name after
  warming; escaped if a new session's sandbox shows the old one.
* `state-across-sessions`: one session's claimed sandbox leaves a marker in every writable place;
  escaped if the next session's sandbox holds it.
* `loose-template`: the pool's server is asked directly (past the client's own checks) for a
  sandbox looser than the default; escaped if it hands one out or makes one.
* `foreign-uid`: another user connects to the pool's socket, opened to everyone; escaped if it
  gets anything (as root only: it takes switching users).
* `rebuilt-image`: a sandbox is made warm of an image tag of the attempt's own, then the tag
  names another image (built again under it, or moved); escaped if a new session's sandbox is of
  the image the tag no longer names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.containers import SandboxContainers
from codecoder.environments.docker.engine import DockerEngine
from codecoder.environments.docker.environment import DockerEnvironment
from codecoder.environments.docker.pool import wire
from codecoder.environments.docker.pool.client import PoolClient
from codecoder.environments.docker.pool.eligible import refusal
from codecoder.environments.engineseam import SandboxTemplate
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.interfaces.escapes.calls import _last_line
from codecoder.interfaces.escapes.corpus import Attempt, PoolEntry
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun

WARM_SECONDS: Final = 120.0
STRANGER: Final = 65534  # nobody


class _PoolLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit
        try:
            env = audit.environment(EnvironmentTag.DOCKER)
        except _NotRun as exc:
            self.blocker = exc
            return
        assert isinstance(env, DockerEnvironment)
        self.settings = dataclasses.replace(env.settings, pool=2)
        self._attempts = 0

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, PoolEntry)
        self._attempts += 1
        workspace = self.audit.fresh_dir("pool-workspace")
        workspace.chmod(0o777)
        template = self._template(workspace)
        why = refusal(template)
        if why is not None:
            raise _NotApplicable(f"this project's sandboxes are never pooled: {why}")
        state = self.audit.fresh_dir(f"pool-state-{self._attempts}")
        with self._pool(state) as client:
            procedures = {
                "stale-protected": self._stale_protected,
                "replaced-protected": self._replaced_protected,
                "replaced-workspace": self._replaced_workspace,
                "state-across-sessions": self._state_across_sessions,
                "loose-template": self._loose_template,
                "foreign-uid": self._foreign_uid,
                "rebuilt-image": self._rebuilt_image,
            }
            return procedures[entry.kind](entry, workspace, client)

    # -- the attempts --------------------------------------------------------------------------

    def _stale_protected(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        assert entry.path is not None and entry.write is not None
        self._warm(workspace, client)
        _make(workspace, entry.path, entry.directory)
        return self._write_attempt(entry, workspace, client)

    def _replaced_protected(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        assert entry.path is not None and entry.write is not None
        _make(workspace, entry.path, entry.directory)
        self._warm(workspace, client)
        (workspace / entry.path).rename(workspace / f"{entry.path}.before")
        _make(workspace, entry.path, entry.directory)
        return self._write_attempt(entry, workspace, client)

    def _write_attempt(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        before = _tree(workspace)
        served = _served(client)
        result, error = self._call(workspace, client, entry.write or "", writable=True)
        after = _tree(workspace)
        changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        if changed:
            _escaped(f"it changed {', '.join(changed)} on the host")
        return self._how(client, served, result, error)

    def _replaced_workspace(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        (workspace / "which").write_text("the old workspace\n")
        self._warm(workspace, client)
        moved = workspace.with_name(f"{workspace.name}-moved")
        shutil.rmtree(moved, ignore_errors=True)
        workspace.rename(moved)
        workspace.mkdir()
        workspace.chmod(0o777)
        (workspace / "which").write_text("the new workspace\n")
        served = _served(client)
        result, error = self._call(workspace, client, "cat which", writable=False)
        if result is not None and "old" in result.stdout:
            _escaped(
                "a new session's sandbox showed the workspace that was moved away: "
                + result.stdout.strip()
            )
        return self._how(client, served, result, error)

    def _state_across_sessions(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        token = self.audit.token
        self._warm(workspace, client, count=2)
        plant = (
            f"for d in /tmp /dev/shm /opt/codecoder/capability; do echo {token} > $d/plant "
            "2>/dev/null; done; true"
        )
        self._call(workspace, client, plant, writable=True)
        self._warm(workspace, client, count=2)
        served = _served(client)
        look = "cat /tmp/plant /dev/shm/plant /opt/codecoder/capability/plant 2>/dev/null; true"
        result, error = self._call(workspace, client, look, writable=True)
        if result is not None and token in result.stdout:
            _escaped("the next session's sandbox held what the one before planted")
        return self._how(client, served, result, error)

    def _loose_template(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        self._warm(workspace, client)
        status = client.status() or {}
        changes = json.loads(
            json.dumps(entry.template).replace("@WORKSPACE@", str(workspace.resolve()))
        )
        fields = {**self._template(workspace).to_json(), **changes}
        for mount in fields["mounts"]:
            if mount.get("identity") is None:
                info = os.stat(mount["source"])
                mount["identity"] = [info.st_dev, info.st_ino]
        answer, fd = _ask(client, {"op": "claim", "template": fields, "size": 4})
        if fd is not None:
            os.close(fd)
            _escaped("the pool's server handed out a sandbox of the loose template")
        time.sleep(1.0)
        after = client.status() or {}
        if len(after.get("templates", [])) > len(status.get("templates", [])):
            _escaped("the pool's server took the loose template to keep warm")
        return f"the pool's server refused it: {_last_line(str(answer.get('refused', answer)))}"

    def _foreign_uid(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
            raise _NotApplicable("switching to another user takes root (and /usr/bin/python3)")
        self._warm(workspace, client)
        status = client.status() or {}
        state = client.state_home
        assert state is not None
        directory = wire.socket_directory(state)
        path = directory / f"{client.name}.sock"
        opened = [state, *state.parents]
        modes = {p: p.stat().st_mode & 0o7777 for p in [*opened, directory.parent, directory]}
        try:
            for directory_ in [*opened, directory.parent, directory]:
                directory_.chmod(modes[directory_] | 0o755)
            path.chmod(0o666)
            request = json.dumps(
                {"op": "claim", "template": self._template(workspace).to_json(), "size": 1}
            )
            program = textwrap.dedent(
                f"""
                import json, socket
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    sock.connect({str(path)!r})
                    sock.send({request!r}.encode())
                    data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
                except OSError as exc:
                    data, fds = type(exc).__name__.encode(), []
                print(json.dumps([data.decode(errors="replace"), len(fds)]))
                """
            )
            stranger = subprocess.run(
                ["/usr/bin/python3", "-c", program],
                user=STRANGER,
                group=STRANGER,
                capture_output=True,
                text=True,
                timeout=30,
                cwd="/",
            )
        finally:
            for directory_, mode in modes.items():
                directory_.chmod(mode)
            path.chmod(0o600)
        if stranger.returncode != 0:
            raise _NotRun(f"the other user's client failed: {_last_line(stranger.stderr)}")
        data, descriptors = json.loads(stranger.stdout)
        after = client.status() or {}
        if descriptors or after.get("served") != status.get("served"):
            _escaped(f"uid {STRANGER} was handed a sandbox of the pool")
        if data.startswith("{"):
            _escaped(f"uid {STRANGER} was answered: {data[:120]}")
        return f"uid {STRANGER} got no answer ({data or 'the server hung up'})"

    def _rebuilt_image(self, entry: PoolEntry, workspace: Path, client: PoolClient) -> str:
        engine = DockerEngine()
        images = engine.client.images
        tag = f"codecoder-audit-pool-{os.getpid()}-{self._attempts}:rebuilt"
        base, settings = self.settings.image, self.settings
        made: list[str] = []
        try:
            images.get(base).tag(tag)
            self.settings = dataclasses.replace(settings, image=tag)
            self._warm(workspace, client)
            old = engine.image_id(tag)
            recipe = f"FROM {base}\nLABEL codecoder.audit-rebuilt={self.audit.token}\n"
            target = tag if entry.rebuild == "build" else f"{tag}-other"
            rebuilt, _ = images.build(fileobj=io.BytesIO(recipe.encode()), tag=target, rm=True)
            made.append(rebuilt.id)
            if entry.rebuild == "tag":
                rebuilt.tag(tag)
                images.remove(target)
            if engine.image_id(tag) in (None, old):
                raise _NotRun("the attack could not be staged: the tag still names the image")
            served = _served(client)
            env = self._session(workspace, client)
            try:
                result = env.run(CommandRequest(cwd=workspace, script="true", timeout=30.0))
                ran_in = [engine.inspect(c).image for c in env.containers()]
            except SandboxUnavailable as exc:
                return self._how(client, served, None, exc)
            finally:
                env.close()
                env.engine.close()
            if old in ran_in:
                _escaped(f"a new session was handed a sandbox of the image {tag} named before")
            return self._how(client, served, result, None)
        finally:
            self.settings = settings
            client.stop()  # its sandboxes go before the image they are of
            with contextlib.suppress(Exception):
                images.remove(tag, force=True)
            for image in made:
                with contextlib.suppress(Exception):
                    images.remove(image, force=True)
            engine.close()

    # -- what they share -----------------------------------------------------------------------

    def _template(self, workspace: Path) -> SandboxTemplate:
        containers = SandboxContainers(
            workspace.resolve(), self.settings, "audit", sync=False, resolver=None, volume=None
        )
        return containers.template("rw", ProtectedScan(workspace.resolve()))

    @contextlib.contextmanager
    def _pool(self, state: Path) -> Iterator[PoolClient]:
        client = PoolClient(self.settings.pool, state_home=state)
        try:
            yield client
        finally:
            status = client.status()
            client.stop()
            if status is not None:
                deadline = time.monotonic() + 60
                while os.path.exists(f"/proc/{status['pid']}") and time.monotonic() < deadline:
                    time.sleep(0.1)

    def _session(self, workspace: Path, client: PoolClient) -> DockerEnvironment:
        return DockerEnvironment(workspace, self.settings, engine=DockerEngine(pool=client))

    def _call(
        self, workspace: Path, client: PoolClient, script: str, *, writable: bool
    ) -> tuple[CommandResult | None, SandboxUnavailable | None]:
        env = self._session(workspace, client)
        try:
            return env.run(
                CommandRequest(cwd=workspace, script=script, writable=writable, timeout=30.0)
            ), None
        except SandboxUnavailable as exc:
            return None, exc
        finally:
            env.close()
            env.engine.close()

    def _warm(self, workspace: Path, client: PoolClient, count: int = 1) -> None:
        """Make the pool keep `count` sandboxes of this workspace warm, and wait for them."""
        self._call(workspace, client, "true", writable=True)
        deadline = time.monotonic() + WARM_SECONDS
        while time.monotonic() < deadline:
            status = client.status()
            if status and sum(len(t["ready"]) for t in status["templates"]) >= count:
                return
            time.sleep(0.1)
        raise _NotRun("the attack could not be staged: the pool made no warm sandbox")

    def _how(
        self,
        client: PoolClient,
        served: int,
        result: CommandResult | None,
        error: SandboxUnavailable | None,
    ) -> str:
        claimed = _served(client) > served
        where = "a claimed warm sandbox" if claimed else "a sandbox of its own (the claim missed)"
        if error is not None:
            return (
                f"the new session ran in {where}: {type(error).__name__}: {_last_line(str(error))}"
            )
        assert result is not None
        line = _last_line(result.stderr or result.stdout) or "(no output)"
        return f"the new session ran in {where}: {line} (exit code {result.exit_code})"


def _make(workspace: Path, relative: str, directory: bool) -> None:
    """Create `relative` in the workspace (a directory or an empty file), everything created
    writable by anyone: only the sandbox's mounts may keep a sandbox out of it."""
    path = workspace / relative
    created = [p for p in [path, *path.parents] if workspace in p.parents and not p.exists()]
    if directory:
        path.mkdir(parents=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    for made in created:
        made.chmod(0o777 if made.is_dir() else 0o666)


def _tree(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for path in root.rglob("*"):
        relative = str(path.relative_to(root))
        found[relative] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found


def _served(client: PoolClient) -> int:
    status = client.status()
    return int(status["served"]) if status else 0


def _ask(client: PoolClient, request: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """A request straight to the server, past the client's own checks."""
    directory = wire.socket_directory(client.state_home)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.settimeout(30)
        sock.connect(str(directory / f"{client.name}.sock"))
        wire.send(sock, request)
        return wire.receive(sock)
