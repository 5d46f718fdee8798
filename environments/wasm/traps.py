"""How a module that did not exit is reported: every wasmtime trap and error mapped to a
codecoder error.

`proc_exit(n)` is not an error: it is `WasmResult.exit_code`. Fuel used up is `OutOfFuel`, the
memory or table limit `OutOfMemory`, an interrupt past the deadline `ExecutionTimeout`; any
other trap becomes `ExecutionFailed` with the trap's message. No wasmtime exception leaves the
environment.
"""

from __future__ import annotations

import wasmtime

from codecoder.environments.wasm.compile import error_cause
from codecoder.environments.wasm.limits import MAX_TABLES, WASM_PAGE, table_elements
from codecoder.environments.wasm.request import WasmRequest
from codecoder.foundation.errors import (
    ExecutionFailed,
    ExecutionTimeout,
    OutOfFuel,
    OutOfMemory,
)

__all__ = ["map_failure", "wasmtime_cause"]


def wasmtime_cause(exc: Exception) -> str:
    """The one line of a wasmtime error that says what happened (its text leads with a trace)."""
    return error_cause(str(exc)) or type(exc).__name__


def _trace(exc: Exception) -> str:
    return str(exc).split("Caused by:", 1)[0].strip()


def map_failure(
    exc: Exception,
    request: WasmRequest,
    store: wasmtime.Store,
    instance: wasmtime.Instance | None,
) -> ExecutionFailed | ExecutionTimeout | OutOfFuel | OutOfMemory:
    """The error a call that trapped or failed (and was not stopped by codecoder) raises."""
    cause = wasmtime_cause(exc)
    code = exc.trap_code if isinstance(exc, wasmtime.Trap) else None
    if code is wasmtime.TrapCode.INTERRUPT:
        return ExecutionTimeout(f"the module ran past its timeout of {request.timeout:g}s")
    if code is wasmtime.TrapCode.OUT_OF_FUEL:
        return OutOfFuel(f"the module used up its fuel ({request.fuel:,} units)")
    if "exceeds memory limits" in cause:
        return OutOfMemory(
            f"the module needs more memory than its limit of {request.memory_limit:,} bytes"
        )
    if "exceeds table limits" in cause:
        return OutOfMemory(
            f"the module's tables need more than their limit of "
            f"{table_elements(request.memory_limit):,} elements ({cause})"
        )
    if "resource limit exceeded" in cause:
        return ExecutionFailed(
            f"the module needs more of its sandbox than it allows ({cause}): one memory, "
            f"at most {MAX_TABLES} tables, one instance"
        )
    used = _memory_size(store, instance)
    # wasmtime makes a refused memory.grow return -1 instead of trapping, and programs
    # then abort (an `unreachable` trap) or fault, so the refusal itself is invisible here.
    # A trap with memory within a quarter of the limit is reported as what it almost
    # always is; the trap's own message is kept in case it was not.
    if used + max(WASM_PAGE, request.memory_limit // 4) > request.memory_limit:
        return OutOfMemory(
            f"the module hit its memory limit of {request.memory_limit:,} bytes (it was "
            f"using {used:,}) and then failed: {cause}"
        )
    if isinstance(exc, wasmtime.Trap):
        trace = _trace(exc)
        if used > request.memory_limit // 2:  # a large allocation may have been refused
            cause += f" (linear memory {used:,} of its limit of {request.memory_limit:,} bytes)"
        return ExecutionFailed(f"the module trapped: {cause}" + (f"\n{trace}" if trace else ""))
    return ExecutionFailed(f"the module failed: {cause}")


def _memory_size(store: wasmtime.Store, instance: wasmtime.Instance | None) -> int:
    if instance is None:
        return 0
    sizes = [
        item.data_len(store)
        for item in instance.exports(store).by_index
        if isinstance(item, wasmtime.Memory)
    ]
    return max(sizes, default=0)
