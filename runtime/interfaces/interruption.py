"""Ctrl-C and SIGTERM end a command the same way.

SIGTERM is turned into `Terminated` (a KeyboardInterrupt) in the main thread, so both unwind
alike: @shell kills the command's whole process group, @docker removes the container the command
ran in, the dispatcher writes the call's audit record with outcome `interrupted`, and the command
exits without a traceback (130 for Ctrl-C, 143 for SIGTERM).

Linux may hand a signal sent to the process to any thread that does not block it, and Python
runs its handler only in the main thread: a signal taken by a helper thread (a warm sandbox's
builder, the egress proxy) trips the handler but leaves the main thread asleep in its system
call (readline's wait for a line, a wait for a child, a lock) until something else wakes it.
So while inside, a relay thread (every signal blocked) hears each signal through Python's
wakeup fd and pokes the main thread with `POKE`, whose handler does nothing: the main thread's
wait ends with EINTR and Python runs the handler that was tripped, whichever thread took it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

# The signal that wakes the main thread: ignored by default, used by nothing else here.
POKE = signal.SIGURG


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
        with _relayed_to_the_main_thread():
            yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _relayed_to_the_main_thread() -> Iterator[None]:
    """While inside, a signal with a Python handler that another thread took also wakes the
    main thread (see the module docstring)."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_end, False)
    main = threading.main_thread().ident
    assert main is not None

    def relay() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        while received := os.read(read_end, 64):
            if any(number != POKE for number in received):
                signal.pthread_kill(main, POKE)

    poke = signal.signal(POKE, lambda signum, frame: None)
    wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    relaying = threading.Thread(target=relay, name="codecoder-signal-relay", daemon=True)
    try:
        relaying.start()
        yield
    finally:
        signal.set_wakeup_fd(wakeup)
        signal.signal(POKE, poke)
        os.close(write_end)  # the relay reads the end of the pipe and stops
        relaying.join(timeout=5)
        if not relaying.is_alive():
            os.close(read_end)
