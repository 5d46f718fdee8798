"""The README's set-up, verbatim, on a fresh Debian 12: a container of the local
`codecoder-base:bookworm` (debootstrap's minbase with python3 and git: no pip, no ensurepip, PEP
668 in force), a clone of the repository's committed HEAD in the home directory, the install line
run as it stands in README.md (the lines after `<!-- set-up -->`); then a contained `echo` works,
`codecoder check` says @bwrap, and the read and write tools run (@landlock's ripgrep and @wasm's
module from the venv in the home). As root, and as a user following the README's non-root route
(an administrator installs bubblewrap; the user runs the same line, in a clone whose path has a
space). The root run also upgrades (a `git pull`, the install line again, here with --wheel) and
uninstalls.

It reaches Debian's mirror and PyPI: the install path is what is tested. pip's cache is kept in
a volume between runs (a cache, not an installation: every run makes its venv from nothing).
With CI=true it must run; elsewhere it is skipped without Docker or the base image.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.fresh_machine

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = "codecoder-base:bookworm"
# bubblewrap runs in a container only with these (MACHINE.md): its namespaces, its /proc.
UNCONFINED = (
    "--security-opt", "seccomp=unconfined",
    "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined",
)  # fmt: skip
PIP_CACHE = "codecoder-test-fresh-machine-pip"
# The CAs this machine's own trust store adds (a TLS-inspecting egress proxy's, where there is
# one): a machine behind such a proxy has them, or nothing reaches PyPI.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
STEP_SECONDS = 1200


def setup_block() -> tuple[str, str]:
    """The README's two set-up lines: the install command, the test command."""
    text = (REPO / "README.md").read_text()
    marker, fence = "<!-- set-up -->\n", "```sh\n"
    assert marker in text, "README.md has no <!-- set-up --> marker"
    after = text.split(marker, 1)[1]
    assert after.startswith(fence), "the set-up marker is not followed by a ```sh block"
    lines = [line for line in after[len(fence) :].split("```", 1)[0].splitlines() if line]
    assert len(lines) == 2, lines
    return lines[0], lines[1]


def test_the_set_up_block_installs_then_tests() -> None:
    install, tests = setup_block()
    assert install.startswith("bash scripts/install.sh")
    assert tests.startswith(".venv/bin/python -m pytest")


class FreshMachine:
    """A running container of the base image, removed by `close()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        subprocess.run(
            ["docker", "run", "--detach", "--rm", "--name", name, *UNCONFINED,
             "--label", "codecoder-test=fresh-machine",
             "--volume", f"{PIP_CACHE}-root:/root/.cache/pip",
             "--volume", f"{PIP_CACHE}-user:/cache/pip-user",
             BASE_IMAGE, "sleep", "infinity"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        if LOCAL_CAS.is_dir() and any(LOCAL_CAS.glob("*.crt")):
            for ca in LOCAL_CAS.glob("*.crt"):
                subprocess.run(
                    ["docker", "cp", str(ca), f"{name}:{LOCAL_CAS}/"],
                    check=True,
                    capture_output=True,
                )
            self.sh("update-ca-certificates >/dev/null")

    def sh(
        self, script: str, *, user: str = "root", cwd: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`script` in a login shell of `user` (so their ~/.profile sets the PATH)."""
        home = "/root" if user == "root" else f"/home/{user}"
        done = subprocess.run(
            ["docker", "exec", "--user", user, "--workdir", cwd or home,
             "--env", f"HOME={home}", self.name, "bash", "-lc", script],
            capture_output=True,
            text=True,
            timeout=STEP_SECONDS,
            check=False,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, (
                f"`{script}` as {user} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def put_clone(self, clone: Path, destination: str, user: str) -> None:
        """The clone, as `user` would have made it at `destination`."""
        parent = os.path.dirname(destination)
        self.sh(f"mkdir -p {shlex.quote(parent)}", user=user)
        tar = subprocess.Popen(
            ["tar", "-C", str(clone.parent), "-cf", "-", clone.name], stdout=subprocess.PIPE
        )
        script = (
            f'unpacked=$(mktemp -d -p {shlex.quote(parent)}) && tar -xf - -C "$unpacked" && '
            f'mv "$unpacked"/{shlex.quote(clone.name)} {shlex.quote(destination)} && '
            'rmdir "$unpacked"'
        )
        subprocess.run(
            ["docker", "exec", "--interactive", "--user", user, self.name, "sh", "-c", script],
            stdin=tar.stdout,
            check=True,
            capture_output=True,
        )
        assert tar.wait() == 0

    def close(self) -> None:
        subprocess.run(["docker", "rm", "--force", self.name], capture_output=True, check=False)


def _need_docker() -> None:
    try:
        found = subprocess.run(
            ["docker", "image", "inspect", BASE_IMAGE], capture_output=True, timeout=60
        )
        reason = None if found.returncode == 0 else f"no image {BASE_IMAGE}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"no Docker engine ({exc})"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the fresh-machine test must run, but {reason}")
        pytest.skip(f"{reason}; run scripts/docker-setup.sh")


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of the repository's committed HEAD (not the working tree)."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    target = tmp_path / "codecoder"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-checkout", f"file://{REPO}", str(target)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["git", "-C", str(target), "checkout", "--quiet", "-B", "main", head],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture
def machine() -> Iterator[FreshMachine]:
    _need_docker()
    fresh = FreshMachine(f"codecoder-fresh-machine-{uuid.uuid4().hex[:8]}")
    try:
        yield fresh
    finally:
        fresh.close()


def _commands_are_contained(machine: FreshMachine, user: str, home: str) -> None:
    """In a new login shell: `codecoder` is on the PATH, commands run in @bwrap, and the read
    and write tools run from the venv in the home."""
    machine.sh("mkdir -p project && cd project && git init -q", user=user)
    project = f"{home}/project"
    check = machine.sh("codecoder check", user=user, cwd=project)
    assert "commands: run_command runs in @bwrap" in check.stdout, check.stdout
    echoed = machine.sh("codecoder call run_command -- echo hi", user=user, cwd=project)
    assert echoed.stdout.startswith("hi\n"), echoed.stdout + echoed.stderr
    written = machine.sh(
        "codecoder call --answer once write_file "
        """'{"path": "notes.txt", "content": "needle\\n"}' && """
        "codecoder call grep needle",
        user=user,
        cwd=project,
    )
    assert "notes.txt:1:needle" in written.stdout, written.stdout + written.stderr


def test_as_root_from_a_clone_in_the_home_then_upgrade_and_uninstall(
    machine: FreshMachine, clone: Path
) -> None:
    install, _ = setup_block()
    machine.put_clone(clone, "/root/codecoder", "root")
    installed = machine.sh(install, cwd="/root/codecoder", check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "it ran in @bwrap" in installed.stdout
    _commands_are_contained(machine, "root", "/root")

    # A main job that fails fails the set-up: a replayed call that errors (not a refusal).
    broken = machine.sh(
        'printf \'%s\\n\' \'{"tool": "read_file", "args": {"path": "gone"}}\' '
        f">> examples/first-run.jsonl && {install}",
        cwd="/root/codecoder",
        check=False,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "line 6: read_file" in broken.stderr and "FAILED" in broken.stderr, broken.stderr
    machine.sh("git checkout -q examples/first-run.jsonl", cwd="/root/codecoder")

    # An upgrade: what `git pull` brings, then the install line again (here non-editable).
    machine.sh(
        "git clone -q /root/codecoder /root/upstream && cd /root/upstream && "
        "echo 'UPGRADED = True' >> runtime/__init__.py && "
        "git -c user.name=u -c user.email=u@example.com commit -qam upgrade",
    )
    machine.sh("bash scripts/install.sh --wheel", cwd="/root/codecoder")
    machine.sh(
        "git pull -q /root/upstream main && bash scripts/install.sh --wheel", cwd="/root/codecoder"
    )
    upgraded = machine.sh(
        "/root/codecoder/.venv/bin/python -c "
        "'import codecoder; print(codecoder.__file__, codecoder.UPGRADED)'"
    )
    assert "site-packages/codecoder/__init__.py True" in upgraded.stdout, upgraded.stdout
    _commands_are_contained(machine, "root", "/root")

    removed = machine.sh("bash scripts/install.sh --uninstall", cwd="/root/codecoder")
    assert "removed /usr/local/bin/codecoder" in removed.stdout
    gone = machine.sh("command -v codecoder || echo none; ls -A /root/codecoder", check=False)
    assert gone.stdout.startswith("none\n") and ".venv" not in gone.stdout.split()


def test_as_a_user_following_the_non_root_route(machine: FreshMachine, clone: Path) -> None:
    install, _ = setup_block()
    # What the README asks of an administrator (`sudo apt-get install bubblewrap`), and a user.
    machine.sh(
        "apt-get update -q >/dev/null && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null && "
        "useradd --create-home --shell /bin/bash dev && "
        "mkdir -p /home/dev/.cache && ln -s /cache/pip-user /home/dev/.cache/pip && "
        "chown -R dev: /home/dev/.cache /cache/pip-user"
    )
    where = "/home/dev/my projects/codecoder"
    machine.put_clone(clone, where, "dev")
    installed = machine.sh(install, user="dev", cwd=where, check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "it ran in @bwrap" in installed.stdout
    assert "codecoder is set up: /home/dev/.local/bin/codecoder ->" in installed.stdout
    _commands_are_contained(machine, "dev", "/home/dev")
