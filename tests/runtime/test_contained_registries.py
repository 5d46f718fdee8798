"""The real path (issue 34): a contained `pip download six` from PyPI and a contained `npm view
is-number version` from the npm registry, in real @bwrap through the real egress proxy, work
once their questions are answered for the project, and ask nothing in the next session.

These reach pypi.org, files.pythonhosted.org and registry.npmjs.org, the one exception to
"nothing leaves this machine": what they test is that path. Offline, they are skipped, except
in CI (`CI=true`), where they must run.

Where the machine's own DNS answers every name with a gateway's non-public address (these
development VMs answer 203.0.113.80, a documentation address, and route every connection
through their gateway), the proxy rightly refuses that address; the test then resolves the
registries to their CDNs' published public addresses instead, which the gateway routes as it
routes any other. Everywhere else the system's answers are used.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.hosts import address_refusal, system_resolver
from codecoder.permissions.prompt import AskRequest
from codecoder.session import Runtime
from tests.environments.bwrap_support import need_bwrap

COMMANDS = {
    "pip": ("python3 -m pip download --no-deps -q -d /tmp/wheels six", ("pypi.org",)),
    "npm": ("npm view is-number version", ("registry.npmjs.org",)),
}


# The registries' CDNs (Fastly for PyPI, Cloudflare for npm), for a machine whose DNS hides them:
# several edges each, which the proxy tries in turn, so that one edge moving does not fail CI.
FASTLY = ["151.101.0.223", "151.101.64.223", "151.101.128.223", "151.101.192.223"]
PUBLISHED = {
    "pypi.org": FASTLY,
    "files.pythonhosted.org": FASTLY,
    "registry.npmjs.org": ["104.16.0.35", "104.16.1.35", "104.16.2.35", "104.16.3.35"],
}


def resolver(host: str, port: int) -> list[str]:
    found = list(system_resolver(host, port))
    if all(address_refusal(ipaddress.ip_address(a)) is not None for a in found):
        return PUBLISHED.get(host, found)
    return found


@contextlib.contextmanager
def contained(project: Path, asker: Any) -> Iterator[Runtime]:
    with (
        BwrapEnvironment(project, resolver=resolver, warm=False) as env,
        Runtime(project, asker=asker, environments={EnvironmentTag.BWRAP: env}) as runtime,
    ):
        yield runtime


def reachable(host: str) -> bool:
    try:
        socket.create_connection((host, 443), timeout=5).close()
    except OSError:
        return False
    return True


def answer_for_the_project(request: AskRequest) -> Answer:
    """The tired human: the broadest answer for this project (never every project here)."""
    for answer in (Answer.PROJECT_ANY, Answer.PROJECT):
        if answer in request.choices:
            return answer
    raise AssertionError(f"no project answer offered for {request.key}")


def never_asked(request: AskRequest) -> Answer:
    raise AssertionError(f"the later session asked for {request.key}")


@pytest.mark.parametrize("client", sorted(COMMANDS))
def test_a_contained_registry_read_works_after_its_questions_and_asks_nothing_later(
    tmp_path: Path, client: str
) -> None:
    need_bwrap()
    command, hosts = COMMANDS[client]
    if shutil.which(client) is None:
        pytest.skip(f"{client} is not installed")
    if not all(reachable(host) for host in hosts):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{', '.join(hosts)} unreachable in CI, where this test must run")
        pytest.skip(f"offline: {', '.join(hosts)} unreachable")
    project = tmp_path / "project"
    project.mkdir()
    asked: list[str] = []

    def human(request: AskRequest) -> Answer:
        asked.append(request.key)
        return answer_for_the_project(request)

    with contained(project, human) as first:
        outcome = first.session().call("run_command", {"command": command, "timeout": 120})
    assert outcome.ok, outcome.to_json()
    assert asked[0].startswith("run_command:")
    assert [key for key in asked if key.startswith("network:")] == [f"network:{hosts[0]}"]
    if client == "npm":
        assert outcome.unwrap().data["stdout"].strip()[:1].isdigit()  # a version
    allowlist = json.loads((project / "codecoder.json").read_text())["allowlist"]
    assert f"network:{hosts[0]}" in allowlist and "run_command:**" in allowlist

    with contained(project, never_asked) as later:
        again = later.session().call("run_command", {"command": command, "timeout": 120})
    assert again.ok, again.to_json()
    assert again.decision is not None and again.decision.source is Source.PROJECT
