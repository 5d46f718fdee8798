"""WASI's clocks and sleep, supplied by codecoder in place of wasmtime's: `poll_oneoff` and
`clock_time_get`.

wasmtime's own poll_oneoff sleeps in the host, where the epoch deadline cannot reach: a module
asking to sleep for an hour would hold the call for an hour. This one never sleeps past the
call's deadline and stops sleeping when the call is cancelled; `clock_time_get` reads the clocks
it measures absolute timeouts against.
"""

from __future__ import annotations

import time

import wasmtime

from codecoder.environments.wasm.epoch import CALL

__all__ = ["clock_time_get", "clock_time_get_type", "poll_oneoff", "poll_oneoff_type"]

_SUBSCRIPTION_SIZE = 48  # wasi_snapshot_preview1 subscription_t
_EVENT_SIZE = 32  # event_t
_EVENTTYPE_CLOCK = 0
_SUBCLOCKFLAGS_ABSTIME = 1
_ERRNO_INVAL = 28
_ERRNO_FAULT = 21
_ERRNO_INTR = 27
_CLOCKS = {0: time.time_ns, 1: time.monotonic_ns, 2: time.process_time_ns, 3: time.thread_time_ns}


def poll_oneoff_type() -> wasmtime.FuncType:
    # A new FuncType for each engine: wasmtime registers a type with the first engine that
    # uses it, and asserts (aborting the process) when another engine does.
    return wasmtime.FuncType([wasmtime.ValType.i32()] * 4, [wasmtime.ValType.i32()])


def clock_time_get_type() -> wasmtime.FuncType:
    return wasmtime.FuncType(
        [wasmtime.ValType.i32(), wasmtime.ValType.i64(), wasmtime.ValType.i32()],
        [wasmtime.ValType.i32()],
    )


def poll_oneoff(
    caller: wasmtime.Caller, in_ptr: int, out_ptr: int, count: int, nevents_ptr: int
) -> int:
    """WASI poll_oneoff that never sleeps past the call's deadline.

    File descriptors here are files and pipes drained by the runtime, so fd subscriptions are
    ready at once; clock subscriptions are slept in Python, up to the deadline and no further.
    """
    if CALL.stopped is not None:
        return _ERRNO_INTR
    memory = caller.get("memory")
    if not isinstance(memory, wasmtime.Memory):
        return _ERRNO_FAULT
    if count == 0:
        return _ERRNO_INVAL
    try:
        raw = bytes(memory.read(caller, in_ptr, in_ptr + count * _SUBSCRIPTION_SIZE))
    except (IndexError, ValueError, wasmtime.WasmtimeError):
        return _ERRNO_FAULT
    if len(raw) != count * _SUBSCRIPTION_SIZE:
        return _ERRNO_FAULT
    ready: list[tuple[int, int]] = []  # (userdata, event type)
    clocks: list[tuple[int, int]] = []  # (userdata, nanoseconds to wait)
    for i in range(count):
        sub = raw[i * _SUBSCRIPTION_SIZE : (i + 1) * _SUBSCRIPTION_SIZE]
        userdata = int.from_bytes(sub[0:8], "little")
        tag = sub[8]
        if tag != _EVENTTYPE_CLOCK:
            ready.append((userdata, tag))
            continue
        clock_id = int.from_bytes(sub[16:20], "little")
        timeout = int.from_bytes(sub[24:32], "little")
        flags = int.from_bytes(sub[40:42], "little")
        now = _CLOCKS.get(clock_id)
        if now is None:
            return _ERRNO_INVAL
        wait = timeout - now() if flags & _SUBCLOCKFLAGS_ABSTIME else timeout
        clocks.append((userdata, max(wait, 0)))
    if not ready and clocks:
        shortest = min(wait for _, wait in clocks)
        deadline = CALL.deadline
        seconds = shortest / 1e9
        late = deadline is not None and time.monotonic() + seconds > deadline
        if late:
            assert deadline is not None
            seconds = max(deadline - time.monotonic(), 0.0)
        # The call is marked stopped and the sleep interrupted, rather than raising through
        # wasmtime's trampoline: the epoch callback stops the module at its next check, and
        # whatever it did after this is not reported as its result.
        cancel = CALL.cancel
        if cancel is not None and cancel.wait(seconds):
            CALL.stopped = "cancelled"
            return _ERRNO_INTR
        if cancel is None:
            time.sleep(seconds)
        if late:
            CALL.stopped = "slept"
            return _ERRNO_INTR
        ready = [(userdata, _EVENTTYPE_CLOCK) for userdata, wait in clocks if wait <= shortest]
    else:
        ready += [(userdata, _EVENTTYPE_CLOCK) for userdata, wait in clocks if wait == 0]
    events = bytearray()
    for userdata, kind in ready:
        event = bytearray(_EVENT_SIZE)
        event[0:8] = userdata.to_bytes(8, "little")
        event[10] = kind
        if kind != _EVENTTYPE_CLOCK:
            event[16:24] = (1).to_bytes(8, "little")  # readable/writable now
        events += event
    try:
        memory.write(caller, bytes(events), out_ptr)
        memory.write(caller, len(ready).to_bytes(4, "little"), nevents_ptr)
    except (IndexError, ValueError, wasmtime.WasmtimeError):
        return _ERRNO_FAULT
    return 0


def clock_time_get(caller: wasmtime.Caller, clock_id: int, precision: int, out_ptr: int) -> int:
    """WASI clock_time_get on the same clocks as `poll_oneoff`."""
    memory = caller.get("memory")
    now = _CLOCKS.get(clock_id)
    if now is None:
        return _ERRNO_INVAL
    if not isinstance(memory, wasmtime.Memory):
        return _ERRNO_FAULT
    try:
        memory.write(caller, (now() & (2**64 - 1)).to_bytes(8, "little"), out_ptr)
    except (IndexError, ValueError, wasmtime.WasmtimeError):
        return _ERRNO_FAULT
    return 0
