"""The Docker engine: where it is, whether it runs on this machine, how it is reached (a Unix
socket, SSH, or TCP with or without TLS), and its client.

The client is the docker SDK's, configured as the docker CLI is (DOCKER_HOST, DOCKER_TLS_VERIFY,
DOCKER_CERT_PATH), with one difference: an engine reached with TLS is verified with the CA in
DOCKER_CERT_PATH even where REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE names another bundle, which the
SDK's HTTP library would otherwise prefer (and no engine certificate would then verify).

Every docker SDK, requests and socket exception is mapped where it happens (`_engine_errors`):
callers see `SandboxUnavailable`, with what to do about it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import docker
import docker.errors
import docker.utils
import requests.exceptions

from codecoder.runtime.kernel.errors import SandboxUnavailable

__all__ = [
    "ENGINE_TIMEOUT_SECONDS",
    "SETUP_HINT",
    "EngineTransport",
    "engine_is_local",
    "transport",
]

ENGINE_TIMEOUT_SECONDS: Final = 60

SETUP_HINT: Final = (
    "run scripts/docker-setup.sh as root (it installs docker.io, starts dockerd and builds "
    "the codecoder-sandbox image)"
)


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def engine_is_local(address: str | None = None) -> bool:
    """Whether the engine at `address` (DOCKER_HOST by default) runs on this machine, so that it
    can bind-mount this machine's directories: a Unix socket, a named pipe, or TCP to loopback."""
    parsed = urllib.parse.urlsplit(address or _engine_address())
    if parsed.scheme in ("unix", "npipe", ""):
        return True
    if parsed.scheme in ("tcp", "http", "https"):
        try:
            return ipaddress.ip_address(parsed.hostname or "").is_loopback
        except ValueError:
            return parsed.hostname == "localhost"
    return False  # ssh:// and anything else reaches another machine


@contextlib.contextmanager
def _engine_errors(action: str) -> Iterator[None]:
    """Map everything the docker SDK and its transport raise to `SandboxUnavailable`."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise SandboxUnavailable(
            f"cannot {action}: the image is missing ({_explain(exc)}); {SETUP_HINT}, "
            "or `docker build -t codecoder-sandbox .` in the codecoder repository"
        ) from exc
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(
            f"cannot {action}: the Docker engine answered {_explain(exc)}"
        ) from exc
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise SandboxUnavailable(
            f"cannot {action}: no Docker engine answers at {_engine_address()} "
            f"({_explain(exc)}); start one (`dockerd &` as root) or {SETUP_HINT}"
        ) from exc


def _explain(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc).strip() or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "…"


@dataclass(frozen=True, slots=True)
class EngineTransport:
    """How the engine at DOCKER_HOST is reached, as `codecoder check` reports it.

    `tls` is "verified" (TLS, the engine's certificate checked against `ca`), "unverified" (TLS,
    any certificate accepted), "off" (plain TCP: whoever is on the way reads the workspace and
    drives the engine) or "none" (a Unix socket or SSH, which need no TLS)."""

    address: str
    local: bool
    tls: Literal["verified", "unverified", "off", "none"]
    ca: str | None = None
    client_certificate: str | None = None

    @property
    def risk(self) -> str | None:
        """Why reaching this engine this way exposes the workspace, or None."""
        if self.tls == "off":
            return (
                f"the engine at {self.address} is reached over TCP without TLS: whoever is on "
                "the way reads the workspace and drives the engine; set DOCKER_TLS_VERIFY=1 and "
                "DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem)"
            )
        if self.tls == "unverified":
            return (
                f"the engine at {self.address} is reached with TLS but its certificate is not "
                "verified (DOCKER_TLS_VERIFY is not set): another machine could pose as it"
            )
        return None

    def describe(self) -> str:
        where = "this machine" if self.local else "another machine"
        if self.tls == "none":
            how = "ssh" if self.address.startswith("ssh://") else "socket"
        elif self.tls == "verified":
            how = "TLS verified" + (", client certificate" if self.client_certificate else "")
        else:
            how = f"TLS {self.tls}"
        return f"{self.address} ({where}, {how})"

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "local": self.local,
            "tls": self.tls,
            "ca": self.ca,
            "client_certificate": self.client_certificate,
        }


def transport(environ: dict[str, str] | None = None) -> EngineTransport:
    """How the engine is reached, as the docker SDK (and CLI) read DOCKER_HOST,
    DOCKER_TLS_VERIFY and DOCKER_CERT_PATH."""
    env = os.environ if environ is None else environ
    address = env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    local = engine_is_local(address)
    scheme = urllib.parse.urlsplit(address).scheme
    if scheme not in ("tcp", "http", "https"):
        return EngineTransport(address, local, "none")
    verify = env.get("DOCKER_TLS_VERIFY")
    verified = verify is not None and verify != ""
    cert_path = env.get("DOCKER_CERT_PATH") or None
    if not (cert_path or verified) and scheme != "https":
        return EngineTransport(address, local, "off")
    folder = cert_path or os.path.join(os.path.expanduser("~"), ".docker")
    certificate = os.path.join(folder, "cert.pem")
    return EngineTransport(
        address,
        local,
        "verified" if verified else "unverified",
        ca=os.path.join(folder, "ca.pem") if verified else None,
        client_certificate=certificate if os.path.exists(certificate) else None,
    )


class _EngineAPI(docker.APIClient):  # type: ignore[misc]  # the SDK is untyped
    """The SDK's client, verifying a TLS engine as DOCKER_TLS_VERIFY and DOCKER_CERT_PATH say,
    whatever CA bundle the environment names (see the module docstring)."""

    def __init__(self, *, tls_configured: bool, **settings: Any) -> None:
        self.tls_configured = tls_configured  # set first: the SDK's __init__ asks the version
        super().__init__(**settings)

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if self.tls_configured:  # `verify` is the engine's ca.pem, or False (not verified)
            settings["verify"] = self.verify
        return settings


def _client_from_env() -> Any:
    """A client for the engine at DOCKER_HOST, as `docker.from_env` makes it."""
    settings = docker.utils.kwargs_from_env()
    client = docker.DockerClient.__new__(docker.DockerClient)  # what its __init__ does, with
    client.api = _EngineAPI(  # this client instead of the SDK's
        tls_configured=settings.get("tls") is not None,
        timeout=ENGINE_TIMEOUT_SECONDS,
        **settings,
    )
    return client
