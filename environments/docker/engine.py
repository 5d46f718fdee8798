"""The Docker engine: where it is, whether it runs on this machine, and its client.

Every docker SDK, requests and socket exception is mapped where it happens (`_engine_errors`):
callers see `SandboxUnavailable`, with what to do about it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import urllib.parse
from collections.abc import Iterator
from typing import Any, Final

import docker
import docker.errors
import requests.exceptions

from codecoder.runtime.kernel.errors import SandboxUnavailable

__all__ = ["ENGINE_TIMEOUT_SECONDS", "SETUP_HINT", "engine_is_local"]

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


def _client_from_env() -> Any:
    return docker.from_env(timeout=ENGINE_TIMEOUT_SECONDS)
