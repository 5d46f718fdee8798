"""A real HTTPS git server on loopback for the credential broker's tests: `git http-backend`
behind a small threaded HTTPS server with its own self-signed certificate and Basic auth.

Every request's method, target and Authorization header are recorded (`GitServer.seen`); a
request without the expected credential is answered 401. Nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOST = "git.example.test"  # the routed name; the broker's test override reaches 127.0.0.1
PUBLIC = "93.184.216.34"  # what the tests' resolver says HOST is: never connected to
USER = "octo"
TOKEN = "ghp_brokerTestToken0123456789abcdefABCDEF"


@dataclass
class GitServer:
    root: Path  # GIT_PROJECT_ROOT: the bare repositories
    port: int
    ca: Path  # the server's self-signed certificate, to trust it
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def authority(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, name: str) -> str:
        """The repository's URL as the sandbox and the user's credential know it."""
        return f"https://{HOST}/{name}"

    def resolver(self, host: str, port: int) -> list[str]:
        assert host == HOST, host
        return [PUBLIC]

    def bare(self, name: str) -> Path:
        path = self.root / name
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
        return path


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(HOST), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = directory / "server.pem"
    key_file = directory / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def _handler(server_state: GitServer) -> type[BaseHTTPRequestHandler]:
    backend = "/usr/lib/git-core/git-http-backend"
    expected = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _serve(self) -> None:
            auth = self.headers.get("Authorization")
            server_state.seen.append((self.command, self.path, auth))
            body = self._body() if self.command == "POST" else b""
            if auth != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": str(server_state.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REMOTE_USER": USER,
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            }
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            done = subprocess.run([backend], input=body, capture_output=True, env=env, check=False)
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split(" ")[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitServer]:
    """A loopback HTTPS git server (needs git's http-backend)."""
    if not Path("/usr/lib/git-core/git-http-backend").exists():
        pytest.fail("git http-backend is missing (Debian's git package has it)")
    directory = tmp_path / "gitserver"
    (directory / "repos").mkdir(parents=True)
    cert, key = _self_signed(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    state = GitServer(directory / "repos", 0, cert)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        shutil.rmtree(directory, ignore_errors=True)


def user_home(tmp_path: Path, server: GitServer) -> Path:
    """A user's home whose git keeps the server's credential in ~/.git-credentials (the `store`
    helper), as a user who pushed once would have it."""
    home = tmp_path / "userhome"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = U\n\temail = u@example.com\n[credential]\n\thelper = store\n"
    )
    credentials = home / ".git-credentials"
    credentials.write_text(f"https://{USER}:{TOKEN}@{HOST}\n")
    credentials.chmod(0o600)
    return home
