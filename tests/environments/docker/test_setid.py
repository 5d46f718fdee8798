"""Nothing a @docker call leaves in the workspace carries privileges it did not have before the
call (issue 33, class 1, as @bwrap holds it: tests/environments/test_bwrap_privileges.py). The
container's no-new-privileges makes a set-uid file harmless inside; the host would run one left
in a bound workspace (or copied back from a synced one) with its owner's ids. The agent refuses
set-id modes to every command with a seccomp filter of its own (sandboxes/image/agent/setid.py).

Two levels, each checked by the effect on the host with a control: the agent's filter itself, in
a real process on this kernel (no engine needed), and the same routes through a real container in
bind and sync mode (the image under test: CODECODER_TEST_SANDBOX_IMAGE).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from tests.environments.conftest import SANDBOX_IMAGE
from tests.environments.test_bwrap_privileges import ROUTES, euid_as_nobody, set_id_files

AGENT = Path(__file__).resolve().parents[3] / "sandboxes" / "image" / "agent"
WORKSPACE_UID = 10001

# Installs the agent's filter (or not), becomes the workspace user as runas does, runs a script.
DRIVER = """
import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
if ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, as the container has
    sys.exit("no no-new-privileges")
if sys.argv[2] == "filter":
    from setid import refuse_set_id
    problem = refuse_set_id()
    if problem:
        sys.exit(problem)
os.setgroups([])
os.setgid(int(sys.argv[3]))
os.setuid(int(sys.argv[3]))
os.execv("/bin/sh", ["sh", "-c", sys.argv[4]])
"""


def contained(
    place: Path, script: str, *, filtered: bool = True
) -> subprocess.CompletedProcess[str]:
    """`script` run in `place` as the workspace user, under the agent's filter when `filtered`."""
    if os.geteuid() != 0:
        pytest.skip("becoming the workspace user needs root")
    how = "filter" if filtered else "none"
    return subprocess.run(
        [sys.executable, "-c", DRIVER, str(AGENT), how, str(WORKSPACE_UID), script],
        cwd=place,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def place(tmp_path: Path) -> Path:
    root = tmp_path / "place"
    root.mkdir()
    os.chown(root, WORKSPACE_UID, WORKSPACE_UID)
    return root


def on_this_host(route: str, place: Path) -> str:
    """The route with its scratch file in `place`'s parent (not a shared /tmp)."""
    return ROUTES[route].replace("/tmp/", f"{place.parent}/")


# --- the agent's filter, on this kernel ---------------------------------------------------------


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_agents_filter_refuses_every_set_id_route(place: Path, route: str) -> None:
    done = contained(place, on_this_host(route, place) + "; true")
    assert done.returncode == 0, done.stderr
    assert set_id_files(place) == []


@pytest.mark.parametrize("route", ["chmod", "chmod-setgid", "install-m", "python-open", "mknod"])
def test_the_control_without_the_filter_a_route_leaves_a_set_id_file(
    place: Path, route: str
) -> None:
    """What the filter stops: the workspace user may set those bits on a file of its own, and
    `nobody` running it on the host gets that user's ids."""
    done = contained(place, on_this_host(route, place), filtered=False)
    assert done.returncode == 0, done.stderr
    assert set_id_files(place) == ["made"]
    if route in ("chmod", "install-m"):  # a set-uid copy of id (the others: set-gid, empty)
        assert euid_as_nobody(place / "made") == str(WORKSPACE_UID)


def test_ordinary_modes_still_change_under_the_filter(place: Path) -> None:
    done = contained(
        place,
        "set -e; printf '#!/bin/sh\\necho ran\\n' > s.sh && chmod +x s.sh && ./s.sh; "
        "echo x > secret && chmod 600 secret; mkdir d && chmod 1777 d; cp -p s.sh c.sh; "
        "install -m 755 s.sh i.sh; stat -c '%a %n' s.sh secret d c.sh i.sh",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[1:-1] == [
        "755 s.sh",
        "600 secret",
        "1777 d",
        "755 c.sh",
        "755 i.sh",
    ]


def test_openat2_and_io_uring_are_refused_under_the_filter(place: Path) -> None:
    """openat2's mode lies where a filter cannot read it (ENOSYS: the C library falls back to
    openat); io_uring's operations bypass seccomp (EPERM)."""
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)\n"
        "print(libc.syscall(437, -100, b'n', ctypes.byref(how), 24), ctypes.get_errno())\n"
        "params = (ctypes.c_char * 120)()\n"
        "print(libc.syscall(425, 4, params), ctypes.get_errno())\n"
    )
    done = contained(place, f'/usr/bin/python3 -c "{probe}"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["-1", "38", "-1", "1"]  # ENOSYS, EPERM
    assert not (place / "n").exists()


# --- through a real container -------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["bind", "sync"])
def test_no_file_a_docker_call_leaves_carries_a_set_id_bit_or_a_capability(
    workspace: Path, mode: str
) -> None:
    settings = DockerSettings(image=SANDBOX_IMAGE, workspace=mode)  # type: ignore[arg-type]
    with DockerEnvironment(workspace, settings) as env:
        for route in sorted(ROUTES):
            (workspace / "made").unlink(missing_ok=True)
            env.run(
                CommandRequest(
                    cwd=workspace, script=ROUTES[route] + "; true", writable=True, timeout=60
                )
            )
            assert set_id_files(workspace) == [], route
            made = workspace / "made"
            if "/usr/bin/id" in ROUTES[route] and made.is_file() and made.stat().st_mode & 0o1:
                assert euid_as_nobody(made) == "65534", route  # nobody running it stays nobody


@pytest.mark.docker
def test_the_control_a_set_uid_file_of_the_workspace_owner_gives_nobody_its_ids(
    workspace: Path,
) -> None:
    """What the routes above would have left, made by the host: the check sees it, and it is a
    real change of ids."""
    if os.geteuid() != 0:
        pytest.skip("setting another user's ids needs root")
    made = workspace / "made"
    made.write_bytes(Path("/usr/bin/id").read_bytes())
    os.chown(made, WORKSPACE_UID, WORKSPACE_UID)
    made.chmod(0o4755)
    assert set_id_files(workspace) == ["made"]
    assert euid_as_nobody(made) == str(WORKSPACE_UID)
