"""The web tools: `web_fetch`, `web_search` (SearxNG) and `github_search` (GitHub REST search).

They are Permission.none(), so the URLs they reach are chosen by a model, unasked. What keeps a
model from using them against the machine they run on or its network (SSRF) is `GuardedHttp`:

* only `http` and `https`, only GET, no credentials in URLs;
* a host that inet_aton reads as an IPv4 address (`2130706433`, `0x7f.1`) is that address,
  for the policy too; any other host is resolved once and every address it resolves to is
  checked; the connection goes to a checked address (the name is kept for the Host header, SNI
  and certificate checks), so a DNS answer that changes between the check and the connect
  cannot slip through;
* refused by default: loopback, private (RFC 1918, unique-local), link-local, carrier-grade NAT,
  multicast, unspecified, reserved and documentation ranges, and cloud metadata endpoints, in
  IPv4 and IPv6, including IPv4 addresses embedded in IPv6 (mapped, 6to4, NAT64);
* redirects are followed here, not by a library, each hop checked the same way, at most
  `max_redirects` of them; a token is never carried to another origin;
* a response larger than `max_bytes` or slower than `timeout` (the whole exchange, not each
  read) is refused; no compression is asked for, so the size read is the size received.

The `web` policy of the user's file and a trusted codecoder.json
(`runtime.config.settings.WebSettings`) says where they may reach: `deny_hosts` refuses hosts (`"*"`
for all, `"*.example.com"`), `allow_hosts` lets hosts through, local ones included
(`"127.0.0.1:8123"`, `"localhost"`: a local documentation server, a SearxNG on the LAN); the most
specific entry decides, a deny winning a tie. So `{"deny_hosts": ["*"], "allow_hosts":
["docs.python.org"]}` is all a child agent can reach. The policy is applied before a name is
resolved (a DNS query for a denied name could itself carry data out), and to every redirect. The
search and GitHub backends named in `web` are let through for their own tool, since the
configuration chose them; a model cannot add to either list. An untrusted codecoder.json can only
add deny entries.
"""

from __future__ import annotations

import contextlib
import email.message
import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any, Literal
from urllib.parse import quote, urlencode, urljoin, urlsplit

from pydantic import Field, field_validator

from codecoder.config.settings import WebSettings
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed, ExecutionTimeout
from codecoder.foundation.hosts import (
    HostPort,
    IPAddress,
    Resolver,
    address_refusal,
    system_resolver,
)
from codecoder.permissions.keys import Permission
from codecoder.tools.base import Category, P, Parameters, Tool, ToolContext, ToolResult

__all__ = [
    "WEB_TOOLS",
    "GitHubSearch",
    "GuardedHttp",
    "HttpResponse",
    "WebFetch",
    "WebSearch",
    "html_to_text",
]

USER_AGENT = "codecoder-web/0.1"


# --- the guarded HTTP client -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A complete response: the URL it finally came from, after `redirects`."""

    url: str
    status: int
    reason: str
    headers: email.message.Message
    body: bytes
    redirects: tuple[str, ...] = ()

    @property
    def content_type(self) -> str:
        return self.headers.get_content_type()

    def text(self) -> str:
        charset = self.headers.get_content_charset() or _sniffed_charset(self.body) or "utf-8"
        try:
            return self.body.decode(charset, "replace")
        except LookupError:  # a charset Python does not know
            return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class _Target:
    url: str
    scheme: str
    host: str  # IDNA-encoded, lowercase; an IPv6 address without brackets
    port: int
    path: str  # path and query, as sent on the request line

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


class GuardedHttp:
    """HTTP GET for URLs that come from a model; the rules are in the module docstring."""

    def __init__(
        self,
        settings: WebSettings,
        *,
        resolver: Resolver = system_resolver,
        ssl_context: ssl.SSLContext | None = None,
        trusted: frozenset[HostPort] = frozenset(),
    ) -> None:
        self.settings = settings
        self._resolver = resolver
        self._ssl_context = ssl_context
        self._trusted = trusted

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> HttpResponse:
        """Fetch `url`, following redirects; raises ExecutionFailed / ExecutionTimeout."""
        settings = self.settings
        deadline = time.monotonic() + settings.timeout
        sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **(headers or {})}
        target = _target(url)
        redirects: list[str] = []
        while True:
            status, reason, received, body = self._exchange(target, sent, deadline)
            location = received.get("Location")
            if status not in (301, 302, 303, 307, 308) or not location:
                return HttpResponse(target.url, status, reason, received, body, tuple(redirects))
            if len(redirects) >= settings.max_redirects:
                raise ExecutionFailed(
                    f"{url} redirected more than {settings.max_redirects} times; stopped at "
                    f"{target.url}"
                )
            following = _target(urljoin(target.url, location.strip()), redirected=True)
            if following.origin != target.origin:
                # A credential is for the server it was meant for, not wherever that redirects.
                sent = {
                    k: v for k, v in sent.items() if k.lower() not in ("authorization", "cookie")
                }
            redirects.append(following.url)
            target = following

    def checked(self, url: str) -> list[str]:
        """The addresses `get` would connect to for `url` (before any redirect), or
        ExecutionFailed saying why it refuses: how a hook judges another agent's fetch."""
        return self._addresses(_target(url))

    def _addresses(self, target: _Target) -> list[str]:
        """The addresses to connect to, each checked, or ExecutionFailed saying why not."""
        verdict = self.settings.verdict(target.host, target.port, self._trusted)
        if verdict is not None and verdict[0] == "deny":
            raise ExecutionFailed(
                f"refused to fetch {target.url}: the web policy denies {target.host} "
                f"(deny_hosts entry {verdict[1]!r})"
            )
        try:
            literal: IPAddress | None = ipaddress.ip_address(target.host)
        except ValueError:
            literal = None
        addresses = (
            [target.host] if literal is not None else list(self._resolver(target.host, target.port))
        )
        if not addresses:
            raise ExecutionFailed(f"{target.host} resolves to no address")
        if verdict is not None:  # allowed by name: local addresses included
            return addresses
        for text in addresses:
            refusal = address_refusal(ipaddress.ip_address(text.split("%", 1)[0]))
            if refusal is not None:
                where = "is" if literal is not None else f"resolves to {text}, which is"
                raise ExecutionFailed(
                    f"refused to fetch {target.url}: {target.host} {where} {refusal}. "
                    f'A project can allow it in codecoder.json: "web": {{"allow_hosts": '
                    f'["{_host_entry(target)}"]}}'
                )
        return addresses

    def _exchange(
        self, target: _Target, headers: Mapping[str, str], deadline: float
    ) -> tuple[int, str, email.message.Message, bytes]:
        addresses = self._addresses(target)
        with _watchdog(deadline) as watch:
            try:
                sock = self._connect(target, addresses, deadline, watch)
                connection = _PinnedConnection(target, sock)
                try:
                    connection.request("GET", target.path, headers=dict(headers))
                    response = connection.getresponse()
                    if 300 <= response.status < 400 and response.getheader("Location"):
                        body = b""  # a redirect's body is never shown; no need to read it
                    else:
                        body = self._read_body(target, response, deadline)
                    if watch.fired:  # the watchdog's shutdown reads as an early end of body
                        raise TimeoutError
                    return response.status, response.reason, response.msg, body
                finally:
                    connection.close()
            except (OSError, http.client.HTTPException) as exc:
                # The watchdog's shutdown surfaces as whatever the interrupted read raises.
                if watch.fired or isinstance(exc, TimeoutError):
                    raise self._too_slow(target) from None
                if isinstance(exc, ssl.SSLError):
                    reason = exc.reason or exc
                    raise ExecutionFailed(f"TLS with {target.host} failed: {reason}") from None
                raise ExecutionFailed(
                    f"fetching {target.url} failed: {type(exc).__name__}: {exc}"
                ) from None

    def _connect(
        self, target: _Target, addresses: Sequence[str], deadline: float, watch: _Watchdog
    ) -> socket.socket:
        failure: OSError | None = None
        for address in addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            try:
                sock = socket.create_connection((address, target.port), timeout=remaining)
            except OSError as exc:
                failure = exc
                continue
            watch.guard(sock)
            if target.scheme == "https":
                context = self._ssl_context or ssl.create_default_context()
                # The name, not the address, is what the certificate must match.
                sock = context.wrap_socket(sock, server_hostname=target.host)
                watch.guard(sock)
            return sock
        assert failure is not None
        raise failure

    def _read_body(
        self, target: _Target, response: http.client.HTTPResponse, deadline: float
    ) -> bytes:
        limit = self.settings.max_bytes
        announced = response.getheader("Content-Length")
        if announced and announced.strip().isdigit() and int(announced) > limit:
            raise self._too_large(target, f"announces {int(announced)} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() >= deadline:
                raise TimeoutError
            chunk = response.read1(64 * 1024)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise self._too_large(target, f"sent more than {limit} bytes")
            chunks.append(chunk)

    def _too_large(self, target: _Target, what: str) -> ExecutionFailed:
        return ExecutionFailed(
            f"refused {target.url}: the response {what}, over the limit of "
            f'{self.settings.max_bytes} bytes ("web": {{"max_bytes": ...}} in codecoder.json)'
        )

    def _too_slow(self, target: _Target) -> ExecutionTimeout:
        return ExecutionTimeout(
            f"gave up on {target.url}: no complete response within {self.settings.timeout:g}s "
            '("web": {"timeout": ...} in codecoder.json)'
        )


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTP connection over a socket already connected to a checked address.

    The name stays the connection's host, so the Host header is the name; `connect()` never
    resolves anything.
    """

    def __init__(self, target: _Target, sock: socket.socket) -> None:
        super().__init__(target.host, target.port)
        # The Host header leaves out the port only when it is the scheme's own.
        self.default_port = 443 if target.scheme == "https" else 80
        self.sock = sock

    def connect(self) -> None:
        raise http.client.HTTPException("the pinned connection was closed and cannot reconnect")


@dataclass(slots=True)
class _Watchdog:
    """Shuts the sockets it guards at the deadline, so a server that trickles bytes (each read
    within the socket timeout) cannot hold a call past it."""

    sockets: list[socket.socket] = field(default_factory=list)
    fired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def guard(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.append(sock)
            if self.fired:
                _shut(sock)

    def fire(self) -> None:
        with self.lock:
            self.fired = True
            for sock in self.sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def _watchdog(deadline: float) -> Iterator[_Watchdog]:
    watch = _Watchdog()
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), watch.fire)
    timer.daemon = True
    timer.start()
    try:
        yield watch
    finally:
        timer.cancel()


def _target(url: str, *, redirected: bool = False) -> _Target:
    """The parts of `url` the client needs, or ExecutionFailed saying what it cannot fetch."""
    how = "redirected to" if redirected else "cannot fetch"
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in url):
        raise ExecutionFailed(f"{how} {json.dumps(url)}: a URL must not contain spaces or controls")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ExecutionFailed(f"{how} {url}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ExecutionFailed(f"{how} {url}: only http:// and https:// URLs are fetched")
    if parts.username is not None or parts.password is not None:
        raise ExecutionFailed(f"{how} {url}: URLs with credentials are not fetched")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ExecutionFailed(f"{how} {url}: the URL has no host")
    try:
        host = str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise ExecutionFailed(f"{how} {url}: the host is not a valid name: {exc}") from None
        host = _numeric_ipv4(host) or host
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    # The request line is ASCII: characters beyond it go percent-encoded, as browsers send them.
    path = re.sub(r"[^\x21-\x7e]+", lambda match: quote(match.group()), path)
    default = 443 if parts.scheme == "https" else 80
    return _Target(parts.geturl(), parts.scheme, host, port or default, path)


_INET_ATON = re.compile(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}")


def _numeric_ipv4(host: str) -> str | None:
    """The dotted quad of a host the system resolver reads as an IPv4 address without asking
    DNS (inet_aton's `2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`), or None: so the web
    policy, which is applied before resolving, sees the address a deny entry names."""
    if not _INET_ATON.fullmatch(host):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


def _host_entry(target: _Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return f"{host}:{target.port}"


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9._:-]+)""", re.IGNORECASE)


def _sniffed_charset(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:4096])
    return match.group(1).decode("ascii") if match else None


# --- HTML to readable text -------------------------------------------------------------------

_SKIPPED = frozenset(
    {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"}
)
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "li",
        "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot",
        "th", "thead", "tr", "ul", "h1", "h2", "h3", "h4", "h5", "h6",
    }
)  # fmt: skip
# Private-use characters that mark where preformatted text starts and ends in the output.
_PRE_START, _PRE_END = "\ue000", "\ue001"
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})


class _TextExtractor(HTMLParser):
    """Readable text from HTML: scripts and styles dropped, blocks on their own lines, headings
    marked with #, list items with -, links as [text](url), <pre> kept as it is."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.title = ""
        self._out: list[str] = []
        self._skipping: list[str] = []
        self._in_title = False
        self._pre = 0
        self._links: list[tuple[str, int]] = []  # href, where its text starts in _out

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if self._skipping:
            if tag in _SKIPPED and tag not in _VOID:
                self._skipping.append(tag)
            return
        if tag in _SKIPPED:
            self._skipping.append(tag)
            return
        if tag == "br":
            self._out.append("\n")
        elif tag in _BLOCKS:
            self._out.append("\n\n")
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self._out.append("#" * int(tag[1]) + " ")
            elif tag == "li":
                self._out.append("- ")
            elif tag == "pre":
                self._pre += 1
                if self._pre == 1:
                    self._out.append(_PRE_START)
        elif tag == "a":
            href = dict(attrs).get("href")
            if href and not href.startswith(("#", "javascript:", "mailto:")):
                self._links.append((urljoin(self.base_url, href), len(self._out)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._skipping:
            if tag == self._skipping[-1]:
                self._skipping.pop()
            return
        if tag == "a" and self._links:
            href, start = self._links.pop()
            text = "".join(self._out[start:]).strip()
            if text:
                del self._out[start:]
                self._out.append(f"[{' '.join(text.split())}]({href})")
        elif tag in _BLOCKS:
            if tag == "pre" and self._pre:
                self._pre -= 1
                if not self._pre:
                    self._out.append(_PRE_END)
            self._out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._skipping:
            return
        self._out.append(data if self._pre else re.sub(r"\s+", " ", data))

    def text(self) -> str:
        pieces: list[str] = []
        # Split on the <pre> markers: odd pieces are preformatted and kept as they are.
        for i, piece in enumerate(re.split(f"[{_PRE_START}{_PRE_END}]", "".join(self._out))):
            if i % 2:
                pieces.append(piece.strip("\n"))
            else:
                pieces.append("\n".join(line.strip() for line in piece.split("\n")))
        return re.sub(r"\n{3,}", "\n\n", "".join(pieces)).strip()


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """The readable text of an HTML page and its title."""
    parser = _TextExtractor(base_url)
    parser.feed(html)
    parser.close()
    return parser.text(), " ".join(parser.title.split())


# --- the tools -------------------------------------------------------------------------------


def _settings(ctx: ToolContext) -> WebSettings:
    return ctx.session.runtime.config.web if ctx.session is not None else WebSettings()


def _cut(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n\n[cut: {len(text) - limit} more characters not shown]", True


class _WebTool(Tool[P]):
    """What the three tools share: how they reach the network (injectable for tests)."""

    category = Category.WEB
    environment = EnvironmentTag.RUNTIME
    asks = False

    def __init__(
        self, *, resolver: Resolver = system_resolver, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._resolver = resolver
        self._ssl_context = ssl_context

    def permission(self, args: P) -> Permission:
        return Permission.none()

    def _http(
        self, settings: WebSettings, trusted: frozenset[HostPort] = frozenset()
    ) -> GuardedHttp:
        return GuardedHttp(
            settings, resolver=self._resolver, ssl_context=self._ssl_context, trusted=trusted
        )


def _origin_of(url: str) -> frozenset[HostPort]:
    target = _target(url)
    return frozenset({(target.host, target.port)})


class WebFetchParameters(Parameters):
    url: str = Field(
        description="The http:// or https:// URL to fetch (GET). Local and private network "
        "addresses are refused unless the project allows the host.",
        min_length=1,
        max_length=8192,
    )
    max_chars: int = Field(
        default=20_000,
        ge=500,
        le=500_000,
        description="The most characters of text to return; a longer page is cut and marked.",
    )
    raw: bool = Field(
        default=False,
        description="Return the page's source (e.g. the HTML) instead of its readable text.",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if urlsplit(value.strip()).scheme.lower() not in ("http", "https"):
            raise ValueError("must be an http:// or https:// URL")
        return value.strip()


_TEXTUAL = re.compile(r"text/.*|application/(.*\+)?(json|xml)|application/(javascript|x-ndjson)")


class WebFetch(_WebTool[WebFetchParameters]):
    name = "web_fetch"
    description = (
        "Fetch a web page or file over HTTP(S) and return it as readable text (HTML is turned "
        "into text with headings, lists and [links](url)). Use it to read documentation, issues "
        "or articles at a known URL. Read-only; size and time limited."
    )
    parameters = WebFetchParameters

    def execute(self, args: WebFetchParameters, ctx: ToolContext) -> ToolResult:
        settings = _settings(ctx)
        result: ToolResult = ctx.environment.run(lambda: self._fetch(args, settings))
        return result

    def _fetch(self, args: WebFetchParameters, settings: WebSettings) -> ToolResult:
        response = self._http(settings).get(args.url)
        kind = response.content_type
        title = ""
        if not _TEXTUAL.fullmatch(kind):
            text = f"({kind} content, {len(response.body)} bytes, not shown: it is not text)"
        elif kind in ("text/html", "application/xhtml+xml") and not args.raw:
            text, title = html_to_text(response.text(), response.url)
        else:
            text = response.text()
        shown, cut = _cut(text, args.max_chars)
        status = f"HTTP {response.status} {response.reason}".strip()
        header = [response.url + (f" — {title}" if title else "")]
        if response.status >= 400:
            header.append(status)
        data = {
            "url": args.url,
            "final_url": response.url,
            "status": response.status,
            "content_type": kind,
            "bytes": len(response.body),
            "title": title,
            "redirects": list(response.redirects),
            "truncated": cut,
        }
        return ToolResult(
            output="\n".join(header) + "\n\n" + shown,
            is_error=response.status >= 400,
            data=data,
        )


class WebSearchParameters(Parameters):
    query: str = Field(
        description="What to search the web for, as you would type it into a search engine.",
        min_length=1,
        max_length=500,
    )
    max_results: int = Field(default=8, ge=1, le=30, description="How many results to return.")
    page: int = Field(default=1, ge=1, le=10, description="Which page of results (1 = first).")


class WebSearch(_WebTool[WebSearchParameters]):
    name = "web_search"
    description = (
        "Search the web and return the top results (title, URL, snippet). Follow up with "
        "web_fetch to read a result. Uses the project's search backend (a SearxNG instance)."
    )
    parameters = WebSearchParameters

    def execute(self, args: WebSearchParameters, ctx: ToolContext) -> ToolResult:
        settings = _settings(ctx)
        result: ToolResult = ctx.environment.run(lambda: self._search(args, settings))
        return result

    def _search(self, args: WebSearchParameters, settings: WebSettings) -> ToolResult:
        if settings.search_url is None:
            raise ExecutionFailed(
                "web_search has no search backend: set the URL of a SearxNG instance in "
                'codecoder.json ("web": {"search_url": "https://searx.example.org"})'
            )
        base = settings.search_url.rstrip("/")
        endpoint = base if base.endswith("/search") else base + "/search"
        query = urlencode({"q": args.query, "format": "json", "pageno": args.page})
        response = self._http(settings, _origin_of(endpoint)).get(
            f"{endpoint}?{query}", {"Accept": "application/json"}
        )
        if response.status != 200:
            hint = (
                " (is the json format enabled in its settings.yml?)"
                if response.status == 403
                else ""
            )
            raise ExecutionFailed(
                f"the search backend at {endpoint} answered HTTP {response.status}{hint}"
            )
        try:
            document = response.json()
            results = [
                {
                    "title": str(item.get("title") or ""),
                    "url": str(item["url"]),
                    "snippet": " ".join(str(item.get("content") or "").split()),
                    "engine": str(item.get("engine") or ""),
                }
                for item in document["results"]
                if isinstance(item, dict) and item.get("url")
            ][: args.max_results]
        except (ValueError, KeyError, TypeError) as exc:
            raise ExecutionFailed(
                f"the search backend at {endpoint} sent something that is not SearxNG's JSON "
                f"results: {type(exc).__name__}: {exc}"
            ) from None
        lines = [
            f"{i}. {r['title'] or r['url']}\n   {r['url']}"
            + (f"\n   {r['snippet']}" if r["snippet"] else "")
            for i, r in enumerate(results, start=1)
        ]
        output = "\n".join(lines) if lines else f"no results for {args.query!r}"
        return ToolResult(output=output, data={"query": args.query, "results": results})


GitHubKind = Literal["repositories", "code", "issues", "commits", "users"]


class GitHubSearchParameters(Parameters):
    query: str = Field(
        description="A GitHub search query, with qualifiers if useful: "
        "`tokio runtime language:rust stars:>100`, `repo:psf/requests is:issue timeout`, "
        "`def parse_args in:file language:python`.",
        min_length=1,
        max_length=1000,
    )
    kind: GitHubKind = Field(
        default="repositories",
        description="What to search: repositories, code (needs a token), issues (and pull "
        "requests), commits or users.",
    )
    max_results: int = Field(default=10, ge=1, le=100, description="How many results to return.")
    page: int = Field(default=1, ge=1, le=10, description="Which page of results (1 = first).")


class GitHubSearch(_WebTool[GitHubSearchParameters]):
    name = "github_search"
    description = (
        "Search GitHub (repositories, code, issues and pull requests, commits, users) with the "
        "GitHub search syntax and return the matches with their URLs."
    )
    parameters = GitHubSearchParameters

    def __init__(
        self,
        *,
        resolver: Resolver = system_resolver,
        ssl_context: ssl.SSLContext | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(resolver=resolver, ssl_context=ssl_context)
        self._environ = environ

    def execute(self, args: GitHubSearchParameters, ctx: ToolContext) -> ToolResult:
        settings = _settings(ctx)
        result: ToolResult = ctx.environment.run(lambda: self._search(args, settings))
        return result

    def _search(self, args: GitHubSearchParameters, settings: WebSettings) -> ToolResult:
        api = settings.github_api_url.rstrip("/")
        query = urlencode({"q": args.query, "per_page": args.max_results, "page": args.page})
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        environ = os.environ if self._environ is None else self._environ
        token = environ.get(settings.github_token_env)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = f"{api}/search/{args.kind}?{query}"
        response = self._http(settings, _origin_of(api)).get(url, headers)
        try:
            document = response.json()
        except ValueError:
            document = None
        if response.status != 200 or not isinstance(document, dict):
            message = document.get("message") if isinstance(document, dict) else None
            hint = ""
            if response.headers.get("X-RateLimit-Remaining") == "0":
                hint = f" (rate limit reached; a token in ${settings.github_token_env} raises it)"
            elif response.status == 401 or (args.kind == "code" and not token):
                hint = f" (code search needs a token in ${settings.github_token_env})"
            raise ExecutionFailed(
                f"GitHub search at {api} answered HTTP {response.status}"
                + (f": {message}" if message else "")
                + hint
            )
        items = [item for item in document.get("items") or [] if isinstance(item, dict)]
        lines = [_github_line(args.kind, item) for item in items[: args.max_results]]
        total = document.get("total_count", len(items))
        shown = "\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1))
        output = f"{total} result{'' if total == 1 else 's'}" + (f"\n{shown}" if shown else "")
        return ToolResult(
            output=output,
            data={"kind": args.kind, "total_count": total, "items": items[: args.max_results]},
        )


def _github_line(kind: GitHubKind, item: Mapping[str, Any]) -> str:
    url = item.get("html_url", "")
    if kind == "repositories":
        stars = item.get("stargazers_count", 0)
        about = item.get("description") or ""
        return (
            f"{item.get('full_name')} ★{stars}" + (f" — {about}" if about else "") + f"\n   {url}"
        )
    if kind == "code":
        repository = item.get("repository") or {}
        return f"{repository.get('full_name')}: {item.get('path')}\n   {url}"
    if kind == "issues":
        what = "PR" if "pull_request" in item else "issue"
        return f"[{what} #{item.get('number')}, {item.get('state')}] {item.get('title')}\n   {url}"
    if kind == "commits":
        commit = item.get("commit") or {}
        subject = str(commit.get("message") or "").split("\n", 1)[0]
        repository = item.get("repository") or {}
        return f"{repository.get('full_name')}@{str(item.get('sha'))[:10]} {subject}\n   {url}"
    return f"{item.get('login')} ({item.get('type', 'User')})\n   {url}"


WEB_TOOLS: tuple[WebFetch, WebSearch, GitHubSearch] = (WebFetch(), WebSearch(), GitHubSearch())
