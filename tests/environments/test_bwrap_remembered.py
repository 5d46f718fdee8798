"""What a contained call learns of the machine is remembered between processes
(`environments.bwrap.remembered`): a fresh process's contained call spawns bubblewrap and the
command only, counted with strace; what it remembers is believed only under the key it was
found under, never a fallback, and is forgotten when a sandbox fails to build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap import probe, remembered
from codecoder.environments.bwrap.environment import BwrapEnvironment, _user_identity
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import SandboxUnavailable
from codecoder.foundation.state import state_directory
from tests.environments.bwrap_support import need_bwrap
from tests.environments.bwrap_support import repo as repo  # a fixture

pytestmark = pytest.mark.bwrap


@pytest.fixture(autouse=True)
def state_directory_made() -> None:
    """A user who has run codecoder before: its state directory exists (facts are remembered
    only there, `test_nothing_is_remembered_where_no_state_directory_exists_yet`)."""
    state_directory().mkdir(parents=True, exist_ok=True)


STRACE = ("strace", "-f", "-qq", "-e", "trace=execve", "-e", "signal=none")
CALL = ("call", "run_command", "--allow", "run_command:ls", "--non-interactive", "--", "ls")


def programs_run(trace: Path) -> list[str]:
    """The programs an `strace -f -e trace=execve` log shows started: successful execs only,
    an exec interrupted by another process's line (`<unfinished ...>`) taken from its end."""
    found = []
    pending: dict[str, str] = {}
    for line in trace.read_text().splitlines():
        pid = line.split(" ", 1)[0]
        if 'execve("' in line:
            path = line.split('execve("', 1)[1].split('"', 1)[0]
            # bubblewrap runs the confine helper through the descriptor it was passed.
            program = "confine" if path.startswith("/proc/self/fd/") else os.path.basename(path)
            if line.endswith("<unfinished ...>"):
                pending[pid] = program
                continue
        elif "<... execve resumed>" in line and pid in pending:
            program = pending.pop(pid)
        else:
            continue
        if line.rstrip().endswith("= 0"):
            found.append(program)
    return found


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_a_fresh_process_spawns_bubblewrap_and_the_command_only(tmp_path: Path) -> None:
    need_bwrap()
    shutil.rmtree(state_directory() / "machine", ignore_errors=True)  # need_bwrap's own probe
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {**os.environ, "CODECODER_DAEMON": "0"}
    env.pop("CI", None)
    seen = []
    for attempt in ("first", "second"):
        trace = tmp_path / f"{attempt}.trace"
        done = subprocess.run(
            [*STRACE, "-o", str(trace), sys.executable, "-m", "codecoder", *CALL],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        seen.append(programs_run(trace)[1:])  # after the interpreter itself
    # The first process found out (bwrap --version, a trial sandbox, git config for the
    # sandbox's ~/.gitconfig); the second knew.
    assert seen[0].count("bwrap") == 3 and seen[0].count("git") == 2
    assert seen[1] == ["bwrap", "confine", "ls"]


def test_what_is_remembered_is_believed_only_under_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    need_bwrap()
    probed: list[int] = []
    real_probe = probe.probe

    def counted(bwrap: str | None = None) -> probe.CommandSandbox:
        probed.append(1)
        return real_probe(bwrap)

    monkeypatch.setattr(probe, "probe", counted)
    fresh = probe.command_sandbox.__wrapped__  # what a new process does
    assert fresh().tag is EnvironmentTag.BWRAP and len(probed) == 1
    assert fresh().tag is EnvironmentTag.BWRAP and len(probed) == 1  # remembered
    stored = state_directory() / "machine" / "command-sandbox.json"
    kept = json.loads(stored.read_text())
    kept["key"]["helper"][1] = "0" * 64  # the confine helper changed since
    stored.write_text(json.dumps(kept))
    assert fresh().tag is EnvironmentTag.BWRAP and len(probed) == 2
    assert fresh().tag is EnvironmentTag.BWRAP and len(probed) == 2


def test_a_fallback_is_never_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    need_bwrap()
    fallback = probe.CommandSandbox(EnvironmentTag.SHELL, "bubblewrap refused (a test)")
    monkeypatch.setattr(probe, "probe", lambda bwrap=None: fallback)
    assert probe.command_sandbox.__wrapped__() == fallback
    assert not (state_directory() / "machine" / "command-sandbox.json").exists()


def test_a_sandbox_that_fails_to_build_makes_it_forgotten(repo: Path) -> None:
    need_bwrap()
    assert probe.command_sandbox.__wrapped__().tag is EnvironmentTag.BWRAP
    key = probe.machine_key()
    assert key is not None and remembered.recall("command-sandbox", key) is not None
    refusing = repo.parent / "refusing-bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed' >&2\nexit 1\n")
    refusing.chmod(0o755)
    env = BwrapEnvironment(repo, bwrap=str(refusing))
    try:
        with pytest.raises(SandboxUnavailable):
            env.run(CommandRequest(cwd=repo, argv=("true",)))
    finally:
        env.close()
    assert remembered.recall("command-sandbox", key) is None


def test_the_users_git_identity_follows_their_gitconfig(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    environ = {"HOME": str(home), "PATH": os.environ["PATH"]}
    (home / ".gitconfig").write_text("[user]\n\tname = Ada\n\temail = ada@example.com\n")
    assert _user_identity(environ) == {"name": '"Ada"', "email": '"ada@example.com"'}
    (home / ".gitconfig").write_text("[user]\n\tname = Grace Hopper\n")
    assert _user_identity(environ) == {"name": '"Grace Hopper"', "email": None}
    # The XDG file too; a change of size or time is a change even when the name stays.
    (home / ".gitconfig").unlink()
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "config").write_text("[user]\n\tname = Xdg\n")
    assert _user_identity(environ) == {"name": '"Xdg"', "email": None}


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
def test_a_process_confined_otherwise_does_not_believe_what_another_found() -> None:
    # A client without the capabilities (or with no_new_privs, another namespace, another
    # seccomp filter) may be unable to make the namespaces its parent could.
    need_bwrap()
    show = "import json; from codecoder.environments.bwrap.probe import machine_key as k; "
    show += "print(json.dumps(k()))"
    plain = subprocess.run(
        [sys.executable, "-c", show], capture_output=True, text=True, check=True
    ).stdout
    confined = subprocess.run(
        ["setpriv", "--no-new-privs", "--bounding-set", "-all", sys.executable, "-c", show],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(plain)["process"] != json.loads(confined)["process"]
    assert {k: v for k, v in json.loads(plain).items() if k != "process"} == {
        k: v for k, v in json.loads(confined).items() if k != "process"
    }


def test_nothing_is_remembered_where_no_state_directory_exists_yet() -> None:
    # Made in the middle of a session, it would be a new path for sandboxes to hide, and every
    # warm sandbox built before would be thrown away (the audit log makes it at the first call).
    shutil.rmtree(state_directory())
    remembered.remember("a-fact", {"key": 1}, "value")
    assert not state_directory().exists()
    state_directory().mkdir(parents=True)
    remembered.remember("a-fact", {"key": 1}, "value")
    assert remembered.recall("a-fact", {"key": 1}) == "value"
    assert remembered.recall("a-fact", {"key": 2}) is None
