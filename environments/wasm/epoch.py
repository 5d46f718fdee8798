"""Stopping a running module between instructions: the epoch ticker, and the callback wasmtime
calls in the module's thread at every tick.

The call running in each thread is kept in `CALL` (its deadline, disk budget and cancel event);
at every epoch tick the callback stops the module once the call is cancelled (`Cancelled`), past
its deadline (`ExecutionTimeout`) or over its disk budget, and records why, for the environment
to report. `poll_oneoff` (`clocks`) reads the same state, so a module's sleep never outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import wasmtime
from wasmtime import _bindings as wasmtime_ffi

from codecoder.environments.wasm.fifos import blocked_fifos, release
from codecoder.environments.wasm.limits import DiskBudget
from codecoder.foundation.errors import SandboxUnavailable

__all__ = ["CALL", "CallState", "EpochTicker", "watch_epochs"]


class EpochTicker:
    """Advances the engine's epoch every `interval` seconds while at least one call runs, and
    frees calls stuck in the host past their deadline.

    One thread per engine, not per call; it sleeps on a condition when nothing runs, so an
    idle runtime costs no wake-ups.

    The epoch stops a module between instructions, not inside a host call, and wasmtime opens
    files with a blocking open(2): a module opening a FIFO that nobody writes (or reading one
    that nobody fills) would wait in the host for ever. So once a call is `RESCUE_AFTER` past
    its deadline, the threads of this process blocked in open, read or write on a FIFO inside
    that call's preopened directories are found (/proc/self/task/*/syscall) and the FIFO is
    opened read-write, drained and written one byte: each such wait ends, and the module is
    stopped at its next instruction. Devices are not freed this way; no sandbox can create one
    (no CAP_MKNOD in @docker, no mknod in WASI).
    """

    RESCUE_AFTER = 0.25

    def __init__(self, engine: wasmtime.Engine, interval: float) -> None:
        self._engine = engine
        self.interval = interval
        self._cond = threading.Condition()
        self._running: dict[int, tuple[float, tuple[Path, ...], threading.Event | None]] = {}
        self._tokens = itertools.count()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._rescued_at = 0.0

    @contextlib.contextmanager
    def running(
        self, deadline: float, hosts: tuple[Path, ...], cancel: threading.Event | None = None
    ) -> Iterator[None]:
        with self._cond:
            if self._closed:
                raise SandboxUnavailable("the wasm environment is closed")
            token = next(self._tokens)
            self._running[token] = (deadline, hosts, cancel)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="codecoder-wasm-epoch", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                del self._running[token]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._running and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._cond.wait(self.interval)
                if self._closed:
                    return
                now = time.monotonic()
                stuck = [
                    host
                    for deadline, hosts, cancel in self._running.values()
                    if now > deadline + self.RESCUE_AFTER or (cancel and cancel.is_set())
                    for host in hosts
                ]
            self._engine.increment_epoch()
            if stuck and now - self._rescued_at > 0.1:
                self._rescued_at = now
                for fifo in blocked_fifos(stuck):
                    release(fifo)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


class CallState(threading.local):
    """The call running in this thread: its deadline, disk budget, cancel event, and why it
    was stopped."""

    deadline: float | None = None
    budget: DiskBudget | None = None
    cancel: threading.Event | None = None
    stopped: str | None = None  # "timeout", "slept" (in poll_oneoff), "disk" or "cancelled"

    def start(
        self, deadline: float, budget: DiskBudget | None, cancel: threading.Event | None = None
    ) -> None:
        self.deadline, self.budget, self.cancel, self.stopped = deadline, budget, cancel, None

    def finish(self) -> None:
        self.deadline, self.budget, self.cancel, self.stopped = None, None, None, None


CALL = CallState()


# The epoch deadline callback: wasmtime-py exposes only its C binding, used here as is. It runs
# in the thread running the module, at every epoch tick, between wasm instructions.
_EpochCallback = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(wasmtime_ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(wasmtime_ffi.wasmtime_update_deadline_kind_t),
)
_NO_FINALIZER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)()


def _stop(reason: str) -> int:
    CALL.stopped = reason
    error = wasmtime_ffi.wasmtime_error_new(
        ctypes.create_string_buffer(f"codecoder: {reason}".encode())
    )
    return ctypes.cast(error, ctypes.c_void_p).value or 0


def _on_epoch(_context: object, _data: object, delta: Any, kind: Any) -> int:
    """Continue one more tick, or stop the module: cancelled, past its deadline, or its disk
    budget."""
    try:
        if CALL.cancel is not None and CALL.cancel.is_set():
            return _stop("cancelled")
        if CALL.deadline is not None and time.monotonic() >= CALL.deadline:
            return _stop("timeout")
        budget = CALL.budget
        if budget is not None and budget.spent():
            return _stop("disk")
        delta[0] = 1
        kind[0] = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE
        return 0
    except BaseException:  # never continue on an error here: stop the module
        return _stop("timeout")


_ON_EPOCH = _EpochCallback(_on_epoch)


def watch_epochs(store: wasmtime.Store) -> None:
    wasmtime_ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), _ON_EPOCH, None, _NO_FINALIZER)
