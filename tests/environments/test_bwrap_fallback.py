"""Where bubblewrap cannot create namespaces: Landlock alone confines commands (@confined), and
only where neither works do commands run on the host (@shell), said once and in `check`.

"Unprivileged user namespaces turned off" is made real for one process tree: a user namespace
whose `max_user_namespaces` is 0 (a limit that holds inside it only), in which bubblewrap fails
exactly as it does on a machine with them off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap import probe as probe_module
from codecoder.environments.bwrap.confined import ConfinedEnvironment
from codecoder.environments.bwrap.probe import CommandSandbox, probe
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import CeilingViolation, ExecutionFailed
from codecoder.sandboxes.landlock.worker import landlock_abi
from codecoder.session import Runtime
from tests.conftest import RecordingAsker
from tests.environments.bwrap_support import git, need_bwrap

TOKEN = "ESCAPED-51c2"


def need_landlock() -> None:
    if landlock_abi() < 4:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true, so the @confined tests must run, but Landlock ABI < 4")
        pytest.skip("this kernel has no Landlock ABI 4")


def without_user_namespaces(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `argv` where no new user namespace can be made (as with them turned off)."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is missing")
    limit = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", limit, "sh", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_user_namespaces_commands_fall_back_to_landlock_said_in_check(
    project: Path,
) -> None:
    need_bwrap()
    need_landlock()
    checked = without_user_namespaces(
        sys.executable, "-m", "codecoder", "check", "--json", "--project", str(project),
        cwd=project,
    )  # fmt: skip
    commands = json.loads(checked.stdout)["commands"]
    assert commands["environment"] == "@confined"
    assert commands["ceiling"] == "AlwaysThisSession"
    assert "bubblewrap cannot create namespaces here" in commands["why"]
    assert "Landlock ABI" in commands["why"]


def test_without_user_namespaces_a_command_runs_confined_and_says_so_once(project: Path) -> None:
    need_bwrap()
    need_landlock()
    (project / "f.txt").write_text("inside\n")
    program = f"""
import sys
from codecoder.foundation.decision import Answer
from codecoder.session import Runtime
runtime = Runtime(sys.argv[1], asker=lambda request: Answer.SESSION)
with runtime, runtime.session() as session:
    for command in ("cat f.txt", "cat f.txt", "touch /etc/{TOKEN}"):
        outcome = session.call("run_command", {{"command": command}})
        print(outcome.decision.environment, outcome.unwrap().data["exit_code"])
"""
    done = without_user_namespaces(sys.executable, "-c", program, str(project), cwd=project)
    assert done.stdout.splitlines() == ["@confined 0", "@confined 0", "@confined 1"], done.stderr
    notices = [line for line in done.stderr.splitlines() if line.startswith("codecoder:")]
    assert len(notices) == 1
    assert notices[0].startswith("codecoder: commands run in @confined instead of @bwrap:")
    assert not Path(f"/etc/{TOKEN}").exists()


def test_where_neither_works_commands_run_on_the_host_said_once(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(probe_module, "landlock_abi", lambda: 0)
    found = probe(bwrap="/nonexistent/bwrap")
    assert found.tag is EnvironmentTag.SHELL
    assert found.reason == (
        "commands run on the host, unconfined: bubblewrap cannot create namespaces here "
        "([Errno 2] No such file or directory: '/nonexistent/bwrap'), and this kernel has no "
        "Landlock"
    )
    monkeypatch.setattr(probe_module, "command_sandbox", lambda: found)
    runtime = Runtime(project, asker=RecordingAsker())
    assert runtime.environment_of("run_command") is EnvironmentTag.SHELL
    assert runtime.environment_of("commit") is EnvironmentTag.SHELL
    said = capsys.readouterr().err
    assert said.count("codecoder: commands run in @shell instead of @bwrap") <= 1


def test_an_explicit_binding_is_kept_where_bubblewrap_cannot_run(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import write_config

    monkeypatch.setattr(
        probe_module,
        "command_sandbox",
        lambda: CommandSandbox(EnvironmentTag.SHELL, "no bubblewrap"),
    )
    write_config(project, {"environments": {"run_command": "@bwrap"}})
    runtime = Runtime(project, asker=RecordingAsker())
    assert runtime.environment_of("run_command") is EnvironmentTag.BWRAP
    write_config(project, {"environments": {"run_command": "@shell"}})
    runtime.reload()
    assert runtime.environment_of("run_command") is EnvironmentTag.SHELL


def test_a_project_grant_is_refused_in_confined_for_the_session_ceiling(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codecoder.environments.mock import MockEnvironment
    from tests.conftest import echo_handler

    monkeypatch.setattr(
        probe_module,
        "command_sandbox",
        lambda: CommandSandbox(EnvironmentTag.CONFINED, "no namespaces"),
    )
    runtime = Runtime(
        project,
        asker=RecordingAsker(Answer.PROJECT),
        environments={EnvironmentTag.CONFINED: MockEnvironment(echo_handler)},
    )
    with runtime.session() as session:
        outcome = session.call("run_command", {"command": "ls"})
    assert isinstance(outcome.error, CeilingViolation)
    assert not (project / "codecoder.json").exists()


# -- @confined itself ----------------------------------------------------------------------------


def test_confined_reads_only_the_system_the_workspace_and_the_toolchains(
    project: Path, tmp_path: Path
) -> None:
    need_landlock()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(TOKEN)
    (project / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside.txt"
    outside.write_text(TOKEN)
    env = ConfinedEnvironment(project, environ={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    result = env.run(
        CommandRequest(
            cwd=project,
            script=f"cat f.txt; cat {home}/.ssh/id_rsa {outside} /tmp/* 2>/dev/null; echo $HOME",
        )
    )
    assert result.stdout.startswith("inside\n")
    assert TOKEN not in result.stdout
    assert str(home) not in result.stdout  # a private home instead


def test_confined_writes_only_beneath_the_workspace_and_its_private_directories(
    project: Path, tmp_path: Path
) -> None:
    need_landlock()
    env = ConfinedEnvironment(project)
    script = f"""
        echo ok > made.txt && echo wrote-workspace
        echo x > {tmp_path}/outside 2>/dev/null && echo {TOKEN}
        echo x > /tmp/codecoder-{TOKEN} 2>/dev/null && echo {TOKEN}
        echo x > "$TMPDIR/t" && echo wrote-tmpdir
        echo x > ~/h && echo wrote-home
        echo x > /dev/null && echo devnull
    """
    writable = env.run(CommandRequest(cwd=project, script=script, writable=True))
    read_only = env.run(CommandRequest(cwd=project, script="echo x > ro.txt", writable=False))
    assert writable.stdout.split() == ["wrote-workspace", "wrote-tmpdir", "wrote-home", "devnull"]
    assert (project / "made.txt").read_text() == "ok\n"
    assert not (tmp_path / "outside").exists()
    assert read_only.exit_code != 0 and not (project / "ro.txt").exists()


def test_confined_has_no_network_and_no_unix_sockets(project: Path) -> None:
    need_landlock()
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    env = ConfinedEnvironment(project)
    program = f"""
import socket
tries = (
    (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", {port})),
    (socket.AF_INET6, socket.SOCK_STREAM, ("::1", {port})),
    (socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 53)),
    (socket.AF_UNIX, socket.SOCK_STREAM, "/run/x"),
)
for family, kind, address in tries:
    try:
        socket.socket(family, kind).connect(address)
        print("{TOKEN}")
    except OSError as exc:
        print(exc.strerror)
"""
    try:
        result = env.run(CommandRequest(cwd=project, argv=("/usr/bin/python3", "-c", program)))
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
    assert result.stdout.splitlines() == ["Operation not permitted"] * 4


def test_confined_quarantines_a_protected_path_a_call_creates(project: Path) -> None:
    need_landlock()
    git(project, "init", "-q")
    env = ConfinedEnvironment(project)
    with pytest.raises(ExecutionFailed, match="sandboxed tools may never create"):
        env.run(CommandRequest(cwd=project, script="mkdir -p sub/.git", writable=True))
    assert not (project / "sub" / ".git").exists()


def test_confined_says_how_to_make_a_new_repository_when_it_quarantines_one(
    project: Path,
) -> None:
    need_landlock()
    env = ConfinedEnvironment(project)
    with pytest.raises(ExecutionFailed) as failed:
        env.run(CommandRequest(cwd=project, argv=("git", "init", "-q", "app"), writable=True))
    assert str(failed.value).endswith(
        'choose an "on the host" answer when its question offers one, or bind run_command to '
        '@shell in codecoder.json ("environments": {"run_command": "@shell"})'
    )
    assert "A new git repository (`git init`, `git clone`) cannot be made" in str(failed.value)
    assert not (project / "app" / ".git").exists()


def test_one_failed_trial_does_not_make_a_process_fall_back(tmp_path: Path) -> None:
    """bubblewrap failing once (the host's mounts changing under it, a planned private entry
    gone) is tried again, as every call's sandbox is: the process stays in @bwrap."""
    need_bwrap()
    real = probe_module.bwrap_binary()
    assert real is not None
    failed_once = tmp_path / "failed-once"
    flaky = tmp_path / "bwrap"
    flaky.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" != --version ] && [ ! -e {failed_once} ]; then\n'
        f"  : > {failed_once}\n"
        '  echo "bwrap: Can\'t remount readonly on /newroot/var/lib/x: No such file" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    flaky.chmod(0o755)
    found = probe(bwrap=str(flaky))
    assert failed_once.exists()
    assert found.tag is EnvironmentTag.BWRAP, found.reason
