"""The stream to the agent of a warm container: framing, authentication, one call at a time.

A warm container runs the agent (`sandboxes/image/agent/`) as its main process. The runtime keeps
the container's attached stdin/stdout open and writes one authenticated line per call; the agent
runs the command and answers with one line (protocol in the agent's `channel.py`). A call
therefore costs one round trip on an open stream, not an exec through the engine API. A
container runs one call at a time: that is what lets the agent end every process of a call
before it answers.

The stream from the agent is read with bounded buffers: a frame larger than `MAX_FRAME` or a
line longer than the answer to the pending request can be, an answer with a wrong MAC or for
no pending request, ends the container.

A call may carry an `OutputListener`: the request then asks the agent to stream the command's
output (`"stream": true`), and each `output` line for the pending call is handed to the listener
(from the reader thread) as it arrives; an agent that streams nothing (a short call, an older
image) leaves the whole output to its answer (`streamed` says which).

A warm pool (`environments.docker.pool`) greets the agent before any session claims the
container: it opens a channel in hand-over mode, whose reader stops right after the hello, and
passes the stream, the key and the hello to the claimer, whose channel starts from there
(`greeted`). Anything the agent writes between its hello and the first request is a protocol
violation: such a container is never handed over.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import secrets
import socket
import threading
import time
from typing import Any, Final, Literal

from codecoder.environments.base import OutputListener
from codecoder.environments.changewatch import ChangeWatch
from codecoder.environments.egress import EgressProxy
from codecoder.environments.engineseam import Greeted
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.foundation.display import visible
from codecoder.foundation.errors import Cancelled

__all__ = ["AGENT_PROTOCOL", "LABEL_AGENT", "Mode"]

log = logging.getLogger(__name__)

# 5: the agent refuses set-id bits for every command (agent/setid.py); an image whose agent
# does not is refused, with a rebuild hint, rather than trusted.
AGENT_PROTOCOL: Final = 5
# Every sandbox image carries it (the Dockerfile, `codecoder image build`): the protocol of its
# agent. An image without it is not a sandbox image.
LABEL_AGENT: Final = "codecoder.agent"
# The engine copies a container's output in chunks of 32 KiB; a larger frame is not its.
MAX_FRAME: Final = 1024 * 1024
# Before any request: the hello. During a call: what its answer can take (both streams at the
# cap, each byte at worst a six-character JSON escape) and room for the rest.
HELLO_LINE: Final = 1024 * 1024

# Which workspace mount a container has: read-only or read-write (an environment keeps one
# warm container of each).
Mode = Literal["ro", "rw"]


def _answer_line_cap(max_output: int) -> int:
    return 16 * max_output + HELLO_LINE


class _AgentGone(Exception):
    """The attached stream closed or broke its protocol: the container is of no further use."""


class _Pending:
    __slots__ = ("done", "id", "listener", "response", "streamed")

    def __init__(self, request_id: int, listener: OutputListener | None = None) -> None:
        self.id = request_id
        self.done = threading.Event()
        self.response: dict[str, Any] | None = None
        self.listener = listener
        self.streamed = False


class _AgentChannel:
    """One warm container and the authenticated stream to the agent running in it.

    The host sends the session key as the first line; every later line in either direction is
    `<HMAC-SHA256 hex> <JSON>` (see the agent). One request is in flight at a time.
    """

    def __init__(
        self,
        container_id: str,
        name: str,
        mode: Mode,
        attached: Any,
        *,
        greeted: Greeted | None = None,
        handover: bool = False,
    ) -> None:
        """`attached` is the stream (or the SDK's wrapper of it, kept alive with it).
        `greeted`: a pool already sent the set-up and read the hello. `handover`: stop reading
        after the hello, for `release()` (the pool's side)."""
        self.container_id = container_id
        self.name = name
        self.mode = mode
        # The SDK's socket wrapper keeps the HTTP response alive; the raw socket does the I/O.
        self._attached = attached
        self._sock: socket.socket = getattr(attached, "_sock", attached)
        # The SDK sets the client timeout on the socket; an idle warm container must not time out.
        self._sock.settimeout(None)
        self._key = secrets.token_bytes(32) if greeted is None else greeted.key
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._ids = itertools.count(1)
        self._line_cap = HELLO_LINE
        self._hello = threading.Event()
        self.hello: dict[str, Any] = {}
        self._handover = handover
        self._handed_over = False  # hand-over mode: the hello came, the reader stopped
        self._released = False  # and the stream was taken by `release()`
        if greeted is not None:
            self.hello = dict(greeted.hello)
            self._hello.set()
        self.gone: str | None = None
        self._stderr_tail = bytearray()
        # What the host knows of the container's state (calls are serialized per mode).
        self.scan: ProtectedScan | None = None  # read-write containers: what is mounted read-only
        # ... and each mounted path's (device, inode) when mounted: a call that moves one aside
        # and makes another in its place (`mv pkg pkg2; mkdir -p pkg/.claude`) is caught by it.
        self.protected: dict[str, tuple[int, int] | None] = {}
        self.used = False
        self.state_grant: str | None = None
        self.snapshot_digest: str | None = None
        self.proxy: EgressProxy | None = None  # this container's egress proxy, if it has one
        # Read-write containers in bind mode: what each call changes in the workspace, for the
        # apparent size of what it wrote (environments.apparent).
        self.watch: ChangeWatch | None = None
        self.call_started_ns = 0
        self.runtime = "runc" if greeted is None else greeted.runtime  # the engine runtime
        self.claimed = greeted is not None  # from a warm pool: the pool's server removes it
        # Sync mode: the volume's generation when this container last listed it (after its last
        # writable call); while the volume is still at it, the agent's listing stands.
        self.synced_generation: int | None = None
        # Whether the agent streamed the last call's output (then its listener has it all).
        self.streamed = False
        self._reader = threading.Thread(
            target=self._read_frames, name=f"codecoder-{name}", daemon=True
        )
        self._reader.start()

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode(errors="replace").strip()

    def begin(self, uid: int, gid: int, egress: dict[str, Any] | None, outbox: str | None) -> None:
        """Send the session key, the command user and what the agent serves besides calls
        (the egress relay, the outbox of sync mode): the first line the agent reads."""
        setup = {"key": self._key.hex(), "uid": uid, "gid": gid, "egress": egress, "outbox": outbox}
        self._send(json.dumps(setup).encode() + b"\n")

    def wait_ready(self, timeout: float) -> bool:
        return self._hello.wait(timeout) and self.gone is None

    def call(
        self,
        message: dict[str, Any],
        wait: float,
        max_output: int,
        cancel: threading.Event | None = None,
        output: OutputListener | None = None,
    ) -> dict[str, Any] | None:
        """Send one request; its answer, or None when none came within `wait` seconds.

        `output`, when given, receives the command's output as the agent streams it (see the
        module docstring). Raises Cancelled as soon as `cancel` is set (the caller then
        discards the container)."""
        with self._lock:
            if self.gone is not None:
                raise _AgentGone(self.gone)
            pending = _Pending(next(self._ids), output)
            self._pending = pending
            self._line_cap = _answer_line_cap(max_output)
            self.streamed = False
        message["id"] = pending.id
        if output is not None:
            message["stream"] = True
        # JSON escapes every control character, so the engine's detach sequence (ctrl-p ctrl-q)
        # can never appear in what we write to the attached stdin.
        self._send(self._seal(b"H", json.dumps(message, separators=(",", ":")).encode()))
        if not _wait_or_cancel(pending.done, wait, cancel):
            with self._lock:
                self._pending = None
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled: the sandbox container running it was killed")
            return None
        if pending.response is None:
            raise _AgentGone(self.gone or "the sandbox agent stopped")
        self.streamed = pending.streamed
        return pending.response

    def greeted(self) -> Greeted:
        """The key and hello of a greeted agent, to hand over with the stream."""
        return Greeted(self._key, dict(self.hello), self.runtime)

    def release(self, timeout: float = 5.0) -> socket.socket | None:
        """Hand-over mode: the stream, once the reader has stopped after the hello (None when
        it has not, or the agent broke the protocol: the container is then of no use). The
        channel no longer owns it: `close()` leaves it open."""
        if not self._handover:
            raise RuntimeError("release() is for channels opened in hand-over mode")
        self._reader.join(timeout)
        if self._reader.is_alive() or not self._handed_over or self.gone is not None:
            return None
        self._released = True
        return self._sock

    def close(self) -> None:
        if self._released:
            return  # the stream is the claimer's now
        self._hang_up()
        self._fail("the sandbox was closed")
        if self.proxy is not None:
            self.proxy.close()
        if self.watch is not None:
            self.watch.close()

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self._fail(f"writing to the sandbox agent failed: {exc}")

    def _mac(self, direction: bytes, body: bytes) -> bytes:
        return hmac.new(self._key, direction + body, hashlib.sha256).hexdigest().encode()

    def _seal(self, direction: bytes, body: bytes) -> bytes:
        return self._mac(direction, body) + b" " + body + b"\n"

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self.gone is None:
                self.gone = reason
            pending, self._pending = self._pending, None
        if pending is not None:
            pending.done.set()
        self._hello.set()

    def _violation(self, reason: str) -> None:
        log.warning("%s: %s; the container is discarded", self.name, reason)
        self._fail(f"the sandbox broke the protocol: {reason}")
        self._hang_up()

    def _hang_up(self) -> None:
        """End the stream for both sides: shut it down, then close every reference to its
        descriptor. Closing the socket alone is not enough: the SDK's HTTP response (and, on a
        Unix socket, its file wrapper) holds the descriptor open, and a TCP connection shut down
        but still open goes on taking the engine's writes until its window is full, after which
        the engine's copy of the container's output blocks, and so does removing the container
        (a remote engine then timed out a minute). Once the descriptor is closed, the kernel
        answers the engine's next write with a reset."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        response = getattr(self._sock, "_response", None) or getattr(
            self._attached, "_response", None
        )
        # The response's raw stream, not the response: closing a `requests` response hands its
        # connection back to the client's pool, where the next API call would find it closed.
        raw = getattr(response, "raw", None)
        for holder in (self._sock, self._attached, raw):
            if holder is not None:
                with contextlib.suppress(Exception):
                    holder.close()

    def _read_frames(self) -> None:
        # Without a TTY the engine multiplexes the streams: each frame is an 8-byte header
        # (stream id, three zero bytes, big-endian payload length) and the payload. Both the
        # frame buffer and the line buffer are bounded, and a newline is looked for only in
        # what arrived, so no input costs more than linear time or bounded memory.
        frames = bytearray()
        line = bytearray()
        reason = "the sandbox container stopped"
        try:
            while self.gone is None and not self._handed_over:
                chunk = self._sock.recv(65536)
                if not chunk:
                    break
                frames += chunk
                while len(frames) >= 8 and self.gone is None:
                    size = int.from_bytes(frames[4:8], "big")
                    if size > MAX_FRAME:
                        self._violation(f"a frame of {size} bytes")
                        return
                    if len(frames) < 8 + size:
                        break
                    stream, payload = frames[0], bytes(frames[8 : 8 + size])
                    del frames[: 8 + size]
                    if stream == 1:
                        self._take(payload, line)
                    else:
                        self._stderr_tail += payload
                        del self._stderr_tail[:-4096]
                if self._handed_over and (frames or line) and self.gone is None:
                    self._violation("output after its hello, before any request")
                    return
        except OSError as exc:
            reason = f"the stream to the sandbox broke: {exc}"
        if self._handed_over and self.gone is None:
            return  # hand-over mode: the hello came, the stream is left unread for the claimer
        self._fail(reason)

    def _take(self, payload: bytes, line: bytearray) -> None:
        start = 0
        while self.gone is None:
            end = payload.find(b"\n", start)
            line += payload[start : len(payload) if end < 0 else end]
            if len(line) > self._line_cap:
                self._violation(f"a line longer than {self._line_cap} bytes")
                return
            if end < 0:
                return
            self._dispatch(bytes(line))
            line.clear()
            start = end + 1

    def _dispatch(self, line: bytes) -> None:
        mac, _, body = line.partition(b" ")
        if not hmac.compare_digest(mac, self._mac(b"A", body)):
            self._violation(f"a line without the session's MAC: {visible(repr(line[:120]))}")
            return
        try:
            message = json.loads(body)
        except ValueError:
            self._violation(f"a line that is not JSON: {visible(repr(line[:120]))}")
            return
        if not isinstance(message, dict):
            self._violation("a line that is not a JSON object")
            return
        if "hello" in message:
            if self._hello.is_set():
                self._violation("a second hello")
                return
            self.hello = message
            self._handed_over = self._handover
            self._hello.set()
            return
        if "output" in message:
            self._stream(message)
            return
        with self._lock:
            pending = self._pending
            if pending is None or message.get("id") != pending.id:
                unexpected = True
            else:
                unexpected = False
                self._pending = None
                self._line_cap = HELLO_LINE
        if unexpected:
            self._violation(f"an answer for no pending call (id {message.get('id')!r})")
            return
        assert pending is not None
        pending.response = message
        pending.done.set()

    def _stream(self, message: dict[str, Any]) -> None:
        """A piece of the pending call's output, for its listener (the reader thread)."""
        with self._lock:
            pending = self._pending
        if pending is None or message.get("id") != pending.id or pending.listener is None:
            self._violation(f"output for no streaming call (id {message.get('id')!r})")
            return
        piece = message["output"]
        try:
            stream = piece["stream"]
            data = base64.b64decode(piece["data"], validate=True)
            skipped = int(piece.get("skipped") or 0)
        except (TypeError, KeyError, ValueError, binascii.Error):
            self._violation("an output line that is not one")
            return
        if stream not in ("stdout", "stderr") or skipped < 0:
            self._violation("an output line that is not one")
            return
        pending.streamed = True
        if skipped:
            data = f"\n[... {skipped} bytes of output not streamed ...]\n".encode() + data
        try:
            pending.listener(stream, data)
        except Exception:  # whoever watches must not take the stream down
            log.exception("the output listener of %s failed", self.name)


def _wait_or_cancel(done: threading.Event, wait: float, cancel: threading.Event | None) -> bool:
    """Wait for `done` up to `wait` seconds, looking at `cancel` every 50 ms; True when done."""
    if cancel is None:
        return done.wait(wait)
    deadline = time.monotonic() + wait
    while not done.wait(min(0.05, max(deadline - time.monotonic(), 0.0))):
        if cancel.is_set() or time.monotonic() >= deadline:
            return False
    return True
