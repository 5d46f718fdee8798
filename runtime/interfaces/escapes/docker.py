"""The docker layer (docker.json): scripts attacking the container from inside: network (a canary
served on the host), filesystems, privileges, resources, time, the agent that runs them,
processes outliving their call, state left for another grant, what a writable call leaves on the
host (the sync-mode copy-back, budgets at apparent size), the egress proxy. It runs under each
engine runtime available (runc, runsc), the project's own first, and in the workspace mode the
project gets (a remote engine syncs the workspace: attempts then carry their `sync` variant); an
attempt whose `settings` replace some of the project's (sync mode, an egress allowlist) runs in a
sandbox of its own made so, under the same runtime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import resource
import threading
import time
from collections.abc import Iterator

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.engine import engine_is_local
from codecoder.environments.docker.environment import DockerEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import CodecoderError, SandboxUnavailable
from codecoder.interfaces.escapes.calls import _last_line
from codecoder.interfaces.escapes.canary import _Canary
from codecoder.interfaces.escapes.corpus import _ERRORS, Attempt, DockerEntry
from codecoder.interfaces.escapes.layer import OVERRUN_GRACE, AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.interfaces.escapes.workspace import _Watcher


class _DockerLayer(_LayerRunner):
    def __init__(
        self, audit: AuditContext, env: DockerEnvironment | None = None, runtime: str | None = None
    ) -> None:
        self.audit = audit
        self.runtime = runtime
        try:
            if env is None:
                found = audit.environment(EnvironmentTag.DOCKER)
                assert isinstance(found, DockerEnvironment)
                env = found
            else:
                env.start()
        except _NotRun as exc:
            self.blocker = exc
            return
        except SandboxUnavailable as exc:
            self.blocker = _NotRun(f"no @docker sandbox under {runtime}: {exc}")
            return
        self.env = env
        self.engine_runtime = env.runtime_in_use()
        self._variants: dict[str, DockerEnvironment] = {}

    def _sandbox(self, entry: DockerEntry) -> DockerEnvironment:
        """The sandbox an attempt runs in: this runner's, or one made with the attempt's
        `settings` replacing the project's (kept for the other attempts that ask the same)."""
        if not entry.settings:
            return self.env
        key = json.dumps(entry.settings, sort_keys=True)
        env = self._variants.get(key)
        if env is None:
            try:
                settings = dataclasses.replace(self.env.settings, **entry.settings)
            except (TypeError, ValueError) as exc:
                raise _NotRun(f"settings {entry.settings}: {exc}") from exc
            env = DockerEnvironment(
                self.audit.workspace.path,
                settings,
                client_factory=self.audit.options.docker_client_factory,
            )
            self.audit.own(env)
            self._variants[key] = env
        return env

    def other_runtimes(self) -> list[str]:
        """The known runtimes the engine has besides the one this runner's sandbox runs under
        (as far as the audit's options let it)."""
        wanted = self.audit.options.docker_runtimes
        return [
            runtime
            for runtime in self.env.engine_runtimes()
            if runtime != self.engine_runtime
            and (wanted is None or runtime in wanted)
            # gVisor's limits are checked on the machine the sandbox runs on: never on a remote
            # engine, which refuses such a sandbox outright (environments.docker.containers).
            and (runtime != "runsc" or engine_is_local())
        ]

    def run(self, attempt: Attempt) -> str:
        assert isinstance(attempt.entry, DockerEntry)
        variant = attempt.entry.variant(self.engine_runtime)
        if variant is not None and variant.not_applicable:
            raise _NotApplicable(f"under {self.engine_runtime}: {variant.why}")
        entry = attempt.entry.under_runtime(self.engine_runtime)
        if self.env.sync:
            synced = entry.variant("sync")
            if synced is not None and synced.not_applicable:
                raise _NotApplicable(f"with the workspace synced: {synced.why}")
            entry = entry.in_sync_mode()
        audit, env = self.audit, self.env
        workspace = audit.workspace
        token = audit.workspace.token
        script = entry.script if isinstance(entry.script, str) else "\n".join(entry.script)
        canary = audit.canary if "@CANARY_PORT@" in script else None
        # The canary serves every attempt of the audit: only connections from this one count.
        seen = len(canary.peers) if canary is not None else 0
        values = {
            "@TOKEN@": token,
            "@MEMORY_BYTES@": str(env.settings.memory_bytes),
            "@TMPFS_BYTES@": str(env.settings.tmpfs_bytes),
            "@CANARY_PORT@": str(canary.port if canary else 0),
            "@CANARY_HOSTS@": " ".join(_Canary.hosts()),
        }
        for placeholder, value in values.items():
            script = script.replace(placeholder, value)
        self._stage(entry)
        watch = entry.watch
        before = workspace.state(watch)
        privileged = workspace.set_id_files() if "set-id" in entry.escaped_if else []
        threads: list[int] | None = [] if "threads" in entry.escaped_if else None
        watcher = _Watcher(workspace.path, token) if "during" in entry.escaped_if else None
        try:
            with _nofile(entry.nofile), _threads(threads):
                result, error, elapsed = self._run(entry, script)
        except _NotRun:
            # An error the attack did not expect; but what it changed on the host still counts.
            changed = workspace.changed(before, watch)
            if changed:
                _escaped(f"it changed {', '.join(changed)} on the host (and then failed)")
            raise
        finally:
            if watcher is not None:
                watcher.stop()
        if watcher is not None and watcher.seen:
            _escaped(f"while the call ran, the host's workspace held {watcher.seen[0]}")
        after = None
        if entry.after is not None:
            after, _, _ = self._run(entry, entry.after.replace("@TOKEN@", token), follow_up=True)
        checks = set(entry.escaped_if)
        output = (result.stdout + result.stderr) if result else ""
        if entry.expect_output and not re.search(entry.expect_output, output, re.MULTILINE):
            raise _NotRun(
                f"the attack could not be staged (no output matched {entry.expect_output!r}): "
                f"{_last_line(output or str(error))}"
            )
        # Only stdout: a script's own text (quoted in a shell's error message) may hold the token.
        if "token" in checks and result is not None and token in result.stdout:
            _escaped(f"the attack step worked: {_line_with(result.stdout, token)}")
        if canary is not None and canary.peers[seen:]:
            peers = ", ".join(canary.peers[seen:])
            _escaped(f"the canary on the host was reached from {peers}")
        if "completed" in checks and error is None:
            _escaped(
                f"the command ran to its end without being stopped ({elapsed:.1f}s): "
                f"{_last_line(output)}"
            )
        if "overran" in checks and elapsed > entry.timeout + OVERRUN_GRACE:
            _escaped(f"it ran {elapsed:.1f}s, past its timeout of {entry.timeout:g}s")
        if (
            "no-pids-limit" in checks
            and result is not None
            and not result.extra.get("pids_limit_hit")
        ):
            _escaped("it ended without reaching the pids limit")
        if "after-token" in checks and after is not None and token in after.stdout:
            _escaped(f"something outlived the call: {_line_with(after.stdout, token)}")
        if threads and max(threads) - threads[0] > THREADS_GROWN:
            _escaped(
                f"the runtime's threads went from {threads[0]} to {max(threads)} during the call"
            )
        if "partial" in checks and entry.whole is not None:
            found = len(list(workspace.path.glob(entry.whole.glob)))
            wanted = 0 if error is not None else entry.whole.count
            if found != wanted:
                state = (
                    f"failed ({type(error).__name__}: {_last_line(str(error))})"
                    if error is not None
                    else "succeeded"
                )
                _escaped(
                    f"the call {state} with {found} of {entry.whole.count} paths "
                    f"({entry.whole.glob}) on the host: applied in part"
                )
        if "set-id" in checks:
            left = sorted(set(workspace.set_id_files()) - set(privileged))
            if left:
                _escaped(f"it left files that run with other ids or capabilities: {left}")
        for path in entry.host_reads:
            with contextlib.suppress(OSError):
                if token in (workspace.path / path).read_text(errors="replace"):
                    _escaped(f"the host reads the secret outside the workspace through {path}")
        changed = workspace.changed(before, watch)
        if changed:
            _escaped(f"it changed {', '.join(changed)} on the host")
        how = self._defence(result, error, elapsed, canary)
        if after is not None:
            how += f"; afterwards: {_last_line(after.stdout)}"
        return how

    def _stage(self, entry: DockerEntry) -> None:
        """What the attempt needs on the host before it runs (removed by the audit's restore)."""
        workspace = self.audit.workspace
        for name, text in entry.host_files.items():
            workspace.write(name, text.encode())
        for name, target in entry.host_links.items():
            (workspace.path / name).symlink_to(target)

    def _run(
        self, entry: DockerEntry, script: str, *, follow_up: bool = False
    ) -> tuple[CommandResult | None, CodecoderError | None, float]:
        request = CommandRequest(
            cwd=self.audit.workspace.path,
            script=script,
            timeout=150.0 if follow_up else entry.timeout,
            max_output=self.audit.limits.max_output,
            writable=entry.writable,
        )
        started = time.monotonic()
        try:
            result = self._sandbox(entry).run(request)
        except _ERRORS as exc:
            if follow_up or type(exc).__name__ not in entry.blocked_by:
                raise _NotRun(f"{type(exc).__name__}: {exc}") from exc
            return None, exc, time.monotonic() - started
        return result, None, time.monotonic() - started

    def _defence(
        self,
        result: CommandResult | None,
        error: CodecoderError | None,
        elapsed: float,
        canary: _Canary | None,
    ) -> str:
        if error is not None:
            return f"{type(error).__name__} after {elapsed:.1f}s: {_last_line(str(error))}"
        assert result is not None
        line = _last_line(result.stderr or result.stdout)
        how = f"{line} (exit code {result.exit_code})"
        if result.extra.get("pids_limit_hit"):
            how = f"reached the pids limit ({self.env.settings.pids_limit}): {how}"
        if canary is not None:
            how += "; the canary saw no connection"
        return how


# How many threads the runtime may gain during a call (the egress proxy's deciders and some).
THREADS_GROWN = 8


@contextlib.contextmanager
def _nofile(limit: int | None) -> Iterator[None]:
    """The runtime's own descriptor limit lowered to `limit` while the block runs."""
    if limit is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, soft), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def _threads(samples: list[int] | None) -> Iterator[None]:
    """Sample the runtime's thread count while the block runs (the first sample before it)."""
    if samples is None:
        yield
        return
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            samples.append(threading.active_count())

    sampler = threading.Thread(target=sample, name="audit-threads", daemon=True)
    sampler.start()
    samples.append(threading.active_count())
    try:
        yield
    finally:
        done.set()
        sampler.join()


def _line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), needle)
