"""What the host keeps private stays private in the sandbox, even when codecoder runs as root
(environments.privatefiles). Before, a contained command run as root read every root-only file
of the machine (`/var/lib/codecoder-remote-engine/client/key.pem`): the file system is bound
read-only whole and root's uid owns those files inside too; only a fixed list (/etc/shadow,
SSH host keys) was covered. Each attack plants a private file or directory where no list names
it, shows the host reads it (the control), and reads it from a contained command. Real
bubblewrap, real files, as root."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.confined import ConfinedEnvironment
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.privatefiles import PrivateView, machine_private_files
from tests.environments.bwrap_support import need_bwrap, repo

__all__ = ["repo"]  # fixtures


@dataclass
class Planted:
    token: str
    file: Path  # /etc/codecoder-test-secret-<random>, 0600
    directory: Path  # /var/lib/codecoder-test-<random>, 0700, a 0644 key.pem inside
    deep: Path  # /usr/local/share/codecoder-test-<random>/a/b: public, its key made later


# What `planted` makes in /etc and /var/lib is hidden by every sandbox of the machine built
# meanwhile, and its removal fails those being built (a tmpfs over a directory gone): the
# tests that take it run while no other test does.
ALONE = pytest.mark.serial(
    reason="plants private files in /etc and /var/lib, which every sandbox hides"
)


@pytest.fixture
def planted() -> Iterator[Planted]:
    if os.geteuid() != 0:
        pytest.skip("the attack is on a runtime running as root")
    token = f"codecoder-private-{secrets.token_hex(8)}"
    suffix = secrets.token_hex(6)
    file = Path(f"/etc/codecoder-test-secret-{suffix}")
    directory = Path(f"/var/lib/codecoder-test-{suffix}")
    deep_top = Path(f"/usr/local/share/codecoder-test-{suffix}")
    try:
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, f"{token}\n".encode())
        os.close(fd)
        directory.mkdir(mode=0o700)
        (directory / "key.pem").write_text(f"-----BEGIN PRIVATE KEY-----\n{token}\n")
        (directory / "key.pem").chmod(0o644)
        (deep_top / "a" / "b").mkdir(parents=True)
        (deep_top / "a" / "b" / "readme").write_text("public\n")
        yield Planted(token, file, directory, deep_top / "a" / "b")
    finally:
        file.unlink(missing_ok=True)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(deep_top, ignore_errors=True)


def contained(workspace: Path, script: str) -> str:
    need_bwrap()
    env = BwrapEnvironment(workspace, warm=False)
    try:
        result = env.run(CommandRequest(cwd=workspace, script=script, writable=False))
    finally:
        env.close()
    return result.stdout + result.stderr


@ALONE
def test_the_control_the_host_reads_what_it_planted(planted: Planted) -> None:
    assert planted.token in planted.file.read_text()
    assert planted.token in (planted.directory / "key.pem").read_text()
    assert not planted.file.stat().st_mode & 0o044
    assert not planted.directory.stat().st_mode & 0o055


@ALONE
def test_a_root_only_file_and_directory_no_list_names_are_not_readable_inside(
    repo: Path, planted: Planted
) -> None:
    said = contained(
        repo,
        f"cat {planted.file}; cat {planted.directory}/key.pem; "
        f"ls -A {planted.directory} | sed 's/^/listed: /'; "
        f"grep -rl 'PRIVATE KEY' /etc /var/lib 2>/dev/null; echo done",
    )
    assert planted.token not in said
    assert "listed:" not in said and f"{planted.directory}/key.pem\n" not in said
    assert "done" in said  # the command ran to its end


def test_the_remote_engines_keys_are_not_readable_inside(repo: Path) -> None:
    keys = Path("/var/lib/codecoder-remote-engine")
    if os.geteuid() != 0 or not keys.is_dir():
        pytest.skip("no TLS remote engine here (scripts/remote-engine.sh makes one)")
    assert any("PRIVATE KEY" in p.read_text() for p in keys.glob("*/*key.pem"))  # the control
    said = contained(repo, f"cat {keys}/*/*key.pem; ls -A {keys}; echo done")
    assert "PRIVATE KEY" not in said and "client" not in said


@ALONE
def test_a_secret_made_deeper_after_the_first_call_is_hidden_after_the_look_at_every_directory(
    repo: Path, planted: Planted
) -> None:
    assert "public" in contained(repo, f"cat {planted.deep}/readme")
    key = planted.deep / "key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, planted.token.encode())
    os.close(fd)
    # Deep in a directory that held no private entry: a call's look does not reach it; the
    # look at every directory (every 30 s in the background) does.
    machine_private_files().look_everywhere()
    said = contained(repo, f"cat {key}; cat {planted.deep}/readme")
    assert planted.token not in said and "public" in said


@ALONE
def test_confined_as_root_reads_no_private_file_either(repo: Path, planted: Planted) -> None:
    env = ConfinedEnvironment(repo)
    result = env.run(
        CommandRequest(
            cwd=repo,
            script=f"cat {planted.file} /etc/shadow; ls {planted.directory}; cat /etc/passwd",
            writable=False,
        )
    )
    said = result.stdout + result.stderr
    assert planted.token not in said
    assert "root:x:0:0" in said  # what every account reads still reads
    assert Path("/etc/shadow").read_text().splitlines()[0] not in said


def test_a_private_entry_gone_before_the_sandbox_is_built_does_not_break_it(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private directory or file that is removed between the plan and bubblewrap (a
    package manager's, the audit's own plant) hides nothing any more; its mount point cannot be
    made in the read-only root, and bubblewrap failed the whole sandbox (seen in a parallel
    run: `Can't mkdir /var/lib/codecoder-audit-…: Read-only file system`)."""
    need_bwrap()
    where = Path(__file__).resolve().parents[2]  # in the read-only root, not a private tmpfs
    vanished = where / f"codecoder-vanished-{secrets.token_hex(4)}"
    env = BwrapEnvironment(repo, warm=False)
    planned = env.plan

    def plan(request: CommandRequest, call: Any = None) -> Any:
        made = planned(request, call)
        made.private = PrivateView(
            directories=(*made.private.directories, vanished),
            files=(*made.private.files, vanished.with_name(vanished.name + ".key")),
        )
        return made

    monkeypatch.setattr(env, "plan", plan)
    try:
        result = env.run(CommandRequest(cwd=repo, script="echo built", writable=False))
    finally:
        env.close()
    assert (result.exit_code, result.stdout) == (0, "built\n")
