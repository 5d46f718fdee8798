"""A command's output while it runs: passed on as it comes, reported as progress, kept.

The dispatcher gives every call one `LiveOutput` (`ToolContext.output`); a tool that runs a
command hands it to its environment as `CommandRequest.output`, and every command environment
(@shell, @docker, @bwrap) calls it with each piece of output as it arrives. It then

* passes each piece on to whoever shows the output live (a terminal: `listener`);
* reports the latest lines as the call's progress (`progress`, an MCP client that asked for
  it): nothing in the first second, then at most twice a second, and at least every few
  seconds while the command runs, with or without new output;
* keeps the last `limit` characters, so that a call interrupted (Ctrl-C, SIGTERM), cancelled or
  killed at its deadline still reports what it printed: in its error, its outcome and its
  audit record.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable

from codecoder.environments.base import OutputListener, Stream
from codecoder.foundation.display import for_terminal

Progress = Callable[[float, float | None, str | None], None]

FIRST_REPORT = 1.0  # seconds before the first progress report
REPORT_EVERY = 0.5  # at most this often
HEARTBEAT = 3.0  # and at least this often while the command runs, even without new output
LATEST_LINES = 5
LINE_WIDTH = 200
_Decoder = codecs.getincrementaldecoder("utf-8")


class LiveOutput:
    """One call's output as it comes (see the module docstring). Thread-safe: environments
    call it from whichever thread reads the command's output."""

    def __init__(
        self,
        listener: OutputListener | None = None,
        progress: Progress | None = None,
        *,
        limit: int = 64 * 1024,
    ) -> None:
        self._listener = listener
        self._progress = progress
        self._limit = limit
        self._lock = threading.Lock()
        # Made when needed: most calls run no command, and each call makes one of these.
        self._decoders: dict[Stream, codecs.IncrementalDecoder] = {}
        self._text = ""
        self._dropped = 0  # characters fallen off the front of what is kept
        self.received = 0  # bytes, both streams
        self._label = ""
        self._started: float | None = None
        self._stop: threading.Event | None = None
        self._ticker: threading.Thread | None = None

    def __call__(self, stream: Stream, data: bytes) -> None:
        with self._lock:
            self.received += len(data)
            decoder = self._decoders.get(stream)
            if decoder is None:
                decoder = self._decoders[stream] = _Decoder(errors="replace")
            self._keep(decoder.decode(data))
        if self._listener is not None:
            self._listener(stream, data)

    def running(self, label: str) -> None:
        """A command of the tool `label` starts: from now on its progress is reported (when
        someone asked for progress) until `close()`."""
        self._label = label
        self._started = time.monotonic()
        if self._progress is not None and self._ticker is None:
            self._stop = threading.Event()
            self._ticker = threading.Thread(
                target=self._report_until_closed, name="codecoder-progress", daemon=True
            )
            self._ticker.start()

    def close(self) -> None:
        """The call is over: no more progress reports."""
        if self._stop is not None:
            self._stop.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join(timeout=1.0)

    def text(self) -> str:
        """What the command printed so far, both streams as they came, the last `limit`
        characters of it (the cut marked)."""
        with self._lock:
            if not self._dropped:
                return self._text
            return f"[... {self._dropped} characters of output before this were cut ...]\n" + (
                self._text
            )

    def latest_lines(self, count: int = LATEST_LINES) -> list[str]:
        """The last `count` lines printed so far, each made safe for a terminal and shortened."""
        with self._lock:
            tail = self._text[-(count + 1) * LINE_WIDTH * 2 :]
        lines = [line for line in tail.replace("\r", "\n").split("\n") if line.strip()]
        shown = []
        for line in lines[-count:]:
            line = for_terminal(line)
            shown.append(line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 1] + "…")
        return shown

    def _keep(self, text: str) -> None:
        self._text += text
        excess = len(self._text) - self._limit
        if excess > 0:
            self._text = self._text[excess:]
            self._dropped += excess

    def _report_until_closed(self) -> None:
        stop = self._stop
        assert self._progress is not None and self._started is not None and stop is not None
        if stop.wait(FIRST_REPORT):
            return
        reported_at, reported_bytes = 0.0, -1
        while not stop.is_set():
            now = time.monotonic()
            if self.received != reported_bytes or now - reported_at >= HEARTBEAT:
                reported_at, reported_bytes = now, self.received
                self._report(now - self._started)
            if stop.wait(REPORT_EVERY):
                return

    def _report(self, elapsed: float) -> None:
        assert self._progress is not None
        lines = self.latest_lines()
        head = f"{self._label}: {elapsed:.1f} s"
        if lines:
            message = f"{head}, latest output:\n" + "\n".join(lines)
        else:
            message = f"{head}, no output yet"
        try:
            self._progress(round(elapsed, 1), None, message)
        except Exception:  # progress is advice: it never fails the call
            if self._stop is not None:
                self._stop.set()
