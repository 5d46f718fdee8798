"""The bwrap layer (bwrap.json): scripts attacking the @bwrap sandbox from inside: the workspace's
protected paths, the user's secrets and the runtime's state, the host's network, sockets and
processes, the kernel's shared state, privileges, the terminal, and processes outliving their
call. It runs in one @bwrap environment on the scratch workspace, with the project's @bwrap
settings, a bait home and bait services of the host's (`_Bait`).

Where commands do not run in @bwrap on this machine (bubblewrap cannot create namespaces), the
layer is not applicable, and says where they run instead; if the project binds them to @bwrap
explicitly, its attempts are not run, which fails the audit.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.probe import command_sandbox
from codecoder.environments.egress import Egress
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import CodecoderError
from codecoder.foundation.state import state_directory
from codecoder.interfaces.escapes.brokerbait import ROUTED_HOST, AdmittingGate, BrokerBait
from codecoder.interfaces.escapes.calls import _last_line
from codecoder.interfaces.escapes.canary import _Canary
from codecoder.interfaces.escapes.corpus import _ERRORS, Attempt, BwrapEntry
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.interfaces.escapes.workspace import _Watcher

# Between the two calls of an attempt with `then`: time for the warm sandbox to be built.
_PAUSE = 0.3


class _Listener:
    """A Unix socket of the host's (a path, or an abstract name) that answers the token and
    counts the connections it accepted."""

    def __init__(self, address: str, token: str) -> None:
        self.accepted = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(address)
        self._server.listen(8)
        self._server.settimeout(0.2)
        self._token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="codecoder-bait", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                continue
            self.accepted += 1
            with conn:
                conn.sendall(self._token.encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


class _Bait:
    """What the attacks reach for: a home with credentials, the state directory holding the
    token and a socket where the decision server's would be, an abstract socket, a process.

    The bait home lies in the user's own cache directory (else in /tmp), where a home's
    contents really are: in /tmp, the sandbox's private /tmp alone would hide it."""

    def __init__(self, token: str) -> None:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        try:
            cache.mkdir(parents=True, exist_ok=True)
            self._root = Path(tempfile.mkdtemp(prefix="codecoder-audit-", dir=cache))
        except OSError:
            self._root = Path(tempfile.mkdtemp(prefix="codecoder-audit-"))
        self.home = self._root / "home"
        (self.home / ".ssh").mkdir(parents=True, exist_ok=True)
        (self.home / ".ssh" / "id_rsa").write_text(
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{token}\n"
        )
        (self.home / ".aws").mkdir(exist_ok=True)
        (self.home / ".aws" / "credentials").write_text(f"[default]\nsecret = {token}\n")
        (self.home / ".bashrc").write_text("# the human's shell\n")
        # Toolchains' configuration with credentials in it, and one of a tool nobody knows.
        toolchains = {
            ".m2/settings.xml": f"<settings><server><password>{token}</password></server>"
            "</settings>\n",
            ".m2/settings-security.xml": f"<settingsSecurity><master>{token}</master>"
            "</settingsSecurity>\n",
            ".m2/repository/org/x/x.pom": "<project/>\n",
            ".gradle/gradle.properties": f"signingPassword={token}\n",
            ".gradle/caches/x.bin": "cache\n",
            ".cargo/config.toml": f'[registry]\ntoken = "{token}"\n',
            ".cargo/bin/cargo": "#!/bin/sh\ncat ~/.cargo/config.toml\n",
            ".mytool/auth.conf": f"secret {token}\n",
        }
        for name, content in toolchains.items():
            (self.home / name).parent.mkdir(parents=True, exist_ok=True)
            (self.home / name).write_text(content)
        (self.home / ".cargo/bin/cargo").chmod(0o755)
        self.home_state = self._home_files()
        self.state = state_directory()
        (self.state / "daemon").mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.state / "bait.txt").write_text(token + "\n")
        self.daemon = _Listener(str(self.state / "daemon" / "bait.sock"), token)
        self.abstract_name = f"codecoder-audit-{secrets.token_hex(6)}"
        self.abstract = _Listener("\0" + self.abstract_name, token)
        self.process = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)

    def _home_files(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.home)): p.read_bytes()
            for p in sorted(self.home.rglob("*"))
            if p.is_file()
        }

    def home_changed(self) -> bool:
        return self._home_files() != self.home_state

    def accepted(self) -> int:
        return self.daemon.accepted + self.abstract.accepted

    def close(self) -> None:
        self.daemon.close()
        self.abstract.close()
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self._root, ignore_errors=True)


class _PrivateBait:
    """What the host keeps private where no list names it (environments.privatefiles): a
    0600 file in /etc and a 0700 directory in /var/lib holding a world-readable key, the
    token in both. Made by root only: for another account, what it keeps outside its home
    and /tmp is its own business and nowhere common to plant."""

    def __init__(self, token: str) -> None:
        if os.geteuid() != 0:
            raise _NotApplicable("only root plants files in /etc and /var/lib for this attack")
        suffix = secrets.token_hex(6)
        self.file = Path(f"/etc/codecoder-audit-secret-{suffix}")
        self.directory = Path(f"/var/lib/codecoder-audit-{suffix}")
        fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{token}\n")
        self.directory.mkdir(mode=0o700)
        key = self.directory / "key.pem"
        key.write_text(f"-----BEGIN PRIVATE KEY-----\n{token}\n-----END PRIVATE KEY-----\n")
        key.chmod(0o644)

    def close(self) -> None:
        self.file.unlink(missing_ok=True)
        shutil.rmtree(self.directory, ignore_errors=True)


class _BwrapLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit
        found = command_sandbox()
        factory = audit.options.bwrap_environment
        if factory is None and found.tag is not EnvironmentTag.BWRAP:
            if audit.config.bindings.get("run_command") is EnvironmentTag.BWRAP:
                self.blocker = _NotRun(f"run_command is bound to @bwrap, but {found.reason}")
            else:
                self.blocker = _NotApplicable(
                    f"commands run in {found.tag.value} on this machine: {found.reason}"
                )
            return
        self.bait = _Bait(audit.token)
        audit.on_close(self.bait.close)
        self.env_base = {**os.environ, "HOME": str(self.bait.home)}
        self._factory = factory
        self.canary = audit.canary
        self._bait_broker: BrokerBait | None = None
        self._bait_private: _PrivateBait | None = None

    def _broker_bait(self) -> BrokerBait:
        """The credential broker's bait (made for the first attempt that needs it)."""
        if self._bait_broker is None:
            self._bait_broker = BrokerBait(self.audit.token, self.bait.home)
            self.audit.on_close(self._bait_broker.close)
            self.bait.home_state = self.bait._home_files()
        return self._bait_broker

    def _private_bait(self) -> _PrivateBait:
        """The host's private bait (made for the first attempt that needs it)."""
        if self._bait_private is None:
            self._bait_private = _PrivateBait(self.audit.token)
            self.audit.on_close(self._bait_private.close)
        return self._bait_private

    def _environment(
        self, extra: dict[str, str], entry: BwrapEntry
    ) -> Environment[CommandRequest, CommandResult]:
        environ = {**self.env_base, **extra}
        if self._factory is not None:
            return self._factory(self.audit.workspace.path, environ)
        config = self.audit.config
        if "credential-route" in entry.stage:
            bait = self._broker_bait()
            return BwrapEnvironment(
                self.audit.workspace.path,
                config.bwrap,
                egress=Egress((ROUTED_HOST,)),
                environ=environ,
                resolver=bait.resolver,
                credentials=(bait.route,),
                upstream_ca=bait.ca,
                upstream_address=("127.0.0.1", bait.port),
            )
        settings = config.bwrap
        if entry.home:  # what a trusted file would show of the home
            settings = dataclasses.replace(settings, home=(*settings.home, *entry.home))
        return BwrapEnvironment(
            self.audit.workspace.path, settings, egress=config.docker.egress, environ=environ
        )

    def run(self, attempt: Attempt) -> str:
        assert isinstance(attempt.entry, BwrapEntry)
        entry = attempt.entry
        audit, bait = self.audit, self.bait
        workspace, token = audit.workspace, audit.token
        marker = f"{int(time.time())}.{secrets.randbelow(10**6)}"
        values = {
            "@TOKEN@": token,
            "@HOME@": str(bait.home),
            "@STATE@": str(bait.state),
            "@ABSTRACT@": bait.abstract_name,
            "@HOST_PID@": str(bait.process.pid),
            "@CANARY_PORT@": str(self.canary.port),
            "@CANARY_HOSTS@": " ".join(_Canary.hosts()),
            "@OUTSIDE@": str(workspace.outside),
            "@MARKER@": marker,
            "@ROUTED@": ROUTED_HOST,
        }
        scripts = [entry.script] if entry.then is None else [entry.script, entry.then]
        texts = [s if isinstance(s, str) else "\n".join(s) for s in scripts]
        env_extra = dict(entry.env)
        for placeholder, value in values.items():
            texts = [text.replace(placeholder, value) for text in texts]
            env_extra = {k: v.replace(placeholder, value) for k, v in env_extra.items()}
        if "setuid-binary" in entry.stage:
            self._stage_setuid()
        if "private-files" in entry.stage:
            private = self._private_bait()
            texts = [
                text.replace("@PRIVATE_FILE@", str(private.file)).replace(
                    "@PRIVATE_DIR@", str(private.directory)
                )
                for text in texts
            ]
        seen, accepted = len(self.canary.peers), bait.accepted()
        before = workspace.state(entry.watch)
        privileged = workspace.set_id_files()
        watcher = _Watcher(workspace.path, token) if "during" in entry.escaped_if else None
        try:
            result, error = self._run(entry, texts, env_extra)
        finally:
            if watcher is not None:
                watcher.stop()
        output = (result.stdout + result.stderr) if result is not None else ""
        if entry.expect_output and not re.search(entry.expect_output, output, re.MULTILINE):
            raise _NotRun(
                f"the attack could not be staged (no output matched {entry.expect_output!r}): "
                f"{_last_line(output or str(error))}"
            )
        checks = set(entry.escaped_if)
        if "token" in checks and result is not None and token in result.stdout:
            line = next(line for line in result.stdout.splitlines() if token in line)
            _escaped(f"the attack step worked: {line}")
        if self.canary.peers[seen:]:
            _escaped(
                f"the canary on the host was reached from {', '.join(self.canary.peers[seen:])}"
            )
        if "listener" in checks and bait.accepted() > accepted:
            _escaped("a Unix socket of the host accepted a connection from the sandbox")
        if "host-process" in checks and bait.process.poll() is not None:
            _escaped(f"the host's process {bait.process.pid} was killed from the sandbox")
        if "outlived" in checks:
            time.sleep(0.2)
            alive = _processes_with(marker)
            if alive:
                _escaped(f"a process outlived its call: {alive[0]}")
        if watcher is not None and watcher.seen:
            _escaped(f"while the call ran, the host's workspace held {watcher.seen[0]}")
        if "set-id" in checks:
            left = sorted(set(workspace.set_id_files()) - set(privileged))
            if left:
                _escaped(f"it left files that run with other ids or capabilities: {left}")
        if "home" in checks and bait.home_changed():
            _escaped(f"the human's home changed: {bait.home}")
        changed = workspace.changed(before, entry.watch)
        if changed:
            _escaped(f"it changed {', '.join(changed)} on the host")
        outside = workspace.outside_changed()
        if outside:
            _escaped(f"it changed {', '.join(outside)} next to the workspace")
        if error is not None:
            return f"{type(error).__name__}: {_last_line(str(error))}"
        assert result is not None
        return f"{_last_line(result.stderr or result.stdout)} (exit code {result.exit_code})"

    def _run(
        self, entry: BwrapEntry, scripts: list[str], extra: dict[str, str]
    ) -> tuple[CommandResult | None, CodecoderError | None]:
        """Run the scripts one after the other in one environment (a pause between them, for
        the warm sandbox to be built); what the last one gave."""
        env = self._environment(extra, entry)
        admits = {"credential-route", "egress-admits-all"} & set(entry.stage)
        gate = AdmittingGate() if admits else None
        try:
            outcome: tuple[CommandResult | None, CodecoderError | None] = (None, None)
            for n, script in enumerate(scripts):
                if n:
                    time.sleep(_PAUSE)
                request = CommandRequest(
                    cwd=self.audit.workspace.path,
                    script=script,
                    timeout=entry.timeout,
                    max_output=self.audit.limits.max_output,
                    writable=entry.writable,
                    network=gate,
                )
                try:
                    outcome = env.run(request), None
                except _ERRORS as exc:
                    if type(exc).__name__ not in entry.blocked_by:
                        raise _NotRun(f"{type(exc).__name__}: {exc}") from exc
                    outcome = None, exc
            return outcome
        finally:
            env.close()

    def _stage_setuid(self) -> None:
        binary = self.audit.workspace.path / "setuid-id"
        shutil.copyfile("/usr/bin/id", binary)
        if os.geteuid() != 0:
            raise _NotApplicable("only root can make a set-uid binary of another user")
        os.chown(binary, 65534, 65534)
        binary.chmod(0o4755)


def _processes_with(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found
