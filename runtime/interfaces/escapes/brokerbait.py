"""The bwrap layer's bait for the credential broker (`environments.broker`): a routed host whose
upstream is an HTTPS server of the audit's own on loopback, and a bait home whose git keeps the
audit's token as that host's credential (the `store` helper).

The bait server reads each request as a lenient server would (percent-decoded, `..` resolved)
and, when one that is *not* git smart-HTTP arrives with a credential, answers with the
credential decoded: the token then reaches the sandbox's output, and the attempt has escaped.
Git requests are answered 404 with nothing of the credential in them."""

from __future__ import annotations

import base64
import datetime
import posixpath
import re
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from codecoder.environments.base import Connection
from codecoder.environments.broker import CredentialRoute
from codecoder.foundation.scratch import scratch_directory

ROUTED_HOST: Final = "git.codecoder-audit.test"
# What the layer's resolver answers for ROUTED_HOST: a public address the broker never connects
# to (its upstream is the bait server on loopback).
ROUTED_ADDRESS: Final = "93.184.216.34"
USER: Final = "audit"
_GIT: Final = re.compile(r"/.+/(info/refs|git-upload-pack|git-receive-pack)")


class BrokerBait:
    """The bait server, its certificate, and the route and home files that point at it."""

    def __init__(self, token: str, home: Path) -> None:
        self.directory = scratch_directory("codecoder-audit-broker-")
        self.ca = self.directory / "server.pem"
        key_file = self.directory / "server.key"
        _self_signed(self.ca, key_file)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca, key_file)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler())
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="codecoder-audit-broker", daemon=True
        )
        self._thread.start()
        self.route = CredentialRoute.parse(ROUTED_HOST)
        (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
        stored = home / ".git-credentials"
        stored.write_text(f"https://{USER}:{token}@{ROUTED_HOST}\n")
        stored.chmod(0o600)

    @staticmethod
    def resolver(host: str, port: int) -> list[str]:
        return [ROUTED_ADDRESS] if host == ROUTED_HOST else []

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()


class AdmittingGate:
    """The call's network gate in the audit: every listed host admitted, nothing recorded."""

    def admit(self, host: str, port: int) -> str | None:
        return None

    def record(self, connection: Connection) -> None:
        return None


def _handler() -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self) -> None:
            path = posixpath.normpath(urllib.parse.unquote(self.path.partition("?")[0]))
            auth = self.headers.get("Authorization") or ""
            body = b"not found\n"
            status = 404
            if auth and not _GIT.fullmatch(path):
                status = 200
                encoded = auth.partition(" ")[2]
                body = b"credential reached " + path.encode() + b": " + _decoded(encoded) + b"\n"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

    return Handler


def _decoded(encoded: str) -> bytes:
    try:
        return base64.b64decode(encoded)
    except ValueError:
        return encoded.encode()


def _self_signed(cert_file: Path, key_file: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ROUTED_HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ROUTED_HOST)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
