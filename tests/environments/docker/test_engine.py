"""How the engine is reached (`environments.docker.engine.transport`), as the docker CLI and SDK
read DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH: what `codecoder check` reports, and
the risks it warns about. (Against a real engine over TLS: test_remote.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from codecoder.environments.docker.engine import EngineTransport, transport


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return tmp_path


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, EngineTransport("unix:///var/run/docker.sock", True, "none")),
        (
            {"DOCKER_HOST": "ssh://builder@ci.example.com"},
            EngineTransport("ssh://builder@ci.example.com", False, "none"),
        ),
        (
            {"DOCKER_HOST": "tcp://10.0.0.5:2375"},
            EngineTransport("tcp://10.0.0.5:2375", False, "off"),
        ),
        (
            {"DOCKER_HOST": "tcp://10.0.0.5:2375", "DOCKER_TLS_VERIFY": ""},
            EngineTransport("tcp://10.0.0.5:2375", False, "off"),
        ),
        (
            {"DOCKER_HOST": "tcp://127.0.0.1:2375"},
            EngineTransport("tcp://127.0.0.1:2375", True, "off"),
        ),
    ],
)
def test_an_engine_without_tls_is_told_apart(
    environ: dict[str, str], expected: EngineTransport
) -> None:
    assert transport(environ) == expected


def test_tls_is_verified_with_the_ca_of_the_cert_path(certs: Path) -> None:
    environ = {
        "DOCKER_HOST": "tcp://10.0.0.5:2376",
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": str(certs),
    }
    assert transport(environ) == EngineTransport(
        "tcp://10.0.0.5:2376",
        False,
        "verified",
        ca=str(certs / "ca.pem"),
        client_certificate=str(certs / "cert.pem"),
    )
    assert transport(environ).risk is None
    assert transport(environ).describe() == (
        "tcp://10.0.0.5:2376 (another machine, TLS verified, client certificate)"
    )


def test_a_cert_path_without_verification_is_tls_that_trusts_any_engine(certs: Path) -> None:
    found = transport({"DOCKER_HOST": "tcp://10.0.0.5:2376", "DOCKER_CERT_PATH": str(certs)})

    assert (found.tls, found.ca, found.client_certificate) == (
        "unverified",
        None,
        str(certs / "cert.pem"),
    )
    assert found.risk == (
        "the engine at tcp://10.0.0.5:2376 is reached with TLS but its certificate is not "
        "verified (DOCKER_TLS_VERIFY is not set): another machine could pose as it"
    )


def test_plain_tcp_says_what_it_exposes_and_how_to_close_it() -> None:
    found = transport({"DOCKER_HOST": "tcp://10.0.0.5:2375"})

    assert found.risk == (
        "the engine at tcp://10.0.0.5:2375 is reached over TCP without TLS: whoever is on the "
        "way reads the workspace and drives the engine; set DOCKER_TLS_VERIFY=1 and "
        "DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem)"
    )
    assert found.describe() == "tcp://10.0.0.5:2375 (another machine, TLS off)"
    assert transport({}).describe() == "unix:///var/run/docker.sock (this machine, socket)"
