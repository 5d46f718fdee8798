"""The confine helper runs wherever codecoder is installed: a venv in the home directory, a clone
under /tmp, a path with spaces. Every sandbox hides the homes and the host's /tmp, so bubblewrap
runs the helper by descriptor (/proc/self/fd/N), and the probe that says whether @bwrap works
tries the very sandbox a call gets (a trial that saw more of the host would pass where every
call fails)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap import environment as environment_module
from codecoder.environments.bwrap import probe as probe_module
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.helper import confine_binary
from codecoder.foundation.ceiling import EnvironmentTag
from tests.environments.bwrap_support import need_bwrap


def _install_helper(monkeypatch: pytest.MonkeyPatch, helper: Path) -> None:
    monkeypatch.setattr(environment_module, "confine_binary", lambda: helper)
    monkeypatch.setattr(probe_module, "confine_binary", lambda: helper)
    monkeypatch.setattr(probe_module, "confine_problem", lambda: None)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home (under /tmp, which every sandbox replaces with its own) holding a venv
    whose path has a space in it, the confine helper installed there."""
    need_bwrap()
    home = tmp_path / "home"
    installed = home / "my projects" / "codecoder" / ".venv" / "codecoder" / "bwrap"
    installed.mkdir(parents=True)
    original = confine_binary()
    assert original is not None
    helper = installed / original.name
    shutil.copy2(original, helper)
    _install_helper(monkeypatch, helper)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def workspace(home: Path) -> Iterator[Path]:
    root = home / "my projects" / "app"
    root.mkdir(parents=True)
    yield root


def test_a_helper_installed_in_a_hidden_home_still_confines_the_command(
    home: Path, workspace: Path
) -> None:
    sandbox = BwrapEnvironment(workspace, environ={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    try:
        request = CommandRequest(cwd=workspace, script="echo hi", writable=True)
        cold = sandbox.run(request)
        warm = sandbox.run(request)  # the warm sandbox built after the first call
    finally:
        sandbox.close()
    assert (cold.exit_code, cold.stdout, cold.stderr) == (0, "hi\n", "")
    assert (warm.exit_code, warm.stdout) == (0, "hi\n")


def test_the_command_holds_no_descriptor_of_the_helper_and_sees_no_path_of_it(
    home: Path, workspace: Path
) -> None:
    sandbox = BwrapEnvironment(workspace, environ={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    script = "ls /proc/self/fd | wc -l; ls -A ~ | grep -c venv; readlink /proc/self/fd/* | sort"
    try:
        result = sandbox.run(CommandRequest(cwd=workspace, script=script, writable=True))
    finally:
        sandbox.close()
    # The shell's standard three and ls's own directory: nothing was inherited.
    assert result.stdout.splitlines()[:2] == ["4", "0"], result.stdout
    assert "confine" not in result.stdout


def test_the_probe_tries_the_sandbox_a_call_gets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in helper that succeeds only where the host's /tmp is hidden, as in a call: a
    trial that showed /tmp (as the probe's did) would call @bwrap unusable here."""
    need_bwrap()
    marker = tmp_path / "visible-only-on-the-host"
    marker.write_text("")
    stand_in = tmp_path / "confine"
    stand_in.write_text(f"#!/bin/sh\n[ ! -e '{marker}' ]\n")
    stand_in.chmod(0o755)
    _install_helper(monkeypatch, stand_in)
    assert probe_module.probe().tag is EnvironmentTag.BWRAP
    marker.unlink()
    stand_in.write_text("#!/bin/sh\nexit 1\n")
    found = probe_module.probe()
    assert found.tag is not EnvironmentTag.BWRAP
    assert "bubblewrap cannot create namespaces here" in found.reason
