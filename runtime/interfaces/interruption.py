"""Ctrl-C and SIGTERM end a command the same way.

SIGTERM is turned into `Terminated` (a KeyboardInterrupt) in the main thread, so both unwind
alike: @shell kills the command's whole process group, @docker removes the container the command
ran in, the dispatcher writes the call's audit record with outcome `interrupted`, and the command
exits without a traceback (130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds like Ctrl-C (see the module docstring)."""


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While inside, SIGTERM raises `Terminated` in the main thread (outside of it, nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
