"""probe.wasm, the module the wasm layer runs inside the sandbox (`probe OP ARGS...`, built from
probe.c beside it); the scratch workspace holds a copy of it too.
"""

from __future__ import annotations

import functools
import importlib.resources


@functools.cache
def _probe_bytes() -> bytes:
    return (
        importlib.resources.files("codecoder.sandboxes").joinpath("escapes/probe.wasm").read_bytes()
    )
