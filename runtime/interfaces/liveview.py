"""A command's output on a terminal as it comes (`codecoder call`, `codecoder session`).

`TerminalView` is an `OutputListener`: the command's stdout goes to the terminal's stdout and its
stderr to its stderr while it runs, each made safe with `for_terminal()` (an escape sequence
cannot restyle, hide or overwrite what follows; a long run of blanks is a marker; harmless
colours are shown as colours where `colours_for()` the stream says so, reset at the end of
each piece written, so none outlasts it). It is
bounded like a result: the first half of `limit` bytes is shown as it comes; past that, the
output goes on being read but only its last half of `limit` is kept, and shown, with the cut
marked, when the command ends. So a command printing gigabytes neither floods the terminal nor
hides how it ended.

Pieces arrive split anywhere: a character split between two pieces is decoded whole (an
incremental decoder per stream), and a trailing run of blanks, or the start of an escape
sequence, is held back until the next piece or the end, so that a run is neutralised as one
run and a colour code is read whole, whatever the split.
"""

from __future__ import annotations

import codecs
import re
import threading
from typing import TextIO

from codecoder.environments.base import Stream
from codecoder.foundation.display import Colours, colours_for, for_terminal

# A trailing run of blanks (after a first newline, which is written at once), and what may be
# the start of a colour code, wait for more.
_TRAILING_BLANKS = re.compile(r"\n?([ \t\r\n]*(?:\x1b(?:\[[0-9;]*)?)?)\Z")


class TerminalView:
    """Writes a command's output to a terminal as it comes (see the module docstring)."""

    def __init__(self, stdout: TextIO, stderr: TextIO | None = None, *, limit: int) -> None:
        self._files: dict[Stream, TextIO] = {"stdout": stdout, "stderr": stderr or stdout}
        self._colours: dict[Stream, Colours] = {
            stream: colours_for(file) for stream, file in self._files.items()
        }
        self._decoders = {
            stream: codecs.getincrementaldecoder("utf-8")(errors="replace")
            for stream in ("stdout", "stderr")
        }
        self._held: dict[Stream, str] = {"stdout": "", "stderr": ""}
        self._head = limit - limit // 2
        self._tail_limit = limit // 2
        self._shown = 0  # bytes shown as they came
        self._tail = ""  # once past the head: the last characters, to show at the end
        self._cut = 0  # bytes read past the head
        self._lock = threading.Lock()
        self.shown = False  # whether any output reached the terminal
        # The last character written: both streams share one terminal, as far as lines go.
        self._last = "\n"

    def __call__(self, stream: Stream, data: bytes) -> None:
        with self._lock:
            room = self._head - self._shown
            if room <= 0:
                self._keep_tail(stream, data)
                return
            shown, rest = data[:room], data[room:]
            self._shown += len(shown)
            self._show(stream, self._held[stream] + self._decoders[stream].decode(shown))
            if rest:
                self._write(
                    "stdout",
                    self._safe("stdout", self._flush_held())
                    + "\n[... the output goes on; its end is shown when the command ends ...]\n",
                )
                self._keep_tail(stream, rest)

    def finish(self) -> None:
        """The command ended (or was stopped): write what was held back and, when the output
        went past the bound, how much was left out and its end. Leaves the cursor at the
        start of a line."""
        with self._lock:
            for stream in ("stdout", "stderr"):
                self._held[stream] += self._decoders[stream].decode(b"", final=True)
            held = self._flush_held()
            if held:
                self._write("stdout", self._safe("stdout", held))
            if self._cut:
                dropped = self._cut - len(self._tail.encode())
                marker = f"[... {max(dropped, 0)} bytes of output not shown ...]\n"
                self._write("stdout", marker + self._safe("stdout", self._tail))
            if self._last != "\n":
                self._write("stdout", "\n")

    def _show(self, stream: Stream, text: str) -> None:
        match = _TRAILING_BLANKS.search(text)
        assert match is not None  # the pattern matches the empty end of any text
        now, self._held[stream] = text[: match.start(1)], match.group(1)
        if now:
            self._write(stream, self._safe(stream, now))

    def _safe(self, stream: Stream, text: str) -> str:
        return for_terminal(text, self._colours[stream])

    def _flush_held(self) -> str:
        held = self._held["stdout"] + self._held["stderr"]
        self._held = {"stdout": "", "stderr": ""}
        return held

    def _keep_tail(self, stream: Stream, data: bytes) -> None:
        self._cut += len(data)
        self._tail = (self._tail + self._decoders[stream].decode(data))[-self._tail_limit :]

    def _write(self, stream: Stream, text: str) -> None:
        if not text:
            return
        file = self._files[stream]
        try:
            file.write(text)
            file.flush()
        except (OSError, ValueError):  # a terminal gone away: the call goes on regardless
            return
        self.shown = True
        self._last = text[-1]
