"""The @docker environment against a real engine: hardening, speed path, lifecycle, errors.

Every attack runs from inside the sandbox and must fail there; every lifecycle test looks at
what the engine really holds afterwards. Tests without the `docker` mark need no engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker
import pytest
import requests

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT
from codecoder.environments.docker.engine import engine_is_local
from codecoder.environments.docker.environment import (
    DockerEnvironment,
    DockerSettings,
    LooserSetting,
)
from codecoder.foundation.errors import (
    ExecutionFailed,
    ExecutionTimeout,
    OutOfMemory,
    SandboxUnavailable,
)

REPO_ROOT = Path(__file__).resolve().parents[3]

docker_test = pytest.mark.docker


def run(env: DockerEnvironment, script: str, **options: Any) -> CommandResult:
    options.setdefault("writable", False)
    options.setdefault("timeout", 30.0)
    return env.run(CommandRequest(cwd=env.workspace, script=script, **options))


def containers_of(client: Any, session: str) -> list[dict[str, Any]]:
    """Every container of a session, the sync mode's helper included."""
    found: list[dict[str, Any]] = client.api.containers(
        all=True, filters={"label": f"codecoder.session={session}"}
    )
    return found


def sandboxes_of(client: Any, session: str) -> list[dict[str, Any]]:
    """The containers commands run in (read-only and writable), not the sync mode's helper that
    fills the workspace volume."""
    return [
        c
        for c in containers_of(client, session)
        if c["Labels"].get("codecoder.mode") in ("ro", "rw")
    ]


@pytest.fixture
def sandbox(workspace: Path) -> Iterator[DockerEnvironment]:
    with DockerEnvironment(workspace) as env:
        yield env


@pytest.fixture(scope="module")
def shared_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEnvironment]:
    """One warm sandbox for the checks that leave nothing behind (saves a start per test)."""
    root = tmp_path_factory.mktemp("shared") / "workspace"
    root.mkdir()
    root.chmod(0o755)
    os.chown(root, 10001, 10001)
    with DockerEnvironment(root, DockerSettings(tmpfs_size="8m")) as env:
        yield env


# --- running commands --------------------------------------------------------------------------


@docker_test
def test_a_command_runs_and_reports_its_output_and_exit_code(
    shared_sandbox: DockerEnvironment,
) -> None:
    echo = shared_sandbox.run(
        CommandRequest(cwd=shared_sandbox.workspace, argv=("echo", "hello"), writable=False)
    )
    script = run(shared_sandbox, "echo out; echo err >&2; exit 3")

    assert (echo.exit_code, echo.stdout, echo.stderr, echo.truncated) == (0, "hello\n", "", False)
    assert (script.exit_code, script.stdout, script.stderr) == (3, "out\n", "err\n")
    assert script.killed_by is None
    assert str(script.extra["container"]).startswith(f"codecoder-{shared_sandbox.session_id}-ro-")


@docker_test
def test_argv_runs_exactly_as_given_without_a_shell(shared_sandbox: DockerEnvironment) -> None:
    result = shared_sandbox.run(
        CommandRequest(
            cwd=shared_sandbox.workspace, argv=("echo", "$HOME; rm -rf /"), writable=False
        )
    )

    assert result.stdout == "$HOME; rm -rf /\n"


@docker_test
def test_stdin_env_and_cwd_reach_the_command(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    with DockerEnvironment(workspace) as env:
        result = env.run(
            CommandRequest(
                cwd=workspace / "sub",
                argv=("sh", "-c", 'pwd; cat; echo "$GREETING"'),
                stdin=b"from stdin\n",
                env={"GREETING": "hi"},
                writable=False,
            )
        )

    assert (result.exit_code, result.stdout) == (0, "/workspace/sub\nfrom stdin\nhi\n")


@docker_test
def test_a_missing_program_exits_127(shared_sandbox: DockerEnvironment) -> None:
    result = shared_sandbox.run(
        CommandRequest(cwd=shared_sandbox.workspace, argv=("no-such-tool",), writable=False)
    )

    assert (result.exit_code, result.stderr) == (
        127,
        "no-such-tool: command not found\n"
        "codecoder: the sandbox image codecoder-sandbox has no no-such-tool. `codecoder image "
        "build --from IMAGE` makes a sandbox image of an image that has it (one on this engine), "
        'then set "docker": {"image": ...} in codecoder.json to use it (`codecoder check` '
        "confirms it)\n",
    )


def test_a_working_directory_outside_the_workspace_is_refused(workspace: Path) -> None:
    env = DockerEnvironment(workspace)

    with pytest.raises(ExecutionFailed, match="outside the workspace"):
        env.run(CommandRequest(cwd=workspace.parent, argv=("true",)))


@docker_test
def test_long_output_keeps_head_and_tail_and_marks_the_cut(
    shared_sandbox: DockerEnvironment,
) -> None:
    result = run(shared_sandbox, "seq 1 100000", max_output=1000)

    assert result.truncated
    assert result.stdout.startswith("1\n2\n3\n")
    assert result.stdout.endswith("99999\n100000\n")
    assert "bytes truncated ...]" in result.stdout
    assert len(result.stdout) < 1100
    assert result.extra["stdout_bytes"] == len("".join(f"{i}\n" for i in range(1, 100001)))


# --- containment -------------------------------------------------------------------------------


@docker_test
def test_the_root_filesystem_is_read_only_even_for_a_writable_call(
    sandbox: DockerEnvironment,
) -> None:
    result = run(
        sandbox, "touch /etc/planted || touch /usr/bin/planted || echo refused", writable=True
    )

    assert result.stdout == "refused\n"
    assert "Read-only file system" in result.stderr


@docker_test
def test_tmp_is_a_small_noexec_tmpfs(shared_sandbox: DockerEnvironment) -> None:
    result = run(
        shared_sandbox,
        "cp /bin/true /tmp/t && chmod +x /tmp/t; /tmp/t; echo exec=$?;"
        "head -c 16M /dev/zero > /tmp/fill; echo fill=$?; rm -f /tmp/fill /tmp/t",
    )

    assert "exec=126" in result.stdout  # noexec: Permission denied
    assert "fill=1" in result.stdout
    assert "No space left on device" in result.stderr


@docker_test
def test_there_is_no_network_inside(shared_sandbox: DockerEnvironment) -> None:
    result = run(
        shared_sandbox,
        "ls /sys/class/net; python3 - <<'EOF'\n"
        "import socket\n"
        "for target in [('1.1.1.1', 53), ('8.8.8.8', 443), ('172.17.0.1', 2375)]:\n"
        "    try:\n"
        "        socket.create_connection(target, timeout=2)\n"
        "        print('connected', target)\n"
        "    except OSError as exc:\n"
        "        print('blocked', exc.errno)\n"
        "EOF",
    )

    assert result.stdout == "lo\nblocked 101\nblocked 101\nblocked 101\n"  # ENETUNREACH


@docker_test
def test_the_canary_is_reachable_from_the_host_and_unreachable_from_the_sandbox(
    canary: Any, shared_sandbox: DockerEnvironment
) -> None:
    from_host = [
        canary.fetch(canary.host_url),
        canary.fetch(f"http://{canary.bridge_ip}:{canary.bridge_port}/"),
    ]
    targets = [
        ("127.0.0.1", canary.host_port),
        (canary.bridge_ip, canary.bridge_port),
        (canary.gateway_ip, canary.host_port),
    ]
    probe = textwrap.dedent(
        f"""
        import urllib.request
        for host, port in {targets!r}:
            try:
                urllib.request.urlopen(f"http://{{host}}:{{port}}/", timeout=2).read()
                print("reached", host, port)
            except OSError:
                print("unreachable")
        """
    )
    from_sandbox = shared_sandbox.run(
        CommandRequest(cwd=shared_sandbox.workspace, argv=("python3", "-c", probe), writable=False)
    )

    assert from_host == [canary.page, canary.page]
    assert from_sandbox.stdout == "unreachable\n" * 3


@docker_test
def test_all_capabilities_are_dropped(shared_sandbox: DockerEnvironment) -> None:
    result = run(shared_sandbox, "grep ^Cap /proc/self/status")

    zero = "0000000000000000"
    assert result.stdout == "".join(
        f"{name}:\t{zero}\n" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
    )


@docker_test
def test_it_runs_as_a_non_root_user_without_new_privileges(
    shared_sandbox: DockerEnvironment,
) -> None:
    result = run(shared_sandbox, "id -u; id -g; grep NoNewPrivs /proc/self/status")

    assert result.stdout == "10001\n10001\nNoNewPrivs:\t1\n"


@docker_test
@pytest.mark.parametrize(
    "attack",
    [
        "touch /tmp/f && chown 0:0 /tmp/f",
        "mknod /tmp/disk b 8 0",
        "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m",  # mount is setuid root on the image
        "chroot / true",
        "unshare -U true",
        "unshare -r true",
        "echo b > /proc/sysrq-trigger",
        "su -c true root </dev/null",  # setuid, ignored under no-new-privileges
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
        "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'",
    ],
)
def test_privileged_operations_fail_inside(shared_sandbox: DockerEnvironment, attack: str) -> None:
    result = run(shared_sandbox, attack, timeout=10)

    assert result.exit_code != 0, result


@docker_test
def test_the_docker_socket_is_nowhere_inside(shared_sandbox: DockerEnvironment) -> None:
    result = run(
        shared_sandbox,
        "find / -xdev -type s 2>/dev/null; grep -c docker.sock /proc/self/mountinfo;"
        "ls /var/run/docker.sock /run/docker.sock 2>&1 | grep -c 'No such file'",
    )

    assert result.stdout == "0\n2\n"


@docker_test
def test_a_fork_bomb_is_contained_and_reported(workspace: Path) -> None:
    with DockerEnvironment(workspace, DockerSettings(pids_limit=64)) as env:
        bombed = run(env, ":(){ :|:& };:; sleep 2", timeout=20)
        with pytest.raises(ExecutionTimeout, match="reached the pids limit \\(64\\)"):
            run(env, ":(){ :|:& };:; sleep 30", timeout=2)
        after = run(env, "ls -d /proc/[0-9]* | wc -l")

    assert bombed.extra["pids_limit_hit"] is True
    assert "Resource temporarily unavailable" in bombed.stderr
    # Left: docker-init, the agent, and this shell with its ls and wc.
    assert int(after.stdout) <= 5


@docker_test
def test_allocating_beyond_the_memory_limit_raises_out_of_memory(workspace: Path) -> None:
    with DockerEnvironment(workspace, DockerSettings(memory="128m")) as env:
        with pytest.raises(OutOfMemory, match="memory limit \\(128m, swap included\\)"):
            env.run(
                CommandRequest(
                    cwd=workspace,
                    argv=("python3", "-c", "x = b'x' * (512 * 1024 * 1024)"),
                    writable=False,
                )
            )
        from_a_shell_then = run(env, "python3 -c \"x = b'x' * (512 * 1024 * 1024)\"; echo $?")
        still_usable = run(env, "echo alive")

    assert from_a_shell_then.stdout == "137\n"  # reported, not an OOM of the call itself
    assert still_usable.stdout == "alive\n"


@docker_test
def test_a_timeout_kills_quickly_and_the_container_stays_usable(
    sandbox: DockerEnvironment,
) -> None:
    first = run(sandbox, "true")
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout, match="within 1s"):
        run(sandbox, "setsid sleep 300 & sleep 30", timeout=1)
    elapsed = time.monotonic() - started
    after = run(sandbox, "grep -l '^slee[p]' /proc/[0-9]*/cmdline; echo done")

    assert elapsed < 3
    assert after.stdout == "done\n"  # neither sleep survived, not even the setsid one
    assert after.extra["container"] == first.extra["container"]


@docker_test
def test_an_interrupted_call_takes_its_container_and_its_command_with_it(
    sandbox: DockerEnvironment, docker_engine: Any
) -> None:
    # Ctrl-C (or SIGTERM, which the CLI turns into the same interruption) while a call runs.
    first = run(sandbox, "true")
    main = threading.main_thread().ident
    assert main is not None
    interrupt = threading.Timer(1.0, signal.pthread_kill, (main, signal.SIGINT))
    interrupt.start()
    with pytest.raises(KeyboardInterrupt):
        run(sandbox, "sleep 300", timeout=120)
    interrupt.join()
    after = run(sandbox, "grep -l '^slee[p]' /proc/[0-9]*/cmdline; echo done")

    assert after.stdout == "done\n"
    assert after.extra["container"] != first.extra["container"]
    names = [c.name for c in docker_engine.containers.list(all=True)]
    assert first.extra["container"] not in names


@docker_test
def test_background_processes_do_not_outlive_their_call(sandbox: DockerEnvironment) -> None:
    started = time.monotonic()
    result = run(sandbox, "sleep 60 & echo started")
    after = run(sandbox, "grep -l '^slee[p]' /proc/[0-9]*/cmdline; echo done")

    assert result.stdout == "started\n"
    assert time.monotonic() - started < 3
    assert after.stdout == "done\n"


def _container_of(engine: Any, env: DockerEnvironment, mode: str) -> str:
    (found,) = engine.api.containers(
        filters={"label": [f"codecoder.session={env.session_id}", f"codecoder.mode={mode}"]}
    )
    return str(found["Id"])


def _later(seconds: float, action: Any) -> threading.Thread:
    def act() -> None:
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


@docker_test
def test_an_agent_that_stops_answering_is_replaced_after_timeout_and_grace(
    sandbox: DockerEnvironment, docker_engine: Any
) -> None:
    first = run(sandbox, "true")
    container = _container_of(docker_engine, sandbox, "ro")
    started = time.monotonic()
    # The engine freezes the whole container (the agent included): the host must not hang.
    freezer = _later(0.3, lambda: docker_engine.api.pause(container))
    with pytest.raises(ExecutionTimeout, match="agent did not answer either"):
        run(sandbox, "sleep 30", timeout=1)
    elapsed = time.monotonic() - started
    freezer.join()
    after = run(sandbox, "echo alive")

    assert 5 < elapsed < 10
    assert after.stdout == "alive\n"
    assert after.extra["container"] != first.extra["container"]


@docker_test
def test_a_container_that_dies_during_a_call_is_reported_and_replaced(
    sandbox: DockerEnvironment, docker_engine: Any
) -> None:
    first = run(sandbox, "true")
    container = _container_of(docker_engine, sandbox, "ro")
    killer = _later(0.3, lambda: docker_engine.api.kill(container))
    with pytest.raises(SandboxUnavailable, match="stopped during"):
        run(sandbox, "sleep 30", timeout=10)
    killer.join()
    after = run(sandbox, "echo alive")

    assert after.stdout == "alive\n"
    assert after.extra["container"] != first.extra["container"]


# --- the workspace and the protected paths -----------------------------------------------------


@docker_test
def test_the_workspace_is_read_only_for_a_read_only_call(sandbox: DockerEnvironment) -> None:
    result = run(sandbox, "echo data > out.txt", writable=False)

    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr
    assert not (sandbox.workspace / "out.txt").exists()


@docker_test
def test_a_writable_call_writes_the_workspace_as_its_owner(sandbox: DockerEnvironment) -> None:
    result = run(sandbox, "echo data > out.txt", writable=True)

    written = sandbox.workspace / "out.txt"
    assert result.exit_code == 0
    assert written.read_text() == "data\n"
    assert (written.stat().st_uid, written.stat().st_gid) == (10001, 10001)


@pytest.fixture
def protected_workspace(workspace: Path) -> Path:
    """A workspace whose protected paths the sandbox user owns, so only a mount keeps them safe."""
    (workspace / "codecoder.json").write_text('{"allowlist": {}}\n')
    (workspace / ".codecoder").mkdir()
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    for path in workspace.rglob("*"):
        os.chown(path, 10001, 10001)
    return workspace


@docker_test
@pytest.mark.parametrize(
    "attack",
    [
        """echo '{"allowlist": {"run_command:*": "AlwaysThisProject"}}' > codecoder.json""",
        "mv codecoder.json old.json",
        "rm -f codecoder.json",
        "printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit",
        "echo '[core] fsmonitor = id' >> .git/config",
        "rm -rf .git",
        "mv .git git-moved",
        "mkdir .codecoder/capabilities",
        "rm -rf .codecoder",
    ],
)
def test_protected_paths_stay_read_only_on_a_writable_call(
    protected_workspace: Path, attack: str
) -> None:
    before = {p: p.read_bytes() if p.is_file() else None for p in protected_workspace.rglob("*")}

    with DockerEnvironment(protected_workspace) as env:
        result = run(env, attack, writable=True)
        control = run(env, "echo fine > allowed.txt", writable=True)

    after = {p: p.read_bytes() if p.is_file() else None for p in protected_workspace.rglob("*")}
    after.pop(protected_workspace / "allowed.txt")
    assert result.exit_code != 0, result
    assert control.exit_code == 0
    assert after == before


@docker_test
def test_a_protected_path_created_by_a_writable_call_is_moved_out_and_reported(
    sandbox: DockerEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    # Below the top (at the top, a placeholder keeps it from being made at all: test_attacks).
    with pytest.raises(ExecutionFailed, match=r"created sub/\.git in the workspace"):
        plant = "mkdir -p sub/.git/hooks && echo 'id' > sub/.git/hooks/pre-commit"
        run(sandbox, plant, writable=True)
    after = run(sandbox, "ls -A sub", writable=True)

    (quarantined,) = (tmp_path / "state" / "codecoder" / "quarantine").iterdir()
    assert (quarantined / "0-.git" / "hooks" / "pre-commit").read_text() == "id\n"
    assert json.loads((quarantined / "quarantine.json").read_text())["paths"] == {
        "sub/.git": str(quarantined / "0-.git")
    }
    assert not (sandbox.workspace / "sub" / ".git").exists()
    assert after.stdout == ""


@docker_test
def test_a_protected_path_created_on_the_host_is_read_only_in_the_next_call(
    sandbox: DockerEnvironment,
) -> None:
    run(sandbox, "true", writable=True)  # warm read-write container, no sub/.git yet
    (sandbox.workspace / "sub" / ".git").mkdir(parents=True)
    for made in ("sub", "sub/.git"):
        os.chown(sandbox.workspace / made, 10001, 10001)

    result = run(sandbox, "touch sub/.git/planted", writable=True)

    assert "Read-only file system" in result.stderr
    assert list((sandbox.workspace / "sub" / ".git").iterdir()) == []


@docker_test
def test_a_symlinked_protected_path_refuses_writable_calls(sandbox: DockerEnvironment) -> None:
    (sandbox.workspace / "codecoder.json").symlink_to("/etc/passwd")

    with pytest.raises(ExecutionFailed, match=r"codecoder\.json in the workspace is a symbolic"):
        run(sandbox, "true", writable=True)


# --- lifecycle ---------------------------------------------------------------------------------


@docker_test
def test_every_container_is_labelled_and_hardened(
    sandbox: DockerEnvironment, docker_engine: Any
) -> None:
    run(sandbox, "true", writable=False)
    run(sandbox, "true", writable=True)

    found = sandboxes_of(docker_engine, sandbox.session_id)
    inspected = [docker_engine.api.inspect_container(c["Id"]) for c in found]
    labels = sorted(
        (i["Config"]["Labels"]["codecoder.mode"], i["Config"]["Labels"]) for i in inspected
    )
    hardening = [
        {
            "NetworkMode": i["HostConfig"]["NetworkMode"],
            "ReadonlyRootfs": i["HostConfig"]["ReadonlyRootfs"],
            "CapDrop": i["HostConfig"]["CapDrop"],
            "CapAdd": i["HostConfig"]["CapAdd"],
            "SecurityOpt": i["HostConfig"]["SecurityOpt"],
            "PidsLimit": i["HostConfig"]["PidsLimit"],
            "Memory": i["HostConfig"]["Memory"],
            "MemorySwap": i["HostConfig"]["MemorySwap"],
            "NanoCpus": i["HostConfig"]["NanoCpus"],
            "Privileged": i["HostConfig"]["Privileged"],
            "User": i["Config"]["User"],
            "Tmpfs": i["HostConfig"]["Tmpfs"],
            "Sockets": [m["Source"] for m in i["Mounts"] if "docker.sock" in m["Source"]],
        }
        for i in inspected
    ]

    assert [mode for mode, _ in labels] == ["ro", "rw"]
    for _, label in labels:
        assert label["codecoder"] == "1"
        assert label["codecoder.session"] == sandbox.session_id
        assert label["codecoder.pid"] == str(os.getpid())
    tmpfs = {
        "/tmp": f"rw,noexec,nosuid,nodev,size={64 * 1024**2}",
        "/opt/codecoder/capability": f"rw,nosuid,nodev,size={96 * 1024**2},mode=755",
    }
    # The writable one has the egress proxy (the default): its socket's directory is mounted
    # in a tmpfs only root (the agent) may enter. Still no network.
    relay = {"/opt/codecoder/relay": "ro,noexec,nosuid,nodev,size=64k,mode=700"}
    modes = [i["Config"]["Labels"]["codecoder.mode"] for i in inspected]
    by_mode = {mode: h.pop("Tmpfs") for mode, h in zip(modes, hardening, strict=True)}
    # On an engine of another machine the default has no egress (test_remote runs this too).
    assert by_mode == {"ro": tmpfs, "rw": tmpfs | relay if engine_is_local() else tmpfs}
    assert (
        hardening
        == [
            {
                "NetworkMode": "none",
                "ReadonlyRootfs": True,
                "CapDrop": ["ALL"],
                # Only for the agent, which drops them before anything runs (see below).
                "CapAdd": ["SETUID", "SETGID", "KILL", "SETPCAP"],
                "SecurityOpt": ["no-new-privileges:true"],
                "PidsLimit": 256,
                "Memory": 1024**3,
                "MemorySwap": 1024**3,
                "NanoCpus": 10**9,
                "Privileged": False,
                "User": "0:0",
                "Sockets": [],
            }
        ]
        * 2
    )


@docker_test
def test_close_leaves_no_container(workspace: Path, docker_engine: Any) -> None:
    env = DockerEnvironment(workspace)
    run(env, "true", writable=False)
    run(env, "true", writable=True)
    assert len(sandboxes_of(docker_engine, env.session_id)) == 2

    env.close()

    assert containers_of(docker_engine, env.session_id) == []
    with pytest.raises(SandboxUnavailable, match="closed"):
        run(env, "true")


@docker_test
def test_a_sigkilled_runtimes_containers_are_removed_by_the_next_start(
    workspace: Path, docker_engine: Any
) -> None:
    session = f"killed-{uuid.uuid4().hex[:8]}"
    program = textwrap.dedent(
        f"""
        import time
        from codecoder.environments.base import CommandRequest
        from codecoder.environments.docker.environment import DockerEnvironment
        env = DockerEnvironment({str(workspace)!r}, session_id={session!r})
        for writable in (False, True):
            env.run(CommandRequest(cwd=env.workspace, argv=("true",), writable=writable))
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    runtime = subprocess.Popen(
        [sys.executable, "-c", program], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    assert runtime.stdout is not None
    assert runtime.stdout.readline() == "ready\n"
    runtime.send_signal(signal.SIGKILL)
    runtime.wait()
    runtime.stdout.close()
    left_behind = len(sandboxes_of(docker_engine, session))

    with DockerEnvironment(workspace) as next_runtime:
        next_runtime.start()
        remaining = containers_of(docker_engine, session)

    assert left_behind == 2
    assert remaining == []


@docker_test
def test_a_live_runtimes_containers_are_left_alone(workspace: Path, docker_engine: Any) -> None:
    with DockerEnvironment(workspace) as first:
        run(first, "true")
        with DockerEnvironment(workspace) as second:
            second.start()
        survivors = sandboxes_of(docker_engine, first.session_id)

    assert len(survivors) == 1


@docker_test
def test_parallel_calls_with_timeouts_and_failures_mixed_in(
    workspace: Path, docker_engine: Any
) -> None:
    def call(i: int) -> tuple[int, str]:
        try:
            if i % 10 == 3:
                run(env, "sleep 10", timeout=0.5)
                return i, "no timeout?"
            result = run(env, f"echo {i}; exit {i % 4}", writable=i % 5 == 0)
            return i, f"{result.exit_code}:{result.stdout.strip()}"
        except ExecutionTimeout:
            return i, "timeout"

    with DockerEnvironment(workspace) as env, ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = dict(pool.map(call, range(60)))
        session = env.session_id

    assert outcomes == {i: "timeout" if i % 10 == 3 else f"{i % 4}:{i}" for i in range(60)}
    assert containers_of(docker_engine, session) == []


# --- errors ------------------------------------------------------------------------------------


def test_an_unreachable_engine_raises_sandbox_unavailable_saying_what_to_do(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")

    with pytest.raises(SandboxUnavailable) as raised:
        DockerEnvironment(workspace).run(CommandRequest(cwd=workspace, argv=("true",)))

    message = str(raised.value)
    assert "no Docker engine answers at unix:///nonexistent" in message
    assert "scripts/docker-setup.sh" in message


@docker_test
def test_a_missing_image_raises_sandbox_unavailable_saying_how_to_build_it(
    workspace: Path,
) -> None:
    env = DockerEnvironment(workspace, DockerSettings(image="codecoder-no-such-image"))

    with pytest.raises(SandboxUnavailable, match="docker build -t codecoder-sandbox"):
        env.start()


SANDBOX_IMAGE_OBJECT = SimpleNamespace(labels={LABEL_AGENT: str(AGENT_PROTOCOL)})


def _failing_client(stage: str, error: BaseException) -> Any:
    def maybe(at: str, result: Any = None) -> Any:
        if at == stage:
            raise error
        return result

    return SimpleNamespace(
        ping=lambda: maybe("ping", True),
        images=SimpleNamespace(get=lambda name: maybe("image", SANDBOX_IMAGE_OBJECT)),
        containers=SimpleNamespace(create=lambda **kw: maybe("create")),
        api=SimpleNamespace(
            containers=lambda **kw: maybe("list", []),
            volumes=lambda **kw: maybe("list", {"Volumes": []}),
        ),
        close=lambda: None,
    )


ENGINE_ERRORS = [
    docker.errors.DockerException("Error while fetching server API version"),
    docker.errors.APIError("500 Server Error"),
    docker.errors.NotFound("no such container"),
    docker.errors.ImageNotFound("no such image"),
    requests.exceptions.ConnectionError("connection refused"),
    requests.exceptions.ReadTimeout("read timed out"),
    ConnectionRefusedError(111, "Connection refused"),
    FileNotFoundError(2, "No such file or directory"),
]


@pytest.mark.parametrize("stage", ["factory", "ping", "image", "list", "create"])
@pytest.mark.parametrize("error", ENGINE_ERRORS, ids=lambda e: type(e).__name__)
def test_every_engine_error_is_mapped_to_sandbox_unavailable(
    workspace: Path, stage: str, error: BaseException
) -> None:
    def factory() -> Any:
        if stage == "factory":
            raise error
        return _failing_client(stage, error)

    env = DockerEnvironment(workspace, client_factory=factory)

    with pytest.raises(SandboxUnavailable) as raised:
        env.run(CommandRequest(cwd=workspace, argv=("true",)))

    assert raised.value.__cause__ is error


# --- settings ----------------------------------------------------------------------------------


def test_the_default_settings_are_not_looser_than_themselves() -> None:
    assert DockerSettings().looser_than_default() == []
    assert DockerSettings(memory="256m", cpus=0.5, pids_limit=64).looser_than_default() == []


def test_no_network_and_the_default_egress_are_not_looser_and_other_networks_are() -> None:
    """The default (`ask`: the egress proxy, each host asked) and `none` (no network) give no
    more than the default; an allowlist (other ports, addresses) and an engine network do."""
    assert DockerSettings().network == "ask" and DockerSettings().asks_hosts
    assert DockerSettings(network="none").looser_than_default() == []
    assert [
        s.name for s in DockerSettings(network={"allow": ["x.test"]}).looser_than_default()
    ] == ["network"]
    assert [s.name for s in DockerSettings(network="host").looser_than_default()] == ["network"]


def test_loosened_settings_are_each_reported() -> None:
    settings = DockerSettings(
        memory="2g",
        cpus=2,
        pids_limit=1024,
        tmpfs_size="1g",
        network="bridge",
        read_only_rootfs=False,
        extra_writable_paths=("/home/sandbox",),
        disk_budget="8g",
    )

    looser = settings.looser_than_default()

    assert [(s.name, s.value, s.default) for s in looser] == [
        ("memory", "2g", "1g"),
        ("cpus", 2, 1.0),
        ("pids_limit", 1024, 256),
        ("tmpfs_size", "1g", "64m"),
        ("network", "bridge", "ask"),
        ("read_only_rootfs", False, True),
        ("extra_writable_paths", ("/home/sandbox",), ()),
        ("disk_budget", "8g", "1g"),
    ]
    assert all(isinstance(s, LooserSetting) and s.why for s in looser)


@pytest.mark.parametrize(
    "options",
    [
        {"memory": "lots"},
        {"memory": "1m"},
        {"cpus": 0},
        {"pids_limit": 2},
        {"extra_writable_paths": ("relative",)},
        {"extra_writable_paths": ("/workspace/x",)},
        {"user": "0"},
        {"user": "0:0"},
        {"user": "1000:0"},
        {"disk_budget": "0"},
    ],
)
def test_nonsensical_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DockerSettings(**options)


@pytest.mark.docker
@pytest.mark.parametrize("writable", [False, True])
def test_a_workspace_only_its_owner_may_enter_runs_commands(
    workspace: Path, writable: bool
) -> None:
    """Mode 0700 (a umask of 077, a private directory): the agent, root without
    CAP_DAC_OVERRIDE, cannot enter it; the command user, its owner, can, and is who enters it."""
    (workspace / "src").mkdir(mode=0o700)
    os.chown(workspace / "src", 10001, 10001)
    workspace.chmod(0o700)
    with DockerEnvironment(workspace) as env:
        top = env.run(CommandRequest(cwd=workspace, argv=("pwd",), writable=writable))
        sub = env.run(CommandRequest(cwd=workspace / "src", argv=("pwd",), writable=writable))

    assert (top.exit_code, top.stdout) == (0, "/workspace\n")
    assert (sub.exit_code, sub.stdout) == (0, "/workspace/src\n")
