"""The credential broker: a contained `git push` to an HTTPS remote, the token never inside.

A *credential route* (`"credentials": {"github.com": {"from": "git"}}`, declared only in the
user's own configuration) makes the egress proxy (`environments.egress`) terminate the
sandbox's TLS for that host instead of tunnelling it:

- a CA made for this environment (in memory; its key never written anywhere) signs a leaf
  certificate for each routed host, and only for those; the sandbox trusts the CA through a
  bundle file bound read-only (`GIT_SSL_CAINFO`, `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`: the
  system's CAs and this one; `NODE_EXTRA_CA_CERTS`: this one);
- each HTTP/1.1 request (parsed with h11, heads bounded to `HEAD_LIMIT` bytes) must be a git
  smart-HTTP request: `GET <repo>/info/refs?service=git-upload-pack|git-receive-pack`,
  `POST <repo>/git-upload-pack`, `POST <repo>/git-receive-pack`, the path plain (no `%`, `..`,
  `//`, `;`, `\\`). Anything else is answered 403, reported to the call's gate (audited as a
  refused connection) and the connection ends: it never gets a credential. A request that
  cannot be parsed ends the connection too;
- the credential comes from the host: `git credential fill` with the protocol, host and path,
  run outside the sandbox with the user's own HOME, in an empty directory that is no
  repository (a workspace's `.git/config` is the attacker's: its `credential.helper` or
  `url.*.insteadOf` never take part), without a terminal to prompt on. The request is sent over
  a fresh TLS connection, verified against the system's CAs, to the address the proxy decided,
  with `Authorization` set by the broker (whatever the sandbox sent in its place is dropped);
  upstream's 401 runs `git credential reject`, a success `git credential approve`;
- bodies stream both ways (a chunked push is never held whole).

So a sandbox with a route can do on that host what git smart-HTTP does with the user's
credential, for as long as the call runs and the human granted it (`network:<host>` and the
command's own key); it cannot read the token, nor use it on any other path or host.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import h11
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from codecoder.foundation.hosts import parse_host_entry
from codecoder.foundation.regularfile import read_regular_file
from codecoder.foundation.scratch import scratch_directory, scratch_root

__all__ = [
    "BUNDLE_PATH",
    "CredentialBroker",
    "CredentialRoute",
    "git_request_refusal",
]

# Where the sandbox finds the CA bundle (a read-only bind in its private /run).
BUNDLE_PATH: Final = "/run/codecoder/ca-bundle.pem"
HEAD_LIMIT: Final = 16 * 1024
CHUNK: Final = 65536
CONNECT_SECONDS: Final = 10.0
HELPER_SECONDS: Final = 30.0
SYSTEM_BUNDLES: Final = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)
_SERVICES: Final = frozenset({"git-upload-pack", "git-receive-pack"})
# A repository path as git sends it: plain segments, nothing a server could decode into another.
_SEGMENT: Final = re.compile(r"[A-Za-z0-9._~+@!$'()*,=:-]+")
# Hop-by-hop headers, and what the broker sets itself: never copied across.
_DROPPED: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
        b"host",
        b"authorization",
        b"cookie",
    }
)
_CA_DAYS: Final = 30


@dataclass(frozen=True, slots=True)
class CredentialRoute:
    """A host whose git smart-HTTP requests get the user's credential: `host` (a name, or an
    address with `port` as the tests reach a loopback server), the credential `source` (`git`:
    the user's git credential helpers)."""

    host: str
    port: int = 443
    source: str = "git"

    @classmethod
    def parse(cls, entry: str, source: str = "git") -> CredentialRoute:
        host, port = parse_host_entry(entry)
        if host.startswith("*"):
            raise ValueError(f"{entry!r}: a credential route names one host, not a pattern")
        if source != "git":
            raise ValueError(f'{entry!r}: "from" must be "git", not {source!r}')
        return cls(host, 443 if port is None else port, source)

    @property
    def authority(self) -> str:
        """`host[:port]` as git's credential protocol and the Host header spell it."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port == 443 else f"{shown}:{self.port}"


@dataclass(frozen=True, slots=True)
class _Credential:
    username: str
    password: str

    def header(self) -> bytes:
        pair = f"{self.username}:{self.password}".encode()
        return b"Basic " + base64.b64encode(pair)


Report = Callable[[str], None]


def git_request_refusal(method: bytes, target: bytes) -> str | None:
    """None when `method target` is a git smart-HTTP request, else why it gets no credential."""
    shown = f"{method.decode('latin-1')} {target.decode('latin-1')[:120]}"
    refused = f"{shown} is not a git smart-HTTP request: no credential is added to it"
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        return refused
    path, _, query = text.partition("?")
    if not path.startswith("/") or "#" in text:
        return refused
    segments = path[1:].split("/")
    if not all(_SEGMENT.fullmatch(s) and s not in {".", ".."} for s in segments):
        return refused
    if method == b"GET" and path.endswith("/info/refs"):
        name, _, value = query.partition("=")
        ok = name == "service" and value in _SERVICES and len(segments) > 2
        return None if ok else refused
    if method == b"POST" and segments[-1] in _SERVICES and len(segments) > 1 and not query:
        return None
    return refused


def _repository_path(target: bytes) -> str:
    path = target.decode("ascii").partition("?")[0]
    for tail in ("/info/refs", "/git-upload-pack", "/git-receive-pack"):
        if path.endswith(tail):
            path = path[: -len(tail)]
            break
    return path.lstrip("/")


class CredentialBroker:
    """The routes of one environment, its CA, and what a routed connection goes through.

    `environ` is the runtime's environment (the user's HOME: where `git credential` finds the
    user's helpers). For tests reaching a loopback server with a certificate of its own:
    `upstream_ca` replaces the system's CAs for the upstream connection, and `upstream_address`
    the address the proxy decided (the name is still decided, and verified, as always)."""

    def __init__(
        self,
        routes: tuple[CredentialRoute, ...],
        *,
        environ: Mapping[str, str],
        upstream_ca: Path | None = None,
        upstream_address: tuple[str, int] | None = None,
    ) -> None:
        self.routes = routes
        self._upstream_address = upstream_address
        self._environ = dict(environ)
        self._upstream_ca = upstream_ca
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "codecoder credential broker")])
        self._ca_name = name
        self._ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_pem = self._ca.public_bytes(serialization.Encoding.PEM)
        # Private to the runtime: the sandbox sees the bundle through a read-only bind only.
        self.directory = scratch_directory("codecoder-broker-")
        self.bundle = self.directory / "ca-bundle.pem"
        self.bundle.write_bytes(_system_bundle() + b"\n" + self.ca_pem)
        self.ca_file = self.directory / "ca.pem"
        self.ca_file.write_bytes(self.ca_pem)
        self._lock = threading.Lock()
        self._contexts: dict[CredentialRoute, ssl.SSLContext] = {}
        self._credentials: dict[tuple[CredentialRoute, str], _Credential | None] = {}

    def route_for(self, host: str, port: int) -> CredentialRoute | None:
        for route in self.routes:
            if route.host == host and route.port == port:
                return route
        return None

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- certificates -----------------------------------------------------------------------

    def server_context(self, route: CredentialRoute) -> ssl.SSLContext:
        """The TLS context the broker answers the sandbox with for `route`: a leaf for its host
        signed by the CA, made once."""
        with self._lock:
            context = self._contexts.get(route)
            if context is None:
                context = self._leaf_context(route)
                self._contexts[route] = context
            return context

    def _leaf_context(self, route: CredentialRoute) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(route.host))
        except ValueError:
            alt = x509.DNSName(route.host)
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, route.host)]))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=_CA_DAYS - 1))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                critical=False,
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        # ssl loads a chain from files only: written to a private file, loaded, removed.
        fd, name = tempfile.mkstemp(dir=self.directory, suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(leaf.public_bytes(serialization.Encoding.PEM))
                out.write(
                    key.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    )
                )
            context.load_cert_chain(name)
        finally:
            os.unlink(name)
        return context

    def upstream_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=str(self._upstream_ca) if self._upstream_ca is not None else None
        )
        context.set_alpn_protocols(["http/1.1"])
        return context

    # -- credentials (git credential, on the host) -------------------------------------------

    def credential(self, route: CredentialRoute, path: str) -> _Credential | None:
        """The user's credential for `route` and `path` (asked once per environment)."""
        key = (route, path)
        with self._lock:
            if key in self._credentials:
                return self._credentials[key]
        found = self._git_credential("fill", route, path, None)
        credential = None
        if found is not None and found.get("username") is not None and "password" in found:
            credential = _Credential(found["username"], found["password"])
        with self._lock:
            self._credentials[key] = credential
        return credential

    def judged(
        self, route: CredentialRoute, path: str, credential: _Credential, status: int
    ) -> None:
        """Tell the user's helpers how `credential` fared: rejected on 401, approved on success."""
        if status == 401:
            with self._lock:
                self._credentials.pop((route, path), None)
            self._git_credential("reject", route, path, credential)
        elif 200 <= status < 300:
            self._git_credential("approve", route, path, credential)

    def _git_credential(
        self, action: str, route: CredentialRoute, path: str, credential: _Credential | None
    ) -> dict[str, str] | None:
        git = shutil.which("git", path="/usr/bin:/bin:/usr/local/bin")
        if git is None:
            return None
        lines = ["protocol=https", f"host={route.authority}", f"path={path}"]
        if credential is not None:
            lines += [f"username={credential.username}", f"password={credential.password}"]
        if any("\n" in line or "\0" in line for line in lines):
            return None
        # Never a prompt (the runtime's terminal is the human's), never a repository's config.
        env = {k: v for k, v in self._environ.items() if not k.startswith("GIT_")}
        env.pop("SSH_ASKPASS", None)
        env["GIT_TERMINAL_PROMPT"] = "0"
        with tempfile.TemporaryDirectory(
            prefix="codecoder-credential-", dir=scratch_root()
        ) as neutral:
            env["GIT_CEILING_DIRECTORIES"] = str(Path(neutral).parent)
            try:
                done = subprocess.run(
                    [git, "credential", action],
                    input="\n".join(lines) + "\n\n",
                    capture_output=True,
                    text=True,
                    cwd=neutral,
                    env=env,
                    timeout=HELPER_SECONDS,
                    check=False,
                    start_new_session=True,
                )
            except (OSError, subprocess.TimeoutExpired):
                return None
        if done.returncode != 0:
            return None
        answer: dict[str, str] = {}
        for line in done.stdout.splitlines():
            name, sep, value = line.partition("=")
            if sep:
                answer[name] = value
        return answer

    # -- one routed connection ---------------------------------------------------------------

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        route: CredentialRoute,
        address: str,
        counts: list[int],
        refused: Report,
    ) -> None:
        """Serve the sandbox's TLS connection to `route` (after CONNECT was answered), each
        request forwarded to `address` with the credential or refused (`refused` says why)."""
        await writer.start_tls(self.server_context(route))
        sandbox = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
        while True:
            try:
                event = await _next_event(sandbox, reader)
            except h11.RemoteProtocolError as exc:
                await _refuse(sandbox, writer, exc.error_status_hint, str(exc))
                refused(f"a request the broker cannot parse ended the connection: {exc}")
                return
            if not isinstance(event, h11.Request):
                return  # the sandbox closed (ConnectionClosed), or what cannot start a request
            if _head_size(event) > HEAD_LIMIT:
                # h11 bounds a head still arriving; one that arrived whole is bounded here.
                too_large = f"request headers over {HEAD_LIMIT} bytes"
                await _refuse(sandbox, writer, 431, too_large)
                refused(too_large)
                return
            why = git_request_refusal(event.method, event.target)
            if why is not None:
                await _refuse(sandbox, writer, 403, why)
                refused(why)
                return
            if not await self._forward(sandbox, reader, writer, event, route, address, counts):
                return
            if sandbox.our_state is not h11.DONE or sandbox.their_state is not h11.DONE:
                return
            sandbox.start_next_cycle()

    async def _forward(
        self,
        sandbox: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        route: CredentialRoute,
        address: str,
        counts: list[int],
    ) -> bool:
        """Send `request` upstream with the credential, stream both bodies; False when the
        connection to the sandbox cannot go on."""
        loop = asyncio.get_running_loop()
        path = _repository_path(request.target)
        credential = await loop.run_in_executor(None, self.credential, route, path)
        headers = [(n, v) for n, v in request.headers if n.lower() not in _DROPPED]
        headers.insert(0, (b"Host", route.authority.encode()))
        if credential is not None:
            headers.append((b"Authorization", credential.header()))
        headers.append((b"Connection", b"close"))
        to_address, to_port = self._upstream_address or (address, route.port)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(
                    to_address,
                    to_port,
                    ssl=self.upstream_context(),
                    server_hostname=route.host,
                    limit=CHUNK,
                ),
                CONNECT_SECONDS,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            await _refuse(sandbox, writer, 502, f"{route.authority}: {exc}")
            return False
        upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
        try:
            await _send(
                upstream,
                up_writer,
                h11.Request(method=request.method, target=request.target, headers=headers),
            )
            if sandbox.client_is_waiting_for_100_continue:
                await _send(sandbox, writer, h11.InformationalResponse(status_code=100, headers=[]))
            while True:  # the request's body, streamed
                event = await _next_event(sandbox, reader)
                if isinstance(event, h11.Data):
                    counts[0] += len(event.data)
                    await _send(upstream, up_writer, event)
                elif isinstance(event, h11.EndOfMessage):
                    await _send(upstream, up_writer, h11.EndOfMessage())
                    break
                else:
                    return False
            status = 0
            while True:  # the response, streamed
                answer = await _next_event(upstream, up_reader)
                if isinstance(answer, h11.InformationalResponse):
                    continue
                if isinstance(answer, h11.Response):
                    if _head_size(answer) > HEAD_LIMIT:
                        return False
                    status = answer.status_code
                    if credential is not None:
                        # Judged before the sandbox sees any of the answer: a client that ends
                        # at once (its call, and this connection, with it) cannot outrun it.
                        await loop.run_in_executor(
                            None, self.judged, route, path, credential, status
                        )
                    kept = [(n, v) for n, v in answer.headers if n.lower() not in _DROPPED]
                    await _send(
                        sandbox,
                        writer,
                        h11.Response(status_code=status, headers=kept, reason=answer.reason),
                    )
                elif isinstance(answer, h11.Data):
                    counts[1] += len(answer.data)
                    await _send(sandbox, writer, answer)
                elif isinstance(answer, h11.EndOfMessage):
                    await _send(sandbox, writer, h11.EndOfMessage())
                    break
                else:
                    return False
        except (h11.ProtocolError, OSError, ssl.SSLError):
            return False
        finally:
            up_writer.transport.abort()
        return True


def _head_size(event: h11.Request | h11.Response) -> int:
    start = len(event.target) if isinstance(event, h11.Request) else len(event.reason)
    return start + sum(len(name) + len(value) + 4 for name, value in event.headers)


async def _next_event(connection: h11.Connection, reader: asyncio.StreamReader) -> object:
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(CHUNK))
            continue
        return event


async def _send(connection: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> None:
    data = connection.send(event)
    if data:
        writer.write(data)
        await writer.drain()


async def _refuse(
    connection: h11.Connection, writer: asyncio.StreamWriter, status: int, reason: str
) -> None:
    """Answer `status` with `reason` (the sandbox's connection then ends), if it can still be."""
    body = f"codecoder credential broker: {reason}\n".encode("utf-8", "replace")
    head = h11.Response(
        status_code=status,
        headers=[
            (b"Content-Type", b"text/plain"),
            (b"Content-Length", str(len(body)).encode()),
            (b"Connection", b"close"),
        ],
        reason=b"Refused",
    )
    with contextlib.suppress(h11.LocalProtocolError, OSError, RuntimeError):
        for event in (head, h11.Data(data=body), h11.EndOfMessage()):
            await _send(connection, writer, event)


def _system_bundle() -> bytes:
    for candidate in SYSTEM_BUNDLES:
        with contextlib.suppress(OSError):
            return read_regular_file(candidate)
    return b""
