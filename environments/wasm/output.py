"""A @wasm call's stdout and stderr: pipes drained by one thread per environment into capped
buffers.

A module flooding its output costs memory up to its cap (the head and tail are kept, with a
marker for what was dropped) and no disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import selectors
import threading
from pathlib import Path

from codecoder.foundation.errors import SandboxUnavailable

__all__ = ["CappedOutput", "OutputPump", "Pipe"]


class CappedOutput:
    """Keeps the first and last bytes of what a module writes to one stream, and a count.

    A module that floods its output only burns its own fuel and time: memory here stays
    bounded by `limit`, and nothing is written to disk.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self._limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            keep = self._limit // 2
            if len(self._tail) > 2 * keep + 4096:
                del self._tail[: len(self._tail) - keep]

    @property
    def truncated(self) -> bool:
        return self.total > self._limit

    def value(self) -> bytes:
        if not self.truncated:
            return bytes(self._head)
        tail_size = self._limit // 2
        head_size = self._limit - tail_size
        after_head = bytes(self._head[head_size:]) + bytes(self._tail)
        tail = after_head[len(after_head) - tail_size :]
        dropped = self.total - head_size - len(tail)
        marker = f"\n[... {dropped} bytes truncated ...]\n".encode()
        return bytes(self._head[:head_size]) + marker + tail


class Pipe:
    """One stream of one call: the read end of the pipe the module's stdout or stderr goes to.

    wasmtime takes only a path for an output file, so it is given `/dev/fd/N` for the write end
    (it opens its own descriptor, and ours is closed at once), or, where there is no /dev/fd,
    a FIFO in the environment's private scratch directory.
    """

    def __init__(self, scratch: Path, name: str, sink: CappedOutput) -> None:
        self.sink = sink
        self.lock = threading.Lock()
        self.finished = False
        self.registered = False
        self.closed = False
        self._write_fd: int | None = None
        self._fifo: Path | None = None
        if _HAVE_DEV_FD:
            self.fd, self._write_fd = os.pipe()
            self.path = f"/dev/fd/{self._write_fd}"
        else:
            self._fifo = scratch / name
            os.mkfifo(self._fifo, 0o600)
            # Non-blocking, so opening does not wait for a writer.
            self.fd = os.open(self._fifo, os.O_RDONLY | os.O_NONBLOCK)
            self.path = os.fspath(self._fifo)
        os.set_blocking(self.fd, False)
        if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux: fewer stalls before the pump drains it
            with contextlib.suppress(OSError):
                fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, 1024 * 1024)

    def release_name(self) -> None:
        """Once wasmtime has opened its end, ours (or the FIFO's name) can go."""
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        if self._fifo is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._fifo)
            self._fifo = None

    def close(self) -> None:
        """Close the read end once; after that nothing reads it (its number may be reused)."""
        with self.lock:
            if not self.closed:
                self.closed = True
                os.close(self.fd)

    def drain(self) -> bool:
        """Read what is available into the sink; True at end of file. Call with `lock` held."""
        if self.closed:
            return True
        while True:
            try:
                chunk = os.read(self.fd, 1024 * 1024)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            self.sink.write(chunk)


_HAVE_DEV_FD = os.path.isdir("/dev/fd")


class OutputPump:
    """Drains the pipes that running modules write their stdout and stderr to.

    Why pipes and a thread rather than wasmtime's output callbacks: wasmtime may call such a
    callback (or its finalizer) from its own worker threads after the call has returned, and
    one that lands while the interpreter exits aborts the whole process. Why not plain files:
    a module flooding its output would fill the disk before its timeout. A pipe costs a
    flooding module nothing but CPU time, and the sink keeps memory bounded.

    One thread per environment serves every call. While it watches pipes it also polls every
    few milliseconds for new ones, so a call costs no thread wake-up unless the pump was idle
    (then it sleeps in `select` until woken).
    """

    _POLL = 0.005

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._added: list[Pipe] = []
        self._removed: list[Pipe] = []
        self._names = itertools.count()
        self._thread: threading.Thread | None = None
        self._idle = True
        self._closed = False

    def open(self, sink: CappedOutput) -> Pipe:
        """A new pipe whose output goes to `sink`; call `release_name()` once wasmtime has it."""
        pipe = Pipe(self._scratch, f"out-{next(self._names)}", sink)
        with self._lock:
            if self._closed:
                pipe.release_name()
                pipe.close()
                raise SandboxUnavailable("the wasm environment is closed")
            self._added.append(pipe)
            wake = self._idle
            self._idle = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="codecoder-wasm-output", daemon=True
                )
                self._thread.start()
        if wake:
            self._wake()
        return pipe

    def finish(self, pipe: Pipe) -> None:
        """Collect the rest of a call's output. The call has returned, so every write it made
        has completed. The pump thread closes the descriptor, so that its number is not reused
        while it is still registered."""
        pipe.release_name()
        with pipe.lock:
            pipe.finished = True
            pipe.drain()
        with self._lock:
            if self._closed:  # no pump to hand it to any more
                pipe.close()
            else:
                self._removed.append(pipe)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    def _loop(self) -> None:
        watching = 0
        while True:
            with self._lock:
                added, self._added = self._added, []
                removed, self._removed = self._removed, []
                closed = self._closed
            for pipe in added:
                self._selector.register(pipe.fd, selectors.EVENT_READ, pipe)
                pipe.registered = True
                watching += 1
            for pipe in removed:
                if pipe.registered:
                    self._selector.unregister(pipe.fd)
                    watching -= 1
                pipe.close()
            if closed:  # calls still running lose the rest of their output
                for key in list(self._selector.get_map().values()):
                    if key.data is not None:
                        self._selector.unregister(key.fd)
                        key.data.close()
                return
            with self._lock:
                # Decided under the lock open() takes: a pipe added after this point sees
                # `_idle` and wakes us; one added before it is in `_added`, so we poll.
                self._idle = watching == 0 and not self._added and not self._removed
                timeout = None if self._idle else self._POLL
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    continue
                pipe = key.data
                with pipe.lock:
                    at_end = not pipe.finished and pipe.drain()
                if at_end or pipe.finished:  # nothing more will come: stop watching it
                    self._selector.unregister(pipe.fd)
                    pipe.registered = False
                    watching -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join()
        for pipe in self._added + self._removed:  # handed over after the pump stopped
            pipe.close()
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
