"""Fixtures shared by the tests: a project directory, a runtime on mock environments, askers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.trust import record_trust
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.permissions.prompt import AskRequest
from codecoder.session import Runtime


class RecordingAsker:
    """Answers prompts from a list (then Deny) and keeps every request it was shown."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[AskRequest] = []

    def __call__(self, request: AskRequest) -> Answer:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else Answer.DENY


def echo_handler(request: CommandRequest) -> CommandResult:
    shown = " ".join(request.argv) if request.argv is not None else f"bash: {request.script}"
    return CommandResult(exit_code=0, stdout=shown + "\n", stderr="", duration=0.001)


@pytest.fixture(autouse=True)
def private_state_and_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own state directory (trust records, audit logs, notes) and an empty
    user configuration: nothing of the machine's own leaks in, nothing of a test leaks out."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    # Commands run as processes evaluate in-process: a test that wants the decision server
    # (tests/runtime/interfaces/test_forkserver.py) turns it on and stops the server it started.
    monkeypatch.setenv("CODECODER_DAEMON", "0")
    # Nor does a test start a warm pool's server (its own state directory would give it one
    # each): the tests of the pool (tests/environments/docker/test_pool.py) turn it on.
    monkeypatch.setenv("CODECODER_POOL", "0")
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def write_config(root: Path, config: dict[str, Any] | str, *, trusted: bool = True) -> Path:
    """Write the project's codecoder.json and, unless `trusted=False`, trust it as the human
    would with `codecoder trust` (a test about what a file grants is not about trust)."""
    path = root / "codecoder.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config, indent=2) + "\n")
    if trusted:
        trust_project(root)
    return path


def trust_project(root: Path) -> None:
    """Record the project's codecoder.json, as it is now, as trusted."""
    record_trust(root.resolve(), (root / "codecoder.json").read_bytes(), ())


@pytest.fixture
def make_runtime(project: Path) -> Callable[..., Runtime]:
    """A runtime whose @shell, @bwrap (where commands run by default) and @docker are mock
    environments that echo what they would run."""

    def make(asker: Any = None, **kw: Any) -> Runtime:
        environments = kw.pop("environments", None) or {
            EnvironmentTag.SHELL: MockEnvironment(echo_handler, EnvironmentTag.SHELL),
            EnvironmentTag.BWRAP: MockEnvironment(echo_handler, EnvironmentTag.BWRAP),
            EnvironmentTag.DOCKER: MockEnvironment(echo_handler, EnvironmentTag.DOCKER),
        }
        return Runtime(project, asker=asker or RecordingAsker(), environments=environments, **kw)

    return make
