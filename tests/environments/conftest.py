"""Fixtures for the environment tests: a Docker engine or a skip, a second engine that is
"elsewhere" (`remote_engine`), and the canary service.

Tests marked `docker` need a running engine and the `codecoder-sandbox` image. Without them
they are skipped on a developer machine (with the command that fixes it), but they FAIL when
`CI=true`: in CI a missing engine is a broken pipeline, not a reason to pass.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The image the docker tests use; another tag while an engineer tries a changed agent.
SANDBOX_IMAGE = os.environ.get("CODECODER_TEST_SANDBOX_IMAGE", "codecoder-sandbox")
CANARY_IMAGE = "codecoder-canary:test"
CANARY_PAGE = b"canary-ok\n"
STATIC_BUSYBOX = Path("/bin/busybox")
SETUP = "run scripts/docker-setup.sh as root"
REPO = Path(__file__).resolve().parents[2]
REMOTE_SCRIPT = REPO / "scripts" / "remote-engine.sh"
REMOTE_ROOT = Path(os.environ.get("CODECODER_REMOTE_ROOT", "/var/lib/codecoder-remote-engine"))


def _cannot_run(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, so Docker tests must run, but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A docker SDK client for a reachable engine that has the sandbox image."""
    import docker

    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        _cannot_run(f"no Docker engine answers ({exc}); {SETUP}")
    try:
        client.images.get(SANDBOX_IMAGE)
    except docker.errors.ImageNotFound:
        _cannot_run(f"the {SANDBOX_IMAGE} image is missing; {SETUP}")
    yield client
    client.close()


@dataclass(frozen=True)
class RemoteEngine:
    """The second engine (scripts/remote-engine.sh): its own data root, mount, network and PID
    namespaces, reached over TCP with TLS. `environ` is what points a client at it
    (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH); `pid` is its dockerd here (its view of
    the file system is /proc/PID/root)."""

    environ: dict[str, str]
    client: Any
    pid: int

    @property
    def address(self) -> str:
        return self.environ["DOCKER_HOST"]

    @contextlib.contextmanager
    def as_docker_host(self) -> Iterator[None]:
        """Point every client made meanwhile (codecoder's, the SDK's) at this engine."""
        saved = {name: os.environ.get(name) for name in self.environ}
        os.environ.update(self.environ)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture(scope="session")
def remote_engine() -> Iterator[RemoteEngine]:
    """The second engine, started (or kept) by scripts/remote-engine.sh, which also copies this
    engine's sandbox image into it when the two differ."""
    if os.geteuid() != 0:
        _cannot_run("the second engine needs root (namespaces, dockerd)")
    proc = subprocess.run(
        ["bash", str(REMOTE_SCRIPT), "start"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        _cannot_run(f"scripts/remote-engine.sh start failed: {proc.stdout}{proc.stderr}")
    environ = dict(
        line.split("=", 1) for line in (REMOTE_ROOT / "env").read_text().splitlines() if line
    )
    from codecoder.environments.docker.engine import _client_from_env

    saved = dict(os.environ)
    os.environ.update(environ)
    try:
        client = _client_from_env()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    yield RemoteEngine(environ, client, int((REMOTE_ROOT / "engine.pid").read_text()))
    client.close()


@pytest.fixture(autouse=True)
def _docker_tests_need_an_engine(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("docker_engine")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace owned by the uid the sandbox runs as, like a user's own project."""
    root = tmp_path / "workspace"
    root.mkdir()
    root.chmod(0o755)
    os.chown(root, 10001, 10001)
    return root


# --- the canary service (pytest-docker) --------------------------------------------------------


@pytest.fixture(scope="session")
def canary_image(docker_engine: Any) -> str:
    """Build the canary image offline: FROM scratch, a static busybox, one page."""
    if not STATIC_BUSYBOX.exists():
        _cannot_run(f"{STATIC_BUSYBOX} is missing (apt-get install busybox-static); {SETUP}")
    dockerfile = b"""FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY index.html /www/index.html
USER 65534:65534
EXPOSE 8080
CMD ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"]
"""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", dockerfile, 0o644),
            ("busybox", STATIC_BUSYBOX.read_bytes(), 0o755),
            ("index.html", CANARY_PAGE, 0o644),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    docker_engine.images.build(fileobj=context, custom_context=True, tag=CANARY_IMAGE, rm=True)
    return CANARY_IMAGE


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(Path(__file__).with_name("docker-compose.yml"))


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return "docker-compose"  # Compose v1, from Debian's docker-compose package


@pytest.fixture(scope="session")
def docker_setup(canary_image: str) -> list[str]:
    # The image is built by `canary_image` (compose v1 has no `--wait`, and `--build` would
    # need the busybox binary inside the build context).
    return ["up -d"]


def fetch(url: str, timeout: float = 2.0) -> bytes | None:
    """The body at `url`, or None when it cannot be reached."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read())
    except OSError:
        return None


@dataclass(frozen=True)
class Canary:
    """Where the canary answers: the published port on the host, and its bridge address."""

    host_url: str
    bridge_ip: str
    bridge_port: int
    gateway_ip: str
    host_port: int
    page: bytes = CANARY_PAGE

    @staticmethod
    def fetch(url: str) -> bytes | None:
        return fetch(url)


@pytest.fixture(scope="session")
def canary(
    docker_engine: Any, docker_ip: str, docker_services: Any, docker_compose_project_name: str
) -> Canary:
    port = docker_services.port_for("canary", 8080)
    url = f"http://{docker_ip}:{port}/"
    docker_services.wait_until_responsive(
        check=lambda: fetch(url) == CANARY_PAGE, timeout=30.0, pause=0.2
    )
    (container,) = docker_engine.containers.list(
        filters={
            "label": [
                f"com.docker.compose.project={docker_compose_project_name}",
                "com.docker.compose.service=canary",
            ]
        }
    )
    (network,) = container.attrs["NetworkSettings"]["Networks"].values()
    deadline = time.monotonic() + 10
    while fetch(f"http://{network['IPAddress']}:8080/") != CANARY_PAGE:
        assert time.monotonic() < deadline, "canary not reachable on its bridge address"
        time.sleep(0.2)
    return Canary(url, network["IPAddress"], 8080, network["Gateway"], port)
