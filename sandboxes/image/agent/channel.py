"""The agent's streams: the authenticated line protocol on stdin and stdout, notes on stderr.

Protocol: one JSON document per line, each line `<HMAC-SHA256 hex> <JSON>` keyed by a secret
the host sends first (plain JSON: {"key": hex, "uid": int, "gid": int, "egress": {"port": int,
"socket": str} | null, "outbox": str | null}) over stdin, which no command can read. The MAC
covers a direction byte (b"H" host to agent, b"A" agent to host) and the JSON; request ids only
grow, and an answer carries its request's id, so a frame cannot be forged, reflected or
replayed.

    agent -> host, once at start:
        {"hello": PROTOCOL, "problem": str | null, "limits": {...}, "oom_counter": bool,
         "pids_counter": bool, "state_dirs": [str], "wipe_complete": bool, "pidfd": bool,
         "runas": bool, "bash": bool, "egress": bool}
    host -> agent, one per call:
        {"id": int, "argv": [str, ...], "cwd": str, "env": {str: str}, "stdin": base64 str,
         "timeout": float, "max_output": int, "fresh": bool, "disk_budget": int | null,
         "capability": {"digest": str, "files": {path: base64} | null} | null,
         "sync": bool, "unchanged": bool (nothing entered the volume since the last call),
         "stream": bool (optional: send the output as it comes)}
      or, to remove paths of the workspace volume (what the host deleted since it last synced):
        {"id": int, "delete": [relative path, ...]}
    agent -> host, while a call with "stream" runs (none in its first 0.1 s; then at most every
    0.1 s; once any was sent, all of the output is, before the answer; command.py):
        {"id": int, "output": {"stream": "stdout" | "stderr", "data": base64 str,
                               "skipped": int (bytes left out before this piece)}}
    agent -> host, one per call:
        {"id": int, "exit_code": int, "signal": int | null, "stdout": str, "stderr": str,
         "stdout_bytes": int, "stderr_bytes": int, "truncated": bool, "timed_out": bool,
         "oom_killed": bool, "pids_limit_hit": bool, "disk_used": int | null,
         "disk_budget_hit": bool, "survivors": int, "duration": float,
         (disk_used: what a writable call wrote to the workspace, diskbudget.py)
         "changes": {"entries": int, "files": int, "bytes": int, "deleted": int,
                     "over_budget": bool,
                     "inline": {"tar": base64 str, "summary": str} (small ones only)} | null}
      or, when the request could not be run at all:
        {"id": int, "error": str, "discard": bool, "ran": false (nothing of it started)}
      or, for a delete request: {"id": int, "deleted": int}
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from typing import Any

PROTOCOL = 5
READ_CHUNK = 65536
MAX_REQUEST_LINE = 256 * 1024 * 1024

Message = dict[str, Any]


class Channel:
    """The authenticated line protocol over stdin (fd 0) and stdout (fd 1)."""

    def __init__(self) -> None:
        self.key = b""
        self._buffer = bytearray()
        self.closed = False
        self._last_id = 0

    def read_available(self) -> None:
        """Read what stdin holds now (call when select says it is readable)."""
        data = os.read(0, READ_CHUNK)
        if not data:
            self.closed = True
        self._buffer += data
        if len(self._buffer) > MAX_REQUEST_LINE and b"\n" not in self._buffer:
            raise SystemExit("a request line is larger than the agent accepts")

    def next_line(self) -> bytes | None:
        """The next complete line, reading until one arrives; None at end of input."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if self.closed:
                return None
            self.read_available()

    def next_request(self) -> Message | None:
        while True:
            line = self.next_line()
            if line is None:
                return None
            message = self._open(line)
            if message is None:
                log("ignored a request with a bad MAC")
                continue
            request_id = message.get("id")
            if not isinstance(request_id, int) or request_id <= self._last_id:
                log(f"ignored a request replaying or reordering id {request_id!r}")
                continue
            self._last_id = request_id
            return message

    def _mac(self, direction: bytes, body: bytes) -> bytes:
        return hmac.new(self.key, direction + body, hashlib.sha256).hexdigest().encode()

    def _open(self, line: bytes) -> Message | None:
        mac, _, body = line.partition(b" ")
        if not hmac.compare_digest(mac, self._mac(b"H", body)):
            return None
        try:
            message = json.loads(body)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def send(self, message: Message) -> None:
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        view = memoryview(self._mac(b"A", body) + b" " + body + b"\n")
        while view:
            written = os.write(1, view)
            view = view[written:]


def log(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"codecoder agent: {text}\n".encode())
