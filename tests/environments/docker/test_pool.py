"""The warm pool against a real engine: claims, refills, what is never handed out, cleanup.

Each test has its own state directory, so its own pool server, which the `pool` fixture stops
(and checks that nothing of it is left). Every attack changes the workspace after a sandbox was
made warm for it, then claims: what no longer matches must not be handed out.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.containers import EGRESS_MOUNT, SandboxContainers
from codecoder.environments.docker.engine import DockerEngine
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.pool import wire
from codecoder.environments.docker.pool.client import PoolClient
from codecoder.environments.docker.pool.eligible import refusal
from codecoder.environments.docker.pool.warm import WarmPool
from codecoder.environments.engineseam import SandboxTemplate, TemplateMount
from codecoder.environments.workspaceguard import ProtectedScan
from codecoder.foundation.errors import SandboxUnavailable
from tests.environments.conftest import SANDBOX_IMAGE

pytestmark = pytest.mark.docker

POOLED = "codecoder-pool-"


def wait_until(what: Callable[[], Any], timeout: float = 90.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def pool_containers(client: Any, pid: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.api.containers(
        all=True, filters={"label": ["codecoder.pool=1", f"codecoder.pid={pid}"]}
    )
    return found


@pytest.fixture
def pool(docker_engine: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[PoolClient]:
    """The pool turned on; afterwards its server is stopped and must have left nothing."""
    monkeypatch.setenv("CODECODER_POOL", "1")
    monkeypatch.setenv("CODECODER_POOL_IDLE", "300")
    client = PoolClient()
    yield client
    status = client.status()
    client.stop()
    if status is not None:
        pid = status["pid"]
        wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=60)
        assert pool_containers(docker_engine, pid) == []


def warm(client: PoolClient, count: int = 1) -> dict[str, Any]:
    """Wait until the pool has `count` sandboxes ready (of any template); its status."""

    def ready() -> dict[str, Any] | None:
        status = client.status()
        if status is None:
            return None
        have = sum(len(t["ready"]) for t in status["templates"])
        return status if have >= count else None

    found: dict[str, Any] = wait_until(ready)
    return found


def run(
    env: DockerEnvironment, script: str, *, writable: bool = True, grant: str | None = None
) -> CommandResult:
    request = CommandRequest(cwd=env.workspace, script=script, writable=writable, grant=grant)
    return env.run(request)


def first_call(workspace: Path, script: str = "echo ran", **settings: Any) -> CommandResult:
    with DockerEnvironment(workspace, DockerSettings(**settings)) as env:
        return run(env, script)


def served_from_pool(result: CommandResult) -> bool:
    return str(result.extra["container"]).startswith(POOLED)


# --- claims ------------------------------------------------------------------------------------


def test_a_new_session_claims_a_warm_sandbox_and_its_first_call_runs_there(
    workspace: Path, pool: PoolClient
) -> None:
    cold = first_call(workspace)
    warm(pool)
    claimed = first_call(workspace, "echo ran; id -u; ls -A /tmp | wc -l")

    assert (cold.exit_code, served_from_pool(cold)) == (0, False)
    assert (claimed.exit_code, claimed.stdout, served_from_pool(claimed)) == (
        0,
        "ran\n10001\n0\n",
        True,
    )
    status = pool.status()
    assert status is not None and (status["served"], status["missed"]) == (1, 1)


def test_a_claimed_sandbox_is_never_handed_to_another_session(
    workspace: Path, pool: PoolClient, docker_engine: Any
) -> None:
    first_call(workspace, pool=3)
    warm(pool, 3)
    sessions = [DockerEnvironment(workspace, DockerSettings(pool=3)) for _ in range(3)]
    results: dict[int, CommandResult] = {}

    def claim(index: int) -> None:
        script = f"echo {index} > /tmp/mine; cat /tmp/mine"
        results[index] = run(sessions[index], script, grant="same grant")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    names = {i: str(r.extra["container"]) for i, r in results.items()}
    again = [run(env, "cat /tmp/mine", grant="same grant").stdout for env in sessions]
    for env in sessions:
        env.close()
    status = wait_until(lambda: (s := pool.status()) and not s["claimed"] and s)

    assert [results[i].stdout for i in range(3)] == ["0\n", "1\n", "2\n"]
    assert again == ["0\n", "1\n", "2\n"]
    assert len(set(names.values())) == 3 and all(n.startswith(POOLED) for n in names.values())
    # Released, they are removed, never warm again.
    ready = {r for t in status["templates"] for r in t["ready"]}
    for name in names.values():
        found = docker_engine.api.containers(all=True, filters={"name": name})
        assert found == [] or found[0]["Id"] not in ready


def test_the_pool_refills_in_the_background(workspace: Path, pool: PoolClient) -> None:
    first_call(workspace)
    before = warm(pool)
    claimed = first_call(workspace)
    after = warm(pool)

    ready_before = {r for t in before["templates"] for r in t["ready"]}
    ready_after = {r for t in after["templates"] for r in t["ready"]}
    assert served_from_pool(claimed)
    assert ready_before and ready_after and not ready_before & ready_after


def test_a_pooled_sandbox_is_hardened_exactly_as_a_sessions_own(
    workspace: Path, pool: PoolClient, docker_engine: Any
) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    with DockerEnvironment(workspace) as own:
        run(own, "true")
        own_id = own._channels["rw"].container_id
        own_attrs = docker_engine.api.inspect_container(own_id)
        warm(pool)
        with DockerEnvironment(workspace) as claimer:
            run(claimer, "true")
            channel = claimer._channels["rw"]
            pooled_attrs = docker_engine.api.inspect_container(channel.container_id)

    def shape(attrs: dict[str, Any]) -> dict[str, Any]:
        host, config = attrs["HostConfig"], attrs["Config"]
        # Each sandbox has an egress directory of its own: only where it is differs.
        mounts = sorted(
            (
                "<egress>" if m["Destination"] == EGRESS_MOUNT else m["Source"],
                m["Destination"],
                m["RW"],
            )
            for m in attrs["Mounts"]
        )
        keep = ("User", "Entrypoint", "Env", "WorkingDir", "Image", "OpenStdin", "StdinOnce")
        return {
            "host": {k: v for k, v in host.items() if k not in ("Binds", "Mounts")},
            "config": {k: config[k] for k in keep},
            "mounts": mounts,
        }

    assert channel.claimed
    assert shape(pooled_attrs) == shape(own_attrs)
    assert ("<egress>", EGRESS_MOUNT, False) in shape(pooled_attrs)["mounts"]
    egress = {
        name: next(m["Source"] for m in attrs["Mounts"] if m["Destination"] == EGRESS_MOUNT)
        for name, attrs in (("own", own_attrs), ("pooled", pooled_attrs))
    }
    assert egress["own"] != egress["pooled"]


@pytest.mark.parametrize("runtime", ["runsc"])
def test_a_pooled_gvisor_sandbox_runs_under_gvisor(
    workspace: Path, pool: PoolClient, docker_engine: Any, runtime: str
) -> None:
    if runtime not in (docker_engine.info().get("Runtimes") or {}):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, but the engine has no {runtime} runtime")
        pytest.skip(f"the engine has no {runtime} runtime")
    first_call(workspace, runtime=runtime)
    warm(pool)
    claimed = first_call(workspace, "uname -r", runtime=runtime)

    assert served_from_pool(claimed)
    assert (claimed.exit_code, claimed.stdout) == (0, "4.4.0\n")


# --- what is never handed out --------------------------------------------------------------------


def _init_git(workspace: Path) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)


def _project_file(workspace: Path) -> None:
    (workspace / "codecoder.json").write_text("{}\n")


def _nested_git(workspace: Path) -> None:
    (workspace / "vendor" / "lib" / ".git" / "hooks").mkdir(parents=True)


def _gitmodules(workspace: Path) -> None:
    (workspace / ".gitmodules").write_text("")


def _codecoder_dir(workspace: Path) -> None:
    (workspace / ".codecoder" / "capabilities").mkdir(parents=True)


CHANGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "git init": (_init_git, "echo x > .git/hooks/pre-commit"),
    "a project file": (_project_file, "echo '{\"allowlist\": {}}' > codecoder.json"),
    "a nested repository": (_nested_git, "echo x > vendor/lib/.git/hooks/post-checkout"),
    ".gitmodules": (_gitmodules, "echo '[submodule]' > .gitmodules"),
    ".codecoder": (_codecoder_dir, "echo x > .codecoder/capabilities/planted"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_protected_path_that_appeared_after_warming_is_never_handed_out_writable(
    workspace: Path, pool: PoolClient, change: str
) -> None:
    make, write = CHANGES[change]
    first_call(workspace)
    warm(pool)
    make(workspace)
    os.system(f"chown -R 10001:10001 {workspace}")
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}

    with DockerEnvironment(workspace) as env:
        attempt = run(env, write)

    if change not in ("git init", ".codecoder"):
        # (`.git` and `.codecoder` were the runtime's placeholders, which the warm sandbox
        # already mounts read-only: it may be handed out.)
        assert not served_from_pool(attempt)
    assert attempt.exit_code != 0
    assert "Read-only file system" in attempt.stderr
    assert {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()} == before


def test_a_protected_path_replaced_after_warming_is_never_handed_out(
    workspace: Path, pool: PoolClient
) -> None:
    _init_git(workspace)
    first_call(workspace)
    warm(pool)
    (workspace / ".git").rename(workspace / "old-git")
    _init_git(workspace)
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/new\n")

    with DockerEnvironment(workspace) as env:
        seen = run(env, "cat .git/HEAD; echo x > .git/hooks/pre-commit")

    assert not served_from_pool(seen)
    assert seen.stdout == "ref: refs/heads/new\n"
    assert "Read-only file system" in seen.stderr
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()


def test_a_workspace_replaced_after_warming_is_never_shown_to_a_new_session(
    workspace: Path, pool: PoolClient
) -> None:
    (workspace / "which").write_text("the old one\n")
    first_call(workspace)
    warm(pool)
    workspace.rename(workspace.with_name("moved-away"))
    workspace.mkdir()
    os.chown(workspace, 10001, 10001)
    (workspace / "which").write_text("the new one\n")

    seen = first_call(workspace, "cat which")

    assert not served_from_pool(seen)
    assert seen.stdout == "the new one\n"


@pytest.fixture
def own_tag(docker_engine: Any) -> Iterator[str]:
    """A tag of the sandbox image of this test's own; it and what was built under it go after."""
    tag = f"codecoder-test-pool-{os.getpid()}:rebuilt"
    docker_engine.images.get(SANDBOX_IMAGE).tag(tag)
    yield tag
    for name in (tag, f"{tag}-other"):
        with contextlib.suppress(Exception):
            docker_engine.images.remove(name, force=True)


def rebuild(docker_engine: Any, tag: str, marker: str, *, retag: bool) -> str:
    """Build another image from the sandbox image (one label more) and make `tag` name it:
    built under the tag itself, or built elsewhere and the tag moved to it. Its id."""
    recipe = f"FROM {SANDBOX_IMAGE}\nLABEL codecoder.test-rebuilt={marker}\n".encode()
    target = f"{tag}-other" if retag else tag
    image, _ = docker_engine.images.build(fileobj=io.BytesIO(recipe), tag=target, rm=True)
    if retag:
        image.tag(tag)
    return str(image.id)


@pytest.mark.parametrize("retag", [False, True], ids=["rebuilt", "tag-moved"])
def test_a_warm_sandbox_of_an_image_its_tag_no_longer_names_is_never_handed_out(
    workspace: Path, pool: PoolClient, docker_engine: Any, own_tag: str, retag: bool
) -> None:
    first_call(workspace, image=own_tag, pool=1)
    status = warm(pool)
    (old,) = [r for t in status["templates"] for r in t["ready"]]
    old_image = docker_engine.api.inspect_container(old)["Image"]
    new_image = rebuild(docker_engine, own_tag, "a-fix", retag=retag)

    with DockerEnvironment(workspace, DockerSettings(image=own_tag, pool=1)) as env:
        result = run(env, "echo ran")
        ran_in = {docker_engine.api.inspect_container(c)["Image"] for c in env.containers()}

    assert (result.exit_code, served_from_pool(result), ran_in) == (0, False, {new_image})
    assert old_image != new_image
    wait_until(lambda: not docker_engine.api.containers(all=True, filters={"id": old}))
    # The pool refills from what the tag names now, and that one is handed out.
    status = warm(pool)
    # (the pool may keep more than one: it learns the pace of claims; every one is the new image)
    fresh = [r for t in status["templates"] for r in t["ready"]]
    assert fresh
    assert {docker_engine.api.inspect_container(c)["Image"] for c in fresh} == {new_image}
    assert served_from_pool(first_call(workspace, image=own_tag, pool=1))


def test_no_warm_sandbox_is_handed_out_when_the_engine_cannot_say_what_the_tag_names(
    workspace: Path, pool: PoolClient, docker_engine: Any, own_tag: str
) -> None:
    first_call(workspace, image=own_tag, pool=1)
    warm(pool)
    docker_engine.images.remove(own_tag)  # the tag is gone: the image it named stays in use

    with (
        DockerEnvironment(workspace, DockerSettings(image=own_tag, pool=1)) as env,
        pytest.raises(SandboxUnavailable, match="sandbox image"),
    ):
        run(env, "echo ran")

    status = pool.status()
    assert status is not None and status["served"] == 0


def test_a_workspace_with_another_owner_gets_a_sandbox_of_that_owner(
    workspace: Path, pool: PoolClient
) -> None:
    first_call(workspace)
    warm(pool)
    os.chown(workspace, 10002, 10002)

    seen = first_call(workspace, "id -u")

    assert not served_from_pool(seen)
    assert seen.stdout == "10002\n"


# --- who may ask, and for what -------------------------------------------------------------------


def _template(workspace: Path, **changes: Any) -> SandboxTemplate:
    containers = SandboxContainers(
        workspace.resolve(), DockerSettings(), "test", sync=False, resolver=None, volume=None
    )
    # What a session of the default settings sends: with its egress directory.
    egress = containers.egress_for("rw") is not None
    template = containers.template("rw", ProtectedScan(workspace.resolve()), egress)
    fields = {**template.to_json(), **changes}
    return SandboxTemplate.from_json(json.loads(json.dumps(fields)))


def _mount(target: str, source: Path, read_only: bool = True) -> dict[str, Any]:
    info = source.stat()
    mount = TemplateMount(target, str(source), "bind", read_only, (info.st_dev, info.st_ino))
    return {name: getattr(mount, name) for name in TemplateMount.__dataclass_fields__}


def test_the_default_template_is_one_the_pool_makes(workspace: Path) -> None:
    assert refusal(_template(workspace)) is None


def test_an_egress_directory_is_made_only_empty_and_inside_the_agents_root_only_tmpfs(
    workspace: Path,
) -> None:
    template = _template(workspace)
    mounts = template.to_json()["mounts"]
    egress = next(m for m in mounts if m["kind"] == "egress")
    others = [m for m in mounts if m is not egress]
    tmpfs = [[path, options] for path, options in template.tmpfs]
    open_tmpfs = [
        [path, options.replace("mode=700", "mode=755")] for path, options in template.tmpfs
    ]
    refused = {
        "a source of its own": _template(workspace, mounts=[*others, {**egress, "source": "/etc"}]),
        "elsewhere": _template(workspace, mounts=[*others, {**egress, "target": "/tmp/egress"}]),
        "twice": _template(
            workspace, mounts=[*others, egress, {**egress, "target": f"{EGRESS_MOUNT}2"}]
        ),
        "in a tmpfs commands may enter": _template(workspace, tmpfs=open_tmpfs),
        "without the tmpfs": _template(
            workspace, tmpfs=[t for t in tmpfs if not t[0].startswith("/opt/codecoder/relay")]
        ),
    }

    assert template.egress_target == EGRESS_MOUNT
    assert {name: refusal(t) for name, t in refused.items()} == dict.fromkeys(
        refused, "its egress directory is not one, inside the agent's root-only tmpfs"
    )


def loose_templates(workspace: Path) -> dict[str, SandboxTemplate]:
    ws_mount = _mount("/workspace", workspace.resolve(), read_only=False)
    return {
        "the host's root": _template(workspace, mounts=[_mount("/workspace", Path("/"), False)]),
        "a home directory": _template(workspace, mounts=[_mount("/workspace", Path.home(), False)]),
        "another mount": _template(workspace, mounts=[ws_mount, _mount("/etc-host", Path("/etc"))]),
        "a writable mount": _template(
            workspace,
            mounts=[ws_mount, _mount("/workspace/x", workspace.resolve(), read_only=False)],
        ),
        "a mount from elsewhere": _template(
            workspace, mounts=[ws_mount, _mount("/workspace/.git", Path("/etc"))]
        ),
        "a network": _template(workspace, network="bridge"),
        "a writable root": _template(workspace, read_only_rootfs=False),
        "capabilities": _template(workspace, capabilities=["SYS_ADMIN"]),
        "another entrypoint": _template(workspace, entrypoint=["/bin/sh"]),
        "root commands": _template(workspace, command_user=[0, 0]),
        "a setuid tmpfs": _template(workspace, tmpfs=[["/tmp", "rw,size=1m"]]),
    }


LOOSE = [
    "the host's root",
    "a home directory",
    "another mount",
    "a writable mount",
    "a mount from elsewhere",
    "a network",
    "a writable root",
    "capabilities",
    "another entrypoint",
    "root commands",
    "a setuid tmpfs",
]


@pytest.mark.parametrize("loose", LOOSE)
def test_the_pool_server_makes_no_looser_sandbox_whoever_asks(
    workspace: Path, pool: PoolClient, docker_engine: Any, loose: str
) -> None:
    template = loose_templates(workspace)[loose]
    first_call(workspace, pool=1)  # starts the server, which keeps one warm
    server = warm(pool)["pid"]
    directory = wire.socket_directory()
    # Asked directly, past the client's own check: what a hostile process of the user would do.
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(str(directory / f"{wire.socket_name(wire.identity())}.sock"))
        wire.send(sock, {"op": "claim", "template": template.to_json(), "size": 4})
        answer, fd = wire.receive(sock)
    time.sleep(1.0)
    status = pool.status()

    assert fd is None
    assert answer["refused"].startswith("the pool makes no such sandbox")
    assert status is not None and len(status["templates"]) == 1
    assert len(pool_containers(docker_engine, server)) == 1


@pytest.fixture
def open_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state directory every user can reach (pytest's own temporary root is private).
    Requested before `pool`, so it is removed after the pool's server stopped."""
    state = Path(tempfile.mkdtemp(prefix="codecoder-pool-test-"))
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    yield state
    shutil.rmtree(state, ignore_errors=True)


def test_another_user_gets_nothing_even_where_the_socket_is_open_to_everyone(
    workspace: Path, open_state: Path, pool: PoolClient
) -> None:
    state = open_state
    first_call(workspace)
    status = warm(pool)
    directory = wire.socket_directory()
    path = directory / f"{wire.socket_name(wire.identity())}.sock"
    template = _template(workspace)
    for opened in (state, directory.parent, directory):
        opened.chmod(0o755)
    path.chmod(0o666)
    request = json.dumps({"op": "claim", "template": template.to_json(), "size": 1})
    # A raw client as uid 10001 (the system's Python: a stranger has no access to ours).
    program = textwrap.dedent(
        f"""
        import json, socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect({str(path)!r})
        try:
            sock.send({request!r}.encode())
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
        except OSError as exc:  # the server hung up on it
            data, fds = type(exc).__name__.encode(), []
        print(json.dumps([data.decode(), len(fds)]))
        """
    )
    stranger = subprocess.run(
        ["/usr/bin/python3", "-c", program],
        user=10001,
        group=10001,
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    directory.chmod(0o700)  # our own client uses none that is not private
    after = pool.status()

    assert stranger.returncode == 0, stranger.stderr
    assert json.loads(stranger.stdout) in (
        ["", 0],
        ["BrokenPipeError", 0],
        ["ConnectionResetError", 0],
    )
    # Nothing was handed out: every sandbox ready before is still ready (the background
    # refill may have made one more meanwhile).
    assert after is not None and after["served"] == status["served"]
    assert {r for t in status["templates"] for r in t["ready"]} <= {
        r for t in after["templates"] for r in t["ready"]
    }


def test_no_pool_is_started_when_it_is_off(
    workspace: Path, pool: PoolClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_call(workspace, pool=0)
    monkeypatch.setenv("CODECODER_POOL", "off")
    first_call(workspace)
    time.sleep(1.0)

    assert pool.status() is None
    assert not wire.socket_directory().exists()


# --- nothing left behind -------------------------------------------------------------------------


def test_a_stopped_server_removes_its_warm_sandboxes_and_leaves_claimed_ones_to_their_session(
    workspace: Path, pool: PoolClient, docker_engine: Any
) -> None:
    first_call(workspace, pool=2)
    server = warm(pool, 2)["pid"]
    with DockerEnvironment(workspace, DockerSettings(pool=2)) as session:
        run(session, "true")
        claimed = session._channels["rw"].container_id
        assert pool.stop()
        wait_until(lambda: not os.path.exists(f"/proc/{server}"), timeout=60)
        left = {c["Id"] for c in pool_containers(docker_engine, server)}
        still = run(session, "echo still here")
    gone = pool_containers(docker_engine, server)

    assert left == {claimed}
    assert still.stdout == "still here\n"
    assert gone == []


def test_a_killed_server_leaves_nothing_running_and_the_next_start_removes_it(
    workspace: Path, pool: PoolClient, docker_engine: Any
) -> None:
    first_call(workspace, pool=2)
    server = warm(pool, 2)["pid"]
    session = DockerEnvironment(workspace, DockerSettings(pool=2))
    run(session, "true")
    claimed = session._channels["rw"].container_id

    os.kill(server, signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{server}"), timeout=30)

    def warm_ones_stopped() -> bool:
        found = pool_containers(docker_engine, server)
        return all(c["State"] != "running" for c in found if c["Id"] != claimed)

    wait_until(warm_ones_stopped, timeout=30)
    first_call(workspace)  # a new session: its start removes what is not running
    wait_until(lambda: {c["Id"] for c in pool_containers(docker_engine, server)} == {claimed})
    still = run(session, "echo still here")
    session.close()

    assert still.stdout == "still here\n"
    assert pool_containers(docker_engine, server) == []


# --- the pool itself: limits, failures --------------------------------------------------------


def _pool_labels() -> dict[str, str]:
    return {
        "codecoder": "1",
        "codecoder.session": f"pool-test-{os.getpid()}",
        "codecoder.host": socket.gethostname(),
        "codecoder.pid": str(os.getpid()),
    }


def test_the_pool_keeps_within_its_total_and_half_the_engines_memory(
    workspace: Path, docker_engine: Any
) -> None:
    template = _template(workspace)  # 1 GiB of memory limit each
    small = WarmPool(DockerEngine(), _pool_labels(), max_total=3, memory=4 * 1024**3)
    capped = WarmPool(DockerEngine(), _pool_labels(), max_total=2, memory=None)
    try:
        for pool in (small, capped):
            pool.start()
            assert pool.claim(template, 8) is None
        wait_until(lambda: len(small.status()["templates"][0]["ready"]) == 2)
        wait_until(lambda: len(capped.status()["templates"][0]["ready"]) == 2)
        time.sleep(3.0)  # room to make more, were it allowed
        ready = [len(p.status()["templates"][0]["ready"]) for p in (small, capped)]
    finally:
        small.close()
        capped.close()

    assert ready == [2, 2]  # half of 4 GiB is two sandboxes of 1 GiB; the total caps the other
    assert (
        docker_engine.api.containers(
            all=True, filters={"label": [f"codecoder.session=pool-test-{os.getpid()}"]}
        )
        == []
    )


def test_a_template_that_cannot_start_is_retried_later_and_leaves_nothing(
    workspace: Path, docker_engine: Any
) -> None:
    missing = SandboxTemplate.from_json(
        {**json.loads(json.dumps(_template(workspace).to_json())), "image": "codecoder-no-such"}
    )
    pool = WarmPool(DockerEngine(), _pool_labels())
    pool.start()
    try:
        assert pool.claim(missing, 1) is None
        entry = wait_until(lambda: (t := pool.status()["templates"][0])["failures"] >= 2 and t)
    finally:
        pool.close()

    assert entry["ready"] == [] and "image is missing" in entry["problem"]
    assert (
        docker_engine.api.containers(
            all=True, filters={"label": [f"codecoder.session=pool-test-{os.getpid()}"]}
        )
        == []
    )


def test_a_template_dropped_because_its_directory_moved_takes_its_warm_sandboxes_with_it(
    workspace: Path, docker_engine: Any
) -> None:
    """The first sandbox is made while the workspace is what it was; before the second, it is
    no longer: the template goes, and the warm one with it, at once (not when the server ends,
    whose exit would only stop it)."""
    checks = itertools.count()
    pool = WarmPool(DockerEngine(), _pool_labels(), identity_ok=lambda template: next(checks) < 2)
    pool.start()
    mine = {"label": [f"codecoder.session=pool-test-{os.getpid()}"]}
    try:
        assert pool.claim(_template(workspace), 2) is None
        wait_until(lambda: pool.status()["templates"] == [])
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not docker_engine.api.containers(all=True, filters=mine), 20)
        left = docker_engine.api.containers(all=True, filters=mine)
    finally:
        pool.close()

    assert next(checks) >= 3  # one made (checked before and after), one refused
    assert left == []
    assert docker_engine.api.containers(all=True, filters=mine) == []


def test_back_to_back_claims_teach_the_pool_how_many_to_keep_warm(
    workspace: Path, docker_engine: Any
) -> None:
    """A CI loop's new processes claim one after another, faster than a sandbox is made: a
    pool of the two a session asks for was empty every other claim. Once it has seen such a
    run of claims, it keeps that many warm, so the next run finds one at every claim."""
    template = _template(workspace)
    pool = WarmPool(DockerEngine(), _pool_labels(), memory=None)
    pool.start()
    run = 4
    handed: list[str] = []
    try:
        assert pool.claim(template, 2) is None  # the first ever: nothing made yet
        wait_until(lambda: len(pool.status()["templates"][0]["ready"]) >= 2)
        first = [pool.claim(template, 2) for _ in range(run)]
        handed += [sandbox.id for sandbox in first if sandbox is not None]
        entry = wait_until(lambda: len((t := pool.status()["templates"][0])["ready"]) >= run and t)
        second = [pool.claim(template, 2) for _ in range(run)]
        handed += [sandbox.id for sandbox in second if sandbox is not None]
    finally:
        for sandbox_id in handed:
            pool.release(sandbox_id)
        pool.close()

    assert entry["demand"] >= run
    assert all(sandbox is not None for sandbox in second), second
    assert (
        docker_engine.api.containers(
            all=True, filters={"label": [f"codecoder.session=pool-test-{os.getpid()}"]}
        )
        == []
    )


def test_egress_directories_go_with_their_sandboxes_whoever_ends_them(
    workspace: Path, docker_engine: Any, tmp_path: Path
) -> None:
    """Each warm sandbox gets an empty, private egress directory of its own; a claimed one's
    goes with it when its session dies without removing it (the pool reaps the stopped
    sandbox), and the unclaimed ones' when the pool closes."""
    template = _template(workspace)
    root = tmp_path / "egress"
    pool = WarmPool(DockerEngine(), _pool_labels(), egress_root=root)
    pool.start()
    try:
        assert pool.claim(template, 2) is None
        wait_until(lambda: len(pool.status()["templates"][0]["ready"]) >= 2)
        claimed = pool.claim(template, 2)
        assert claimed is not None and claimed.egress is not None
        others = {p for p in root.iterdir() if p != claimed.egress}
        fresh = (os.stat(claimed.egress).st_mode & 0o777, list(claimed.egress.iterdir()))
        pool.handed_over(claimed)  # the session's now; it dies, and its sandbox stops
        docker_engine.api.kill(claimed.id)
        wait_until(lambda: not docker_engine.api.inspect_container(claimed.id)["State"]["Running"])
        pool._reap()
        reaped = not claimed.egress.exists()
    finally:
        pool.close()

    assert fresh == (0o700, [])
    assert others and reaped
    assert list(root.iterdir()) == []
