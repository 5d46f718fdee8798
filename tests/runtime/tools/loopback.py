"""A real HTTP server on 127.0.0.1 for the web and model tests: routes by path, records requests.

Tests never send traffic anywhere else; names that must point elsewhere are made with an
injected resolver, and refused before any connection is made.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path and query, as on the request line
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What a route answers. `drip` > 0 sends the body one byte at a time with that pause;
    `header_drip` does the same to the status line and headers. `length` False sends no
    Content-Length: the body ends when the connection closes."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    drip: float = 0.0
    header_drip: float = 0.0
    length: bool = True

    @classmethod
    def html(cls, text: str, status: int = 200) -> Reply:
        return cls(status, text.encode(), {"Content-Type": "text/html; charset=utf-8"})

    @classmethod
    def json(cls, document: Any, status: int = 200, **headers: str) -> Reply:
        return cls(
            status, json.dumps(document).encode(), {"Content-Type": "application/json", **headers}
        )

    @classmethod
    def redirect(cls, location: str, status: int = 302) -> Reply:
        return cls(status, b"moved", {"Location": location})


Route = Callable[[Request], Reply]


class LoopbackServer:
    """`with LoopbackServer({"/": route}) as server:` serves until the block ends."""

    def __init__(self, routes: dict[str, Route | Reply] | None = None) -> None:
        self.routes: dict[str, Route | Reply] = dict(routes or {})
        self.requests: list[Request] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(
                    self.command, self.path, dict(self.headers.items()), self.rfile.read(length)
                )
                server.requests.append(request)
                route = server.routes.get(request.path)
                if route is None:
                    reply = Reply(404, b"not found", {"Content-Type": "text/plain"})
                else:
                    reply = route if isinstance(route, Reply) else route(request)
                # The client may have given up, which is what some tests are about.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(reply)

            def _send(self, reply: Reply) -> None:
                head = [f"HTTP/1.1 {reply.status} {_reason(reply.status)}"]
                headers = dict(reply.headers)
                if reply.length:
                    headers.setdefault("Content-Length", str(len(reply.body)))
                else:
                    headers["Connection"] = "close"
                    self.close_connection = True
                head += [f"{name}: {value}" for name, value in headers.items()]
                raw_head = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
                _write(self.wfile, raw_head, reply.header_drip)
                _write(self.wfile, reply.body, reply.drip)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.origin + path

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _write(out: Any, data: bytes, pause: float) -> None:
    if not pause:
        out.write(data)
        out.flush()
        return
    for byte in _bytes(data):
        out.write(byte)
        out.flush()
        time.sleep(pause)


def _bytes(data: bytes) -> Iterator[bytes]:
    for i in range(len(data)):
        yield data[i : i + 1]


def _reason(status: int) -> str:
    return BaseHTTPRequestHandler.responses.get(status, ("Unknown",))[0]
