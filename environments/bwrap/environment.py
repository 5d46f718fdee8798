"""The @bwrap environment: each command in a bubblewrap sandbox of its own, Landlock and a
seccomp filter on top.

A call builds its sandbox (`environments.bwrap.plan`), runs bubblewrap with @shell's process
handling (timeout, cancel, Ctrl-C and the end of the call kill the sandbox's init, PID 1 of its
namespaces, so the kernel kills every process left in it, a double-forked daemon included, and
the call returns when they are gone: `environments.bwrap.ending`), and reports the command's
output and exit code. A sandbox that could not be built
(bubblewrap or the helper refused) fails the call with what they said; nothing ran.

Read-only calls (`writable=False`: the whole file system read-only) run side by side. Writable
calls run one at a time: before each, the protected paths are looked up and bound read-only;
after it, what it planted is quarantined and the call fails
(`environments.bwrap.protection`, `environments.workspaceguard.quarantine`), as in @docker.

Every writable sandbox has the egress proxy (`environments.egress`, `Egress.asking`; a
read-only call, which ran with no question, has no way out at all): its helper listens
on 127.0.0.1:3128 in the sandbox's own network namespace and hands the listening socket to the
environment's one proxy, which decides each connection through the call's gate (the permission
chain's `network:<host>`, asked during the call) and audits it; HTTP(S)_PROXY and the common
clients' own settings point there (`egress.client_variables`). A trusted allowlist
(`docker.network.allow`) adds the ports and addresses it lists, and is what a credential route
needs (`environments.broker`).

Warm sandboxes (`environments.bwrap.warm`, on unless `warm=False`): after a call, the next
call's sandbox is built in the background with the same plan, its egress listener already
handed over; a call whose plan, computed at claim time, is the same takes it and sends only its
request. A call with a snapshot always runs cold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from codecoder.environments.base import CommandRequest, CommandResult, Environment, Snapshot
from codecoder.environments.broker import BUNDLE_PATH, CredentialBroker, CredentialRoute
from codecoder.environments.bwrap import remembered
from codecoder.environments.bwrap.ending import end_sandbox
from codecoder.environments.bwrap.environ import contained_environ
from codecoder.environments.bwrap.helper import (
    CONFINE_FAILED,
    CONFINE_PREFIX,
    confine_binary,
    helper_command,
)
from codecoder.environments.bwrap.home import (
    configuration_in,
    hidden_paths,
    home_directories,
    masked_in_toolchain,
    program_words,
    toolchains,
)
from codecoder.environments.bwrap.plan import NAMESPACE_OPTIONS, SandboxPlan
from codecoder.environments.bwrap.probe import forget_bwrap_works
from codecoder.environments.bwrap.protection import CallProtection, Protection
from codecoder.environments.bwrap.settings import BwrapSettings
from codecoder.environments.bwrap.warm import (
    WarmKey,
    WarmSandbox,
    WarmSandboxes,
    encode_request,
    identities,
)
from codecoder.environments.egress import Egress, EgressProxy, client_variables
from codecoder.environments.placeholders import is_placeholder
from codecoder.environments.privatefiles import (
    SHOWN_SYS,
    Account,
    MachinePrivateFiles,
    machine_private_files,
    procfs_private_files,
)
from codecoder.environments.shell import ShellEnvironment, materialized
from codecoder.environments.workspaceguard import new_repository_hint, quarantine
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import Cancelled, ExecutionFailed, SandboxUnavailable
from codecoder.foundation.hosts import Resolver, system_resolver
from codecoder.foundation.state import state_directory

__all__ = ["BwrapEnvironment"]

log = logging.getLogger(__name__)

BASH: Final = "/bin/bash"
BUILD_ATTEMPTS: Final = 3
# How long a call waits for its sandbox's egress listener (sent before the helper says ready).
LISTENER_WAIT: Final = 5.0
# Where the clients in the sandbox take their CA bundle from (the system's CAs and the broker's).
_BUNDLE_VARIABLES: Final = (
    "GIT_SSL_CAINFO",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
)


class BwrapEnvironment(Environment[CommandRequest, CommandResult]):
    """Runs `CommandRequest`s in bubblewrap sandboxes on `workspace` (see the module docstring).

    `bwrap` is the bubblewrap to run (found by `environments.bwrap.probe` by default), `environ`
    the environment a request without its own inherits (the runtime's), `resolver` what the
    egress proxy resolves names with, `warm` whether calls may take a sandbox built in the
    background after the previous one (`environments.bwrap.warm`; the attribute can be changed
    between calls), `private_files` what finds the host's private entries (the machine's, by
    default: `environments.privatefiles`). Safe to use from several threads.
    """

    tag = EnvironmentTag.BWRAP

    def __init__(
        self,
        workspace: Path | str,
        settings: BwrapSettings | None = None,
        *,
        egress: Egress | None = None,
        bwrap: str | None = None,
        environ: Mapping[str, str] | None = None,
        resolver: Resolver | None = None,
        tmp_size: int = 1024**3,
        warm: bool = True,
        credentials: tuple[CredentialRoute, ...] = (),
        upstream_ca: Path | None = None,
        upstream_address: tuple[str, int] | None = None,
        private_files: MachinePrivateFiles | None = None,
    ) -> None:
        from codecoder.environments.bwrap.probe import bwrap_binary

        self.workspace = Path(workspace).resolve()
        self.settings = settings or BwrapSettings()
        # `egress`: the project's trusted allowlist, if any; every sandbox has the proxy.
        self.listed = egress
        self.egress = Egress.asking(egress)
        self._proxy: EgressProxy | None = None
        found = bwrap or bwrap_binary()
        helper = confine_binary()
        if found is None or helper is None:
            raise SandboxUnavailable(
                "@bwrap needs bubblewrap (apt-get install bubblewrap) and codecoder's confine "
                "helper"
            )
        self.bwrap = found
        self.helper = helper
        self._environ = dict(os.environ if environ is None else environ)
        self._private_files = private_files or machine_private_files(self._environ)
        self._resolver = resolver or system_resolver
        self._tmp_size = tmp_size
        self._shell = ShellEnvironment(BASH)
        self._protection = Protection(self.workspace)
        self._writing = threading.Lock()
        self._starting = threading.Lock()
        self._gitconfig: bytes | None = None
        self._closed = False
        self.warm = warm
        self.warm_sandboxes = WarmSandboxes(self._build_warm)
        # Credential routes work through the egress proxy only: without an allowlist, none.
        self.broker = (
            CredentialBroker(
                credentials,
                environ=self._environ,
                upstream_ca=upstream_ca,
                upstream_address=upstream_address,
            )
            if credentials and self.listed is not None
            else None
        )

    # -- public API -------------------------------------------------------------------------

    def run(self, request: CommandRequest) -> CommandResult:
        if self._closed:
            raise SandboxUnavailable("this @bwrap environment was closed")
        with _materialized(request.snapshot) as snapshot:
            if snapshot is not None:
                request = dataclasses.replace(request, cwd=snapshot, snapshot=None)
            if not request.writable:
                return self._contain(request, None, snapshot)
            with self._writing:
                call = self._protection.before()
                try:
                    result = self._contain(request, call, snapshot)
                except BaseException as exc:
                    failure = self._guard(call, request)
                    if failure is not None:
                        if isinstance(exc, Exception):
                            raise failure from exc
                        log.warning("while interrupted: %s", failure)
                    raise
                failure = self._guard(call, request) or self._new_repository(result, request)
                if failure is not None:
                    raise failure
                return result

    def close(self) -> None:
        self._closed = True
        self.warm_sandboxes.close()
        with self._starting:
            proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.close()
        if self.broker is not None:
            self.broker.close()
        # A call still running keeps its placeholders a while (its check after the call
        # catches what it would make of them); the last user removes them.
        held = self._writing.acquire(timeout=5)
        try:
            self._protection.placeholders.release()
        finally:
            if held:
                self._writing.release()

    def proxy(self) -> EgressProxy:
        """The egress proxy of every call of this environment (started at the first)."""
        with self._starting:
            if self._proxy is None:
                if self._closed:
                    raise SandboxUnavailable("this @bwrap environment was closed")
                self._proxy = EgressProxy(
                    self.egress, resolver=self._resolver, broker=self.broker, unix=False
                )
            return self._proxy

    def end_session(self, session: str) -> None:
        self.warm_sandboxes.end_session(session)

    # -- one call ---------------------------------------------------------------------------

    def plan(self, request: CommandRequest, call: CallProtection | None = None) -> SandboxPlan:
        """The sandbox `request` would run in (its mounts), without running anything."""
        environ = self._environ if request.env is None else request.env
        homes = home_directories(environ)
        words = list(request.argv[:1]) if request.argv is not None else []
        if request.script is not None:
            words = program_words(request.script)
        path = environ.get("PATH", os.defpath)
        needed = list(toolchains(words, homes, path, Path(request.cwd), self.workspace))
        named: list[Path] = []
        for home in homes:
            for extra in self.settings.home_paths(home):
                if extra.exists() and extra not in needed:
                    needed.append(extra)
                named.append(extra)
        covered: list[Path] = []
        emptied: list[Path] = []
        for toolchain in needed:
            if toolchain.is_dir():
                covered += masked_in_toolchain(toolchain, homes)
                emptied += [
                    c
                    for c in configuration_in(toolchain, homes, named)
                    if c not in covered and c not in needed and c not in emptied
                ]
        hidden = hidden_paths(environ, homes)
        writable_extra = list(call.writable) if call is not None else []
        account = Account.current()
        private = self._private_files.view(
            account, shown=[self.workspace, *writable_extra, *needed], hidden=hidden
        )
        kernel_private = _kernel_private(account)
        return SandboxPlan(
            workspace=self.workspace,
            cwd=Path(request.cwd),
            writable=request.writable,
            homes=homes,
            hidden=hidden,
            private=private,
            kernel_private=kernel_private,
            sys_shown=_sys_shown(),
            toolchains=tuple(needed),
            covered=covered,
            emptied=emptied,
            empty_file=_empty_file() if emptied or private.files or kernel_private else None,
            read_only=list(call.read_only) if call is not None else [],
            writable_extra=writable_extra,
            pinned=list(call.pinned) if call is not None else [],
            tmp_size=self._tmp_size,
        )

    def _contain(
        self, request: CommandRequest, call: CallProtection | None, snapshot: Path | None
    ) -> CommandResult:
        if not Path(request.cwd).is_dir():
            raise ExecutionFailed(f"working directory {request.cwd} does not exist")
        plan = self.plan(request, call)
        plan.snapshot = snapshot
        environ = self._environ if request.env is None else request.env
        if self.broker is not None:
            plan.ca_bundle = self.broker.bundle
        home = str(plan.homes[0]) if plan.homes else "/tmp"
        env = contained_environ(
            environ, home=home, passed=self.settings.env, injected=self._injected()
        )
        command = (
            list(request.argv)
            if request.argv is not None
            else [BASH, "--noprofile", "--norc", "-c", request.script or ""]
        )
        key = self._warm_key(plan, request)
        if key is not None:
            payload = encode_request(Path(request.cwd), command, env)
            sandbox = self.warm_sandboxes.claim(key) if payload is not None else None
            if sandbox is not None and payload is not None:
                warm = self._run_warm(sandbox, request, payload)
                if warm is not None:
                    self.warm_sandboxes.refill(key, plan)
                    return _described(warm, plan, request, warm=True)
        for attempt in range(1, BUILD_ATTEMPTS + 1):
            result, ready = self._attempt(plan, request, env, command)
            if ready:
                if key is not None:
                    self.warm_sandboxes.refill(key, plan)
                return _described(result, plan, request, warm=False)
            if result.exit_code == CONFINE_FAILED or attempt == BUILD_ATTEMPTS:
                raise self._unbuilt(result)
            # Nothing ran. bubblewrap fails now and then while it remounts the file system
            # read-only, when a mount of the host (a container's) comes or goes meanwhile
            # (containers/bubblewrap#650): the next try builds the sandbox from scratch.
            log.info("the @bwrap sandbox could not be built, trying again: %s", result.stderr)
        raise AssertionError("unreachable")

    def _injected(self) -> dict[str, str]:
        """The variables the runtime itself sets in the sandbox, over the caller's: where the
        egress proxy listens, and the credential broker's CA bundle. (Settings the runtime
        gives package managers belong here too.) Every sandbox has the proxy (a writable call
        reaches it; a read-only one has no way out at all), so the clients' settings are always
        set (`egress.client_variables`)."""
        injected = client_variables()
        if self.broker is not None:
            injected.update(dict.fromkeys(_BUNDLE_VARIABLES, BUNDLE_PATH))
            injected["NODE_EXTRA_CA_CERTS"] = BUNDLE_PATH
        return injected

    def _attempt(
        self, plan: SandboxPlan, request: CommandRequest, env: dict[str, str], command: list[str]
    ) -> tuple[CommandResult, bool]:
        """Run bubblewrap once: its result, and whether the sandbox was built (the helper said
        it was ready: what ran after that was the command)."""
        with contextlib.ExitStack() as stack:
            ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
            stack.callback(_close, ready_r)
            stack.callback(_close, ready_w)
            gitconfig = self._gitconfig_fd(stack)
            helper, helper_fd = helper_command(self.helper, stack)
            listen_fd = None
            if request.writable:
                # The sandbox's egress listener comes back over this pair; its connections are
                # decided through this call's gate, whatever runs beside it. A read-only call
                # (one that ran unasked, SPEC §5) has no way out at all.
                host_end, child_end = socket.socketpair()
                stack.callback(child_end.close)
                stack.enter_context(_serving(self.proxy(), host_end, request))
                listen_fd = child_end.fileno()
            argv = [
                self.bwrap,
                *NAMESPACE_OPTIONS,
                *plan.mounts(gitconfig),
                "--",
                helper,
                *plan.helper_options(ready_w, listen_fd),
                "--",
                *command,
            ]
            fds = [fd for fd in (ready_w, gitconfig, helper_fd, listen_fd) if fd is not None]
            # bubblewrap itself starts in the workspace; the command in its --chdir.
            outer = dataclasses.replace(request, cwd=self.workspace)
            result = self._shell.run_process(argv, outer, env, pass_fds=fds, end=end_sandbox)
            return result, _was_ready(ready_r)

    # -- warm sandboxes (environments.bwrap.warm) ---------------------------------------------

    def _warm_key(self, plan: SandboxPlan, request: CommandRequest) -> WarmKey | None:
        """What a warm sandbox must have been built with to serve `request`, or None when the
        call must run cold (warm sandboxes off, a snapshot)."""
        if not self.warm or self._closed or plan.snapshot is not None:
            return None
        mounts = plan.mounts(_GITCONFIG_FD)
        assert mounts[-2] == "--chdir"
        sources = (
            self.workspace,
            *plan.homes,
            *plan.hidden,
            *plan.sys_shown,
            *plan.toolchains,
            *plan.covered,
            *plan.emptied,
            *([plan.empty_file] if plan.empty_file is not None else []),
            *plan.read_only,
            *plan.writable_extra,
            *plan.pinned,
        )
        return WarmKey(
            session=request.session,
            writable=plan.writable,
            mounts=tuple(mounts[:-2]),
            helper=tuple(plan.helper_options(None, _LISTEN_FD if plan.writable else None)),
            sources=sources,
        )

    def _build_warm(self, key: WarmKey, planned: object) -> WarmSandbox | None:
        """Start a sandbox for `key` (the warm thread's work): bubblewrap with the plan's mounts
        and the helper waiting on its request socket; None when it could not start."""
        assert isinstance(planned, SandboxPlan)
        plan = dataclasses.replace(planned, cwd=self.workspace)  # the request says where
        built = dataclasses.replace(key, identities=identities(key.sources))
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The egress listener's pair, for a writable sandbox (a read-only one has no way out).
        egress_end, egress_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.ExitStack() as stack:
            stack.callback(_close, ready_w)
            stack.callback(child_end.close)
            stack.callback(egress_child.close)
            gitconfig = self._gitconfig_fd(stack)
            helper, helper_fd = helper_command(self.helper, stack)
            argv = [
                self.bwrap,
                *NAMESPACE_OPTIONS,
                *plan.mounts(gitconfig),
                "--",
                helper,
                *plan.helper_options(ready_w, egress_child.fileno() if plan.writable else None),
                "--request",
                str(child_end.fileno()),
                "--",
                "true",  # never run: the request names the command
            ]
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=self.workspace,
                    env={},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(
                        ready_w,
                        gitconfig,
                        helper_fd,
                        child_end.fileno(),
                        egress_child.fileno(),
                    ),
                )
            except OSError as exc:
                log.info("a warm @bwrap sandbox could not start: %s", exc)
                host_end.close()
                egress_end.close()
                _close(ready_r)
                return None
        if not plan.writable:
            egress_end.close()
            return WarmSandbox(built, proc, host_end, ready_r)
        return WarmSandbox(built, proc, host_end, ready_r, egress=egress_end)

    def _run_warm(
        self, sandbox: WarmSandbox, request: CommandRequest, payload: bytes
    ) -> CommandResult | None:
        """Run `request` in a claimed warm sandbox; None when the sandbox was gone before it
        took the request (nothing ran: the call runs cold)."""
        if request.cancel is not None and request.cancel.is_set():
            sandbox.discard()
            raise Cancelled("the call was cancelled before the command started")
        started = time.monotonic()
        ours: list[int] = []
        theirs: list[int] = []
        try:
            if request.stdin:
                stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
                ours.append(stdin_w)
            else:
                # As subprocess opens it for a cold call's stdin=DEVNULL.
                stdin_r = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            theirs.append(stdin_r)
            for _ in range(2):
                read, write = os.pipe2(os.O_CLOEXEC)
                ours.append(read)
                theirs.append(write)
            sent = sandbox.send(payload, theirs)
        except BaseException:
            _close_all(ours)
            sandbox.discard()
            raise
        finally:
            _close_all(theirs)
        if not sent:
            _close_all(ours)
            sandbox.discard()
            return None
        proc = sandbox.proc
        if request.stdin:
            proc.stdin = open(ours.pop(0), "wb")  # noqa: SIM115 - closed by collect
        proc.stdout = open(ours[0], "rb")  # noqa: SIM115
        proc.stderr = open(ours[1], "rb")  # noqa: SIM115
        with contextlib.ExitStack() as stack:
            listener = sandbox.take_listener(LISTENER_WAIT) if request.writable else None
            if listener is None and request.writable:
                log.warning("a warm @bwrap sandbox handed over no egress listener")
            elif listener is not None:
                stack.callback(listener.close)
                stack.enter_context(self.proxy().serving(listener, request.network))
            return self._shell.collect(proc, request, started, end_sandbox)

    def _unbuilt(self, result: CommandResult) -> Exception:
        # Whatever made it fail, that bubblewrap works here is no longer believed.
        forget_bwrap_works()
        said = (result.stderr or result.stdout).strip()
        if result.exit_code == CONFINE_FAILED and CONFINE_PREFIX in said:
            return ExecutionFailed(f"the @bwrap sandbox could not restrict the command: {said}")
        return SandboxUnavailable(
            f"the @bwrap sandbox could not be built (bubblewrap exit code {result.exit_code}): "
            f"{said or 'no message'}"
        )

    def _guard(self, call: CallProtection, request: CommandRequest) -> ExecutionFailed | None:
        """After a writable call: quarantine what it planted; the failure, or None."""
        planted, said = self._protection.planted(call)
        if said is None:
            return None
        summary = " ".join(request.argv) if request.argv is not None else request.script or ""
        why = (
            f"a writable @bwrap call (`{summary[:200]}`) {said} in the workspace; sandboxed "
            "tools may never create or move protected paths"
        )
        where = quarantine(self.workspace, planted, why) if planted else "nothing to move"
        return ExecutionFailed(f"{why}. Quarantined: {where}{new_repository_hint(planted)}")

    def _new_repository(
        self, result: CommandResult, request: CommandRequest
    ) -> ExecutionFailed | None:
        """A command that tried to make the workspace a repository (`git init`, `git clone
        URL .`) found its placeholder `.git` read-only: say why, and what to do instead."""
        git_dir = f"{self.workspace}/.git/"
        if result.exit_code == 0 or git_dir not in result.stderr:
            return None
        if "Read-only file system" not in result.stderr:
            return None
        if not is_placeholder(self.workspace, ".git"):
            return None
        summary = " ".join(request.argv) if request.argv is not None else request.script or ""
        return ExecutionFailed(
            f"a writable @bwrap call (`{summary[:200]}`) could not make the workspace a git "
            "repository: it has none, and a sandbox may not create its .git"
            + new_repository_hint([".git"]),
            output=result.stdout + result.stderr,
        )

    # -- what calls share -------------------------------------------------------------------

    def _gitconfig_fd(self, stack: contextlib.ExitStack) -> int:
        """A pipe holding the sandbox's ~/.gitconfig: the user's name and email (read from the
        user's git configuration once), `safe.directory`, and nothing else of the user's."""
        if self._gitconfig is None:
            self._gitconfig = _gitconfig(self._environ)
        read, write = os.pipe2(os.O_CLOEXEC)
        stack.callback(_close, read)
        try:
            os.write(write, self._gitconfig)
        finally:
            os.close(write)
        return read


# Any descriptor numbers: the key compares the mounts, not which descriptor carried the file.
_GITCONFIG_FD: Final = 3
_IDENTITY: Final = "git-identity"
_LISTEN_FD: Final = 4


def _described(
    result: CommandResult, plan: SandboxPlan, request: CommandRequest, *, warm: bool
) -> CommandResult:
    result.extra["sandbox"] = {
        "toolchains": [str(t) for t in plan.toolchains],
        "writable": request.writable,
    }
    if warm:
        log.debug("the call ran in a warm sandbox")
    return result


@functools.cache
def _kernel_private(account: Account) -> tuple[Path, ...]:
    """The kernel's files in /proc the account could read only as their owner (the same in
    every procfs of this kernel: looked up once)."""
    return procfs_private_files(account)


@functools.cache
def _sys_shown() -> tuple[Path, ...]:
    return tuple(Path(p) for p in SHOWN_SYS if os.path.isdir(p))


def _empty_file() -> Path:
    """An empty read-only regular file in the runtime's state directory, bound over the
    configuration a sandbox must not read (`plan.SandboxPlan.emptied`)."""
    path = state_directory() / "bwrap-empty"
    try:
        if os.lstat(path).st_size == 0:
            return path
        os.unlink(path)  # not empty: never show what someone put there
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
    return path


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        _close(fd)


def _gitconfig(environ: Mapping[str, str]) -> bytes:
    lines = []
    identity = []
    for key, value in _user_identity(environ).items():
        if value is not None:
            identity.append(f"\t{key} = {value}")
    if identity:
        lines += ["[user]", *identity]
    lines += ["[safe]", "\tdirectory = *", "\tbareRepository = explicit"]
    return ("\n".join(lines) + "\n").encode()


def _user_identity(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The user's name and email from their git configuration (quoted for a config file),
    remembered between processes while the files `git config --global` reads stay the same
    (`environments.bwrap.remembered`; it follows no include there)."""
    key = _global_gitconfig_key(environ)
    if key is not None:
        known = remembered.recall(_IDENTITY, key)
        if isinstance(known, dict) and all(
            isinstance(known.get(k), str | None) for k in ("name", "email")
        ):
            return {"name": known.get("name"), "email": known.get("email")}
    found = {k: _user_git_config(f"user.{k}", environ) for k in ("name", "email")}
    if key is not None:
        remembered.remember(_IDENTITY, key, found)
    return found


def _global_gitconfig_key(environ: Mapping[str, str]) -> dict[str, object] | None:
    """What `git config --global` reads, as (device, inode, size, mtime) of each file; None
    where one cannot be looked at."""
    home = environ.get("HOME") or os.path.expanduser("~")
    xdg = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    seen: dict[str, object] = {"git": shutil.which("git", path="/usr/bin:/bin:/usr/local/bin")}
    for path in (os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")):
        try:
            info = os.stat(path)
        except FileNotFoundError:
            seen[path] = None
            continue
        except OSError:
            return None
        seen[path] = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]
    return seen


def _user_git_config(key: str, environ: Mapping[str, str]) -> str | None:
    git = shutil.which("git", path="/usr/bin:/bin:/usr/local/bin")
    if git is None:
        return None
    env = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(
            [git, "config", "--global", "--get", key],
            capture_output=True,
            text=True,
            env=env,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = done.stdout.strip()
    if done.returncode != 0 or not value or "\n" in value:
        return None
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _shut_down(listener: socket.socket) -> None:
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def _serving(
    proxy: EgressProxy, host_end: socket.socket, request: CommandRequest
) -> Iterator[None]:
    """While the call runs: receive the sandbox's listening socket from its helper and let the
    proxy accept on it, deciding through the call's gate; when it ends, close it all."""
    with contextlib.ExitStack() as serving:
        lock = threading.Lock()
        ended = False

        def receive() -> None:
            try:
                _, fds, _, _ = socket.recv_fds(host_end, 1, 1)
            except OSError:
                return
            for fd in fds:
                listener = socket.socket(fileno=fd)
                with lock:
                    # Undone last to first: the proxy stops accepting, then it is shut down
                    # and closed.
                    serving.callback(listener.close)
                    serving.callback(_shut_down, listener)
                    if not ended:
                        serving.enter_context(proxy.serving(listener, request.network))

        receiver = threading.Thread(target=receive, name="codecoder-bwrap-egress", daemon=True)
        receiver.start()
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                host_end.shutdown(socket.SHUT_RDWR)
            receiver.join(timeout=2)
            with lock:
                ended = True
            host_end.close()


@contextlib.contextmanager
def _materialized(snapshot: Snapshot | None) -> Iterator[Path | None]:
    """The snapshot's files in a private directory, as @shell makes it (or None)."""
    if snapshot is None:
        yield None
        return
    with materialized(snapshot) as directory:
        yield directory


def _was_ready(fd: int) -> bool:
    os.set_blocking(fd, False)
    try:
        return bool(os.read(fd, 1))
    except BlockingIOError:
        return False


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
