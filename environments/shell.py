"""@shell: commands as host processes. Nothing contains them, which is why its ceiling is the
session (foundation.ceiling).

Each command runs in a new session (process group) with the workspace as its cwd and no stdin,
and with git's discovery of bare repositories off (`environments.host.git.guarded_environ`): a
directory a sandbox laid out as a bare repository is never a repository to the host's git.
At its deadline, when it ends, when the caller cancels it (`CommandRequest.cancel`), and when
the call is interrupted (Ctrl-C, SIGTERM: whatever exception reaches it while it waits), the
whole group is killed: a command cannot leave a background job behind to hold the pipes open or
outlive the call. Being in its own session, the group does not get the terminal's Ctrl-C itself;
the runtime, which does, ends it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from codecoder.environments.base import CommandRequest, CommandResult, Environment, Snapshot
from codecoder.environments.host.git import guarded_environ
from codecoder.environments.host.output import CappedBuffer
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import Cancelled, ExecutionFailed, ExecutionTimeout
from codecoder.foundation.scratch import scratch_directory

_DRAIN_AFTER_EXIT = 0.2  # seconds to read what is still buffered once the group is gone


class ShellEnvironment(Environment[CommandRequest, CommandResult]):
    tag = EnvironmentTag.SHELL

    def __init__(self, bash: str = "/bin/bash") -> None:
        self._bash = bash

    def run(self, request: CommandRequest) -> CommandResult:
        if request.snapshot is not None:
            with materialized(request.snapshot) as directory:
                return self._run(dataclasses.replace(request, cwd=directory, snapshot=None))
        return self._run(request)

    def _run(self, request: CommandRequest) -> CommandResult:
        if request.argv is not None:
            argv = list(request.argv)
        else:
            assert request.script is not None
            argv = [self._bash, "--noprofile", "--norc", "-c", request.script]
        env = guarded_environ(os.environ if request.env is None else request.env)
        return self.run_process(argv, request, env)

    def run_process(
        self,
        argv: list[str],
        request: CommandRequest,
        env: Mapping[str, str],
        pass_fds: Sequence[int] = (),
        end: Callable[[int], None] | None = None,
    ) -> CommandResult:
        """Run `argv` as `request` says (its cwd, stdin, timeout, output cap, cancel), with
        exactly `env` and the descriptors `pass_fds`, ending its whole process group: the
        process handling of @shell, which @bwrap runs bubblewrap with. `end(pid)` ends what
        the process started where its group is not all of it (bubblewrap's sandbox)."""
        if request.cancel is not None and request.cancel.is_set():
            raise Cancelled("the call was cancelled before the command started")
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=request.cwd,
                env=env,
                stdin=subprocess.PIPE if request.stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
            )
        except FileNotFoundError:
            if not Path(request.cwd).is_dir():
                raise ExecutionFailed(f"working directory {request.cwd} does not exist") from None
            return CommandResult(
                127, "", f"codecoder: {argv[0]}: command not found\n", time.monotonic() - started
            )
        except PermissionError:
            return CommandResult(
                126, "", f"codecoder: {argv[0]}: permission denied\n", time.monotonic() - started
            )
        except OSError as exc:
            raise ExecutionFailed(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
        return self.collect(proc, request, started, end)

    def collect(
        self,
        proc: subprocess.Popen[bytes],
        request: CommandRequest,
        started: float,
        end: Callable[[int], None] | None = None,
    ) -> CommandResult:
        """Collect a started process as `run_process` does (its pipes, the request's stdin,
        deadline from `started`, cancel), ending its whole process group (or what `end` ends)
        however it ends: what @bwrap's warm sandboxes, started before their call, are
        collected with."""
        ending = end or _kill_group
        try:
            return self._collect(proc, request, started, ending)
        except BaseException:
            ending(proc.pid)
            with contextlib.suppress(BaseException):
                proc.wait(timeout=1)
            raise

    def _collect(
        self,
        proc: subprocess.Popen[bytes],
        request: CommandRequest,
        started: float,
        ending: Callable[[int], None],
    ) -> CommandResult:
        out, err = CappedBuffer(request.max_output), CappedBuffer(request.max_output)
        listener = request.output
        deadline = started + request.timeout
        timed_out = cancelled = False
        cancel = request.cancel
        assert proc.stdout is not None and proc.stderr is not None
        if proc.stdin is not None:
            try:
                proc.stdin.write(request.stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, (out, "stdout"))
            sel.register(proc.stderr, selectors.EVENT_READ, (err, "stderr"))
            exited_at: float | None = None
            while sel.get_map():
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    # The command is done; anything left in its group is a stray background
                    # job that would otherwise keep the pipes open until the deadline.
                    ending(proc.pid)
                    exited_at = now
                if exited_at is not None and now - exited_at > _DRAIN_AFTER_EXIT:
                    break
                if now >= deadline:
                    timed_out = True
                    ending(proc.pid)
                    break
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    ending(proc.pid)
                    break
                wait = min(deadline - now, 0.05 if exited_at is None else _DRAIN_AFTER_EXIT)
                for selkey, _ in sel.select(timeout=max(wait, 0.0)):
                    chunk = os.read(selkey.fd, 65536)
                    if chunk:
                        buffer, stream = selkey.data
                        buffer.write(chunk)
                        if listener is not None:
                            listener(stream, chunk)
                    else:
                        sel.unregister(selkey.fileobj)
        if not (timed_out or cancelled):
            # The pipes can close a moment before the process exits: wait for it, not kill it.
            _wait_for_exit(proc, deadline, cancel)
            cancelled = cancel is not None and cancel.is_set() and proc.poll() is None
        if not (timed_out or cancelled):
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                timed_out = True
        ending(proc.pid)
        code = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        duration = time.monotonic() - started
        if cancelled:
            raise Cancelled(
                f"cancelled after {duration:.1f}s: the command's whole process group was killed",
                output=_so_far(out, err),
            )
        if timed_out:
            raise ExecutionTimeout(
                f"command killed after {request.timeout:g}s (its whole process group)",
                output=_so_far(out, err),
            )
        killed_by = None
        if code < 0:
            killed_by = signal.Signals(-code).name
            code = 128 - code
        return CommandResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            duration=duration,
            truncated=out.truncated or err.truncated,
            killed_by=killed_by,
        )


def _so_far(out: CappedBuffer, err: CappedBuffer) -> str:
    stdout, stderr = out.text(), err.text()
    return stdout + ("\n" if stdout and stderr and not stdout.endswith("\n") else "") + stderr


@contextlib.contextmanager
def materialized(snapshot: Snapshot) -> Iterator[Path]:
    """The snapshot's files in a new private directory, read back and compared before use.

    Nothing else can have written there between the check and the run (it is 0700 and new),
    so the command starts in exactly the approved code; the directory goes afterwards.
    """
    directory = scratch_directory("codecoder-snapshot-")
    try:
        for relative, data in snapshot.files.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(path, flags, 0o700), "wb") as file:
                file.write(data)
        for relative, data in snapshot.files.items():
            if (directory / relative).read_bytes() != data:
                raise ExecutionFailed(f"the snapshot of {relative} did not read back as written")
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _wait_for_exit(
    proc: subprocess.Popen[bytes], deadline: float, cancel: threading.Event | None = None
) -> None:
    """Block until the process exits, the deadline passes or the call is cancelled.

    Popen.wait(timeout=...) polls with sleeps starting at 1 ms, which doubled the cost of a
    short command; a pidfd becomes readable the moment the process exits. A cancellable call
    looks at its cancel event every 50 ms meanwhile.
    """
    if proc.poll() is not None:
        return
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return  # no pidfd here: Popen.wait's polling will do
    try:
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            step = left if cancel is None else min(left, 0.05)
            ready, _, _ = select.select([fd], [], [], step)
            if ready or left <= step or (cancel is not None and cancel.is_set()):
                return
    finally:
        os.close(fd)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
