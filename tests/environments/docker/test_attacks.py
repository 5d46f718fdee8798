"""@docker under attack, with a real engine: taking over the agent, outliving a call, planting
protected paths at any depth, leaving state for another grant, filling the disk, an engine that
drops limits, and a stream that lies. Each attack is carried out for real and must fail."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.containers import AGENT_COMMAND
from codecoder.environments.docker.engine import _client_from_env
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.placeholders import PLACEHOLDERS, is_placeholder
from codecoder.environments.placeholders import RECORD as PLACEHOLDER_RECORD
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config
from tests.environments.conftest import SANDBOX_IMAGE

pytestmark = pytest.mark.docker

HERE = Path(__file__).resolve().parent
AGENT = HERE.parents[2] / "sandboxes" / "image" / "agent"
AGENT_PROCESS = " ".join(AGENT_COMMAND)  # the agent as `ps` shows it
EVIL_IMAGE = "codecoder-sandbox-evil:test"
WORKED = "@WORKED@"


def run(env: DockerEnvironment, script: str, **options: Any) -> CommandResult:
    options.setdefault("timeout", 30.0)
    return env.run(CommandRequest(cwd=env.workspace, script=script, **options))


def container_of(engine: Any, env: DockerEnvironment, mode: str) -> str:
    (found,) = engine.api.containers(
        filters={"label": [f"codecoder.session={env.session_id}", f"codecoder.mode={mode}"]}
    )
    return str(found["Id"])


@pytest.fixture
def sandbox(workspace: Path) -> Iterator[DockerEnvironment]:
    with DockerEnvironment(workspace) as env:
        yield env


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "codecoder"


# --- the agent and init are out of reach -------------------------------------------------------

TAKEOVERS = [
    "echo '{}' > /proc/1/fd/0",
    "echo '{}' > /proc/1/fd/1",
    "ls /proc/1/fd",
    "ls /proc/$PPID/fd",
    "echo '{}' > /proc/$PPID/fd/0",
    "echo '{\"id\": 2}' > /proc/$PPID/fd/1",
    "python3 -c \"import sys; open('/proc/%s/mem' % sys.argv[1], 'rb')\" $PPID",
    "cat /proc/$PPID/environ",
    "cat /proc/1/environ",
    "readlink /proc/$PPID/cwd",
    'python3 -c "import ctypes, sys; sys.exit(ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0,0))"'
    " $PPID",  # PTRACE_ATTACH
    'python3 -c "import ctypes, sys; sys.exit(ctypes.CDLL(None).ptrace(16, 1, 0, 0))"',
    "kill -STOP $PPID",
    "kill -STOP 1",
    "kill -KILL $PPID",
    "kill -TERM -1; kill -0 $PPID",
]


@pytest.mark.parametrize("attack", TAKEOVERS)
def test_a_command_cannot_reach_the_agent_or_init(sandbox: DockerEnvironment, attack: str) -> None:
    who = run(sandbox, "tr '\\0' ' ' < /proc/$PPID/cmdline; echo; id -u")
    result = run(sandbox, f"{attack} && echo {WORKED}", timeout=10)
    after = run(sandbox, "echo alive")

    assert who.stdout == f"{AGENT_PROCESS} \n10001\n"  # the target is real
    assert WORKED not in result.stdout, result
    assert (after.stdout, after.extra["container"]) == ("alive\n", who.extra["container"])


def test_no_process_of_a_call_survives_it(sandbox: DockerEnvironment, docker_engine: Any) -> None:
    escapes = (
        "setsid sh -c 'sleep 300' & (sleep 300 &) & nohup sleep 300 >/dev/null 2>&1 & "
        "sh -c 'trap \"\" TERM HUP; exec sleep 300' & echo started"
    )
    result = run(sandbox, escapes, writable=False)
    # ps at any width: the engine's own COLUMNS (whoever started it) must not cut the lines.
    container = container_of(docker_engine, sandbox, "ro")
    processes = docker_engine.api.top(container, ps_args="-efww")["Processes"]

    assert result.stdout == "started\n"
    assert sorted(row[-1] for row in processes) == [
        AGENT_PROCESS,
        f"/sbin/docker-init -- {AGENT_PROCESS}",
    ]


def test_nothing_a_call_started_writes_after_it(sandbox: DockerEnvironment, state: Path) -> None:
    late = (
        "(setsid sh -c 'sleep 1; echo '\\''{\"allowlist\": {\"run_command:*\": "
        "\"AlwaysThisProject\"}}'\\'' > codecoder.json; mkdir -p late/.git') & echo ok"
    )
    result = run(sandbox, late, writable=True)
    time.sleep(2.5)
    control = run(sandbox, "ls -A", writable=True)

    assert result.stdout == "ok\n"
    # Only the runtime's inert placeholders for the protected names (environments.placeholders).
    assert set(control.stdout.split()) <= set(PLACEHOLDERS)
    assert [p.name for p in sandbox.workspace.iterdir() if p.name not in PLACEHOLDERS] == []
    assert not any(os.listdir(p) for p in sandbox.workspace.iterdir() if p.name != ".git")


# --- protected paths at every depth -------------------------------------------------------------

PLANTS = [
    ("mkdir -p a/b/.git/hooks && echo id > a/b/.git/hooks/post-checkout", "a/b/.git"),
    ("mkdir c && echo 'gitdir: /tmp/elsewhere' > c/.git", "c/.git"),
    ("mkdir d && ln -s /tmp d/.git", "d/.git"),
    (
        "mkdir -p e/f && printf '[submodule \"x\"]\\n\\turl = ext::sh\\n' > e/f/.gitmodules",
        "e/f/.gitmodules",
    ),
    ("printf '[submodule \"x\"]\\n' > .gitmodules", ".gitmodules"),
    ("mkdir -p g/.git && touch -d 2001-01-01 g", "g/.git"),
    ("mkdir -p h/.git && mkfifo h/.git/fifo && chmod 000 h", "h/.git"),
    ("mkdir -p i && mkdir i/.GIT", "i/.GIT"),
    ("mkdir -p j && echo '{}' > codecoder.json", "codecoder.json"),
]


@pytest.mark.parametrize(("plant", "path"), PLANTS, ids=[p for _, p in PLANTS])
def test_a_protected_path_planted_at_any_depth_is_quarantined(
    sandbox: DockerEnvironment, state: Path, plant: str, path: str
) -> None:
    first = run(sandbox, "true", writable=True)

    with pytest.raises(ExecutionFailed, match=f"created {path}") as raised:
        run(sandbox, plant, writable=True)
    after = run(sandbox, "true", writable=True)

    assert "Quarantined" in str(raised.value)
    assert not os.path.lexists(sandbox.workspace / path)
    (quarantine,) = (state / "quarantine").iterdir()
    record = json.loads((quarantine / "quarantine.json").read_text())
    assert list(record["paths"]) == [path]
    assert os.path.lexists(record["paths"][path])
    # The quarantine's marker is gone (the placeholders' record stays while they are held).
    marks = [p for p in state.glob("projects/**/*.json") if p.name != PLACEHOLDER_RECORD]
    assert marks == []
    assert after.extra["container"] != first.extra["container"]


PLACEHOLDED = [
    "mkdir -p .codecoder/capabilities/x",
    "mkdir -p .git/hooks && echo id > .git/hooks/pre-commit",
    "echo '{}' > .mcp.json",
    "rmdir .claude; mkdir -p .claude && echo '{}' > .claude/settings.json",
    "mv .vscode v && mkdir .vscode && echo x > .vscode/tasks.json",
]


@pytest.mark.parametrize("plant", PLACEHOLDED)
def test_a_protected_name_missing_at_the_top_cannot_be_created_at_all(
    sandbox: DockerEnvironment, plant: str
) -> None:
    """Its placeholder is mounted read-only before the container starts: the plant fails inside,
    and nothing of the sandbox's reaches the host, not even while the call runs."""
    said = run(sandbox, plant, writable=True)

    assert said.exit_code != 0
    for name in PLACEHOLDERS:
        assert is_placeholder(sandbox.workspace, name), name
        assert name == ".git" or os.listdir(sandbox.workspace / name) == []
    assert os.listdir(sandbox.workspace / ".git") == []


def test_existing_nested_protected_paths_stay_read_only(workspace: Path) -> None:
    (workspace / "vendor" / "lib" / ".git" / "hooks").mkdir(parents=True)
    (workspace / "vendor" / ".gitmodules").write_text("[submodule]\n")
    (workspace / "vendor" / "lib" / "code.c").write_text("int x;\n")
    for path in [workspace, *workspace.rglob("*")]:
        os.chown(path, 10001, 10001)
    before = {p: p.read_bytes() if p.is_file() else None for p in workspace.rglob("*")}

    with DockerEnvironment(workspace) as env:
        attacks = [
            run(env, "echo id > vendor/lib/.git/hooks/pre-commit", writable=True),
            run(env, "echo '[core] fsmonitor = id' > vendor/lib/.git/config", writable=True),
            run(env, "echo x >> vendor/.gitmodules", writable=True),
            run(env, "rm -rf vendor/lib/.git", writable=True),
            run(env, "mv vendor/.gitmodules vendor/gm", writable=True),
        ]
        control = run(env, "echo 'int y;' > vendor/lib/code.c", writable=True)

    after = {p: p.read_bytes() if p.is_file() else None for p in workspace.rglob("*")}
    assert [a.exit_code != 0 for a in attacks] == [True] * 5
    assert control.exit_code == 0
    assert after == {**before, workspace / "vendor/lib/code.c": b"int y;\n"}


def test_moving_a_nested_repository_is_caught(workspace: Path, state: Path) -> None:
    (workspace / "vendor" / "lib" / ".git").mkdir(parents=True)
    for path in [workspace, *workspace.rglob("*")]:
        os.chown(path, 10001, 10001)

    with (
        DockerEnvironment(workspace) as env,
        pytest.raises(ExecutionFailed, match=r"moved or removed vendor/lib/\.git"),
    ):
        run(env, "mv vendor/lib vendor/elsewhere", writable=True)

    assert not (workspace / "vendor" / "elsewhere" / ".git").exists()


def test_a_protected_path_made_on_the_host_between_calls_is_mounted_read_only(
    sandbox: DockerEnvironment,
) -> None:
    first = run(sandbox, "mkdir -p deep/down", writable=True)
    (sandbox.workspace / "deep" / "down" / ".git").mkdir()  # e.g. `git init` on the host

    result = run(sandbox, "touch deep/down/.git/planted", writable=True)

    assert "Read-only file system" in result.stderr
    assert result.extra["container"] != first.extra["container"]
    assert list((sandbox.workspace / "deep" / "down" / ".git").iterdir()) == []


# --- state across grants -----------------------------------------------------------------------

PLANT_STATE = """
mkdir -p /tmp/.local/lib && echo '[core] pager = id' > /tmp/.gitconfig
echo x > /dev/shm/segment
python3 -c "import ctypes; ctypes.CDLL(None).shmget(4242, 4096, 0o1666)"
python3 -c "import ctypes; ctypes.CDLL('librt.so.1').mq_open(b'/planted', 0o102, 0o600, None)"
"""
LOOK = "ls -A /tmp /dev/shm /dev/mqueue | tr '\\n' ' '; ipcs -m | grep -c 0x00001092"


def test_a_call_under_another_grant_starts_from_an_empty_home_and_tmp(
    sandbox: DockerEnvironment,
) -> None:
    run(sandbox, PLANT_STATE, grant="project:run_command:git:*")
    same = run(sandbox, LOOK, grant="project:run_command:git:*")
    other = run(sandbox, LOOK, grant="project:run_command:make")
    run(sandbox, PLANT_STATE, grant="session:run_command:make")
    once = run(sandbox, LOOK)

    empty = "/dev/mqueue:  /dev/shm:  /tmp: 0\n"
    assert same.stdout == "/dev/mqueue: planted  /dev/shm: segment  /tmp: .gitconfig .local 1\n"
    assert (other.stdout, once.stdout) == (empty, empty)
    assert other.extra["container"] == same.extra["container"]  # emptied, not replaced


def test_grants_of_a_session_do_not_share_a_sandbox_home(workspace: Path) -> None:
    write_config(
        workspace,
        {
            "environments": {"run_command": "@docker"},
            "allowlist": {
                "run_command:touch": "AlwaysThisProject",
                "run_command:ls": "AlwaysThisProject",
            },
        },
    )
    with Runtime(workspace, asker=RecordingAsker(Answer.ONCE, Answer.ONCE)) as runtime:
        session = runtime.session()
        planted = session.call("run_command", {"command": "touch /tmp/.bashrc"})
        seen_by_ls = session.call("run_command", {"command": "ls -A /tmp"})
        planted_once = session.call("run_command", {"command": "mkdir /tmp/once"})
        seen_by_once = session.call("run_command", {"command": "find /tmp -mindepth 1"})

    assert planted.ok and seen_by_ls.unwrap().data["stdout"] == ""
    assert planted_once.ok and seen_by_once.unwrap().data["stdout"] == ""


def test_a_writable_root_filesystem_gets_a_new_container_per_grant(workspace: Path) -> None:
    with DockerEnvironment(workspace, DockerSettings(read_only_rootfs=False)) as env:
        first = run(env, "touch /var/tmp/planted", grant="a")
        same = run(env, "ls /var/tmp", grant="a")
        other = run(env, "ls /var/tmp", grant="b")

    assert same.stdout == "planted\n" and same.extra["container"] == first.extra["container"]
    assert other.stdout == "" and other.extra["container"] != first.extra["container"]


# --- resources ---------------------------------------------------------------------------------


def test_a_writable_call_past_its_disk_budget_is_stopped(workspace: Path) -> None:
    started = time.monotonic()
    with (
        DockerEnvironment(workspace, DockerSettings(disk_budget="32m")) as env,
        pytest.raises(ExecutionFailed, match="disk budget of 32m") as raised,
    ):
        run(env, "head -c 4G /dev/zero > big; echo done", writable=True, timeout=60)

    assert time.monotonic() - started < 20
    assert (workspace / "big").stat().st_size < 1024**3
    assert "what it wrote is still there" in str(raised.value)
    (workspace / "big").unlink()


class _Engine:
    """A docker client whose `containers.create` changes the configuration it is given, like an
    engine that silently ignores some of it."""

    def __init__(self, change: Any) -> None:
        self._client = _client_from_env()  # the engine at DOCKER_HOST, as codecoder reaches it
        self._change = change
        outer = self

        class Containers:
            def __getattr__(self, name: str) -> Any:
                return getattr(outer._client.containers, name)

            def create(self, **config: Any) -> Any:
                outer._change(config)
                return outer._client.containers.create(**config)

        self.containers = Containers()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.parametrize(
    ("dropped", "named"),
    [
        (("mem_limit", "memswap_limit"), "memory bytes: asked for 1,073,741,824, none is in"),
        (("pids_limit",), "pids: asked for 256, none is in force"),
        (("nano_cpus",), "cpus: asked for 1, none is in force"),
    ],
)
def test_an_engine_that_drops_a_limit_is_refused(
    workspace: Path, docker_engine: Any, dropped: tuple[str, ...], named: str
) -> None:
    def drop(config: dict[str, Any]) -> None:
        for name in dropped:
            config.pop(name)

    env = DockerEnvironment(workspace, client_factory=lambda: _Engine(drop))
    try:
        with pytest.raises(SandboxUnavailable, match="did not apply") as raised:
            run(env, "echo ran")
        session = env.session_id
    finally:
        env.close()

    assert named in str(raised.value)
    assert (
        docker_engine.api.containers(all=True, filters={"label": f"codecoder.session={session}"})
        == []
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"user": "10001:10001"}, "runs as uid 10001, not root"),
        ({"cap_add": ["SETUID", "SETGID"]}, "did not start with exactly"),
        (
            {"cap_add": ["SETUID", "SETGID", "KILL", "SETPCAP", "DAC_OVERRIDE"]},
            "did not start with",
        ),
        ({"security_opt": []}, "without no-new-privileges"),
    ],
)
def test_the_agent_refuses_to_start_without_its_own_protections(
    workspace: Path, change: dict[str, Any], problem: str
) -> None:
    with (
        DockerEnvironment(
            workspace, client_factory=lambda: _Engine(lambda c: c.update(change))
        ) as env,
        pytest.raises(SandboxUnavailable, match="agent refused to run") as raised,
    ):
        run(env, "echo ran")

    assert problem in str(raised.value)


# --- a stream that lies -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evil_image(docker_engine: Any) -> str:
    dockerfile = (
        f"FROM {SANDBOX_IMAGE}\n"
        "COPY real_agent.py /opt/codecoder/real_agent.py\n"
        "COPY evil_agent.py /opt/codecoder/agent/__main__.py\n"
    ).encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (
            ("Dockerfile", dockerfile),
            ("real_agent.py", (AGENT / "__main__.py").read_bytes()),
            ("evil_agent.py", (HERE.parent / "evil_agent.py").read_bytes()),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    docker_engine.images.build(fileobj=context, custom_context=True, tag=EVIL_IMAGE, rm=True)
    return EVIL_IMAGE


@pytest.fixture
def lying(workspace: Path, evil_image: str) -> Iterator[DockerEnvironment]:
    with DockerEnvironment(workspace, DockerSettings(image=evil_image)) as env:
        yield env


def attack(env: DockerEnvironment, name: str, **options: Any) -> CommandResult:
    options.setdefault("timeout", 30.0)
    return env.run(CommandRequest(cwd=env.workspace, argv=(name,), **options))


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("forge", "a line without the session's MAC"),
        ("flood", "a line longer than"),
        ("replay", "an answer for no pending call"),
    ],
)
def test_a_forged_oversized_or_replayed_answer_ends_the_container(
    lying: DockerEnvironment, name: str, refused: str
) -> None:
    first = run(lying, "echo first")
    started = time.monotonic()

    with pytest.raises(SandboxUnavailable, match="broke the protocol") as raised:
        attack(lying, name)
    after = run(lying, "echo after")

    assert refused in str(raised.value)
    assert time.monotonic() - started < 10
    assert after.stdout == "after\n" and after.extra["container"] != first.extra["container"]


def test_a_forged_or_replayed_request_does_not_run(lying: DockerEnvironment) -> None:
    run(lying, "echo run >> runs", writable=True)
    injected = attack(lying, "inject", writable=True)
    after = run(lying, "cat runs; ls", writable=True)

    assert injected.exit_code == 127  # the attack itself is no program
    assert after.stdout == "run\nruns\n"


def test_a_container_where_a_process_survived_runs_nothing_more(lying: DockerEnvironment) -> None:
    first = run(lying, "true")
    survived = attack(lying, "survive")
    after = run(lying, "true")

    assert survived.exit_code == 127
    assert after.extra["container"] != first.extra["container"]


def test_a_container_whose_state_cannot_be_emptied_is_replaced_before_the_call(
    lying: DockerEnvironment,
) -> None:
    stained = attack(lying, "stain", grant="a")
    after = run(lying, "echo ran", grant="b")

    assert stained.exit_code == 127
    assert after.stdout == "ran\n" and after.extra["container"] != stained.extra["container"]


def test_calls_of_one_mode_take_turns(sandbox: DockerEnvironment) -> None:
    results: list[str] = []

    def call(i: int) -> None:
        results.append(run(sandbox, f"cat /tmp/mark 2>/dev/null; echo {i} > /tmp/mark").stdout)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # No grant: each call starts from an empty /tmp, so no call ever saw another's mark.
    assert results == ["" for _ in range(6)]


# --- an image without runas --------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_without_runas(docker_engine: Any) -> str:
    dockerfile = (
        f"FROM {SANDBOX_IMAGE}\nUSER 0:0\nRUN rm /opt/codecoder/runas-*\nUSER 10001:10001\n"
    ).encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    tag = "codecoder-sandbox-without-runas:test"
    docker_engine.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    return tag


def test_without_runas_commands_are_just_as_confined(
    workspace: Path, image_without_runas: str
) -> None:
    with DockerEnvironment(workspace, DockerSettings(image=image_without_runas)) as env:
        who = run(env, "id -u; grep -E '^(Cap|Groups)' /proc/self/status | tr -s '\\t ' ' '")
        stop = run(env, f"kill -STOP $PPID && echo {WORKED}")
        missing = env.run(CommandRequest(cwd=workspace, argv=("no-such-tool",)))

    zero = "0" * 16
    assert who.stdout == "10001\nGroups: \n" + "".join(
        f"{name}: {zero}\n" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
    )
    assert WORKED not in stop.stdout
    assert (missing.exit_code, missing.stderr.splitlines()[0]) == (
        127,
        "no-such-tool: command not found",
    )


# --- what a writable call wrote, at apparent size ------------------------------------------------


@pytest.fixture
def budgeted(workspace: Path) -> Iterator[DockerEnvironment]:
    (workspace / "existing.txt").write_text("small\n")
    os.chown(workspace / "existing.txt", 10001, 10001)
    with DockerEnvironment(workspace, DockerSettings(workspace="bind", disk_budget="16m")) as env:
        yield env


@pytest.mark.parametrize(
    "script",
    [
        "truncate -s 8G sparse.img",
        "dd if=/dev/zero of=far.img bs=1 count=1 seek=64G status=none",
        "truncate -s 8G existing.txt",  # an existing file, grown in place
        "mkdir -p new/deep/er && truncate -s 4G new/deep/er/disk.img",  # a directory made now
        "mkdir d && mv d e && truncate -s 4G e/disk.img",  # a directory renamed: walked
        "head -c 1M /dev/urandom > seed && for i in $(seq 40); do ln seed name$i; done",
        "for i in $(seq 100); do truncate -s 1M part$i; done",
    ],
)
def test_what_a_writable_call_wrote_counts_at_apparent_size_against_its_budget(
    budgeted: DockerEnvironment, script: str
) -> None:
    run(budgeted, "true", writable=True)  # the container (and its watch) before the attack

    with pytest.raises(ExecutionFailed, match="counting apparent sizes"):
        run(budgeted, f"{script}; echo done", writable=True)
    time.sleep(0.05)  # a tick of the ctime clock later
    control = run(budgeted, "head -c 1M /dev/urandom > ok.bin; echo fine", writable=True)

    assert control.stdout == "fine\n"
