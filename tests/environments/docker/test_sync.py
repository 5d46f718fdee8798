"""Sync mode (`"docker": {"workspace": "sync"}`, and automatically for a remote DOCKER_HOST):
the workspace in a per-session volume, kept in step both ways, against a real engine; then the
copy-back on its own, fed archives a compromised agent could write."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT
from codecoder.environments.docker.containers import EGRESS_MOUNT
from codecoder.environments.docker.engine import engine_is_local
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.sync import WorkspaceVolume
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from tests.environments.docker.changesets import archive, snapshot

docker_test = pytest.mark.docker


def sync_workspace(workspace: Path, budget: str) -> DockerEnvironment:
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print('hello')\n")
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    return DockerEnvironment(workspace, DockerSettings(workspace="sync", disk_budget=budget))


@pytest.fixture
def synced(workspace: Path) -> Iterator[DockerEnvironment]:
    # A budget no other writer of the machine's disk reaches during a call (the in-call
    # budget watches the whole filesystem's used space): the tests below are not about it.
    with sync_workspace(workspace, "256m") as env:
        yield env


@pytest.fixture
def tight(workspace: Path) -> Iterator[DockerEnvironment]:
    """A sandbox with a budget of 2 MiB, for the tests about it."""
    with sync_workspace(workspace, "2m") as env:
        yield env


def run(env: DockerEnvironment, script: str, **options: Any) -> CommandResult:
    options.setdefault("timeout", 30.0)
    return env.run(CommandRequest(cwd=env.workspace, script=script, **options))


def mounts_of(client: Any, env: DockerEnvironment) -> list[dict[str, Any]]:
    found = []
    for summary in client.api.containers(
        all=True, filters={"label": f"codecoder.session={env.session_id}"}
    ):
        found += client.api.inspect_container(summary["Id"])["Mounts"]
    return found


@docker_test
def test_no_container_has_a_bind_mount_and_the_workspace_is_seen_whole(
    synced: DockerEnvironment, docker_engine: Any
) -> None:
    read = run(synced, "cat src/main.py; cat .git/config")
    write = run(synced, "echo made > made.txt", writable=True)
    mounts = mounts_of(docker_engine, synced)

    # The one bind mount a local engine gives a writable sandbox is its egress directory (the
    # default's proxy socket), never anything of the workspace; a remote engine has none.
    egress = [m for m in mounts if m["Destination"] == EGRESS_MOUNT]
    workspace = [m for m in mounts if m not in egress]

    assert (read.stdout, write.exit_code) == ("print('hello')\n[core]\n", 0)
    assert {m["Type"] for m in workspace} == {"volume"}
    assert {m["Destination"] for m in workspace} == {"/workspace", "/opt/codecoder/outbox"}
    expected = [("bind", False)] if engine_is_local() else []
    assert [(m["Type"], m["RW"]) for m in egress] == expected
    assert str(synced.workspace) not in json.dumps(mounts)


@docker_test
def test_what_a_writable_call_changes_comes_back_and_host_edits_go_in(
    synced: DockerEnvironment,
) -> None:
    changed = run(
        synced,
        "echo new > new.txt; mkdir -p deep/er; echo x > deep/er/f; echo edit >> src/main.py;"
        "ln -s src/main.py link; rm -f gone.txt",
        writable=True,
    )
    (synced.workspace / "host.txt").write_text("from the host\n")
    (synced.workspace / "deep" / "er" / "f").unlink()
    seen = run(synced, "cat host.txt; ls deep/er | wc -l")

    workspace = synced.workspace
    assert changed.extra["synced"] == {
        "written": 6,
        "deleted": 0,
        "kept_in_sandbox": [],
        "unreadable": [],
    }
    assert (workspace / "new.txt").read_text() == "new\n"
    assert (workspace / "src" / "main.py").read_text() == "print('hello')\nedit\n"
    assert os.readlink(workspace / "link") == "src/main.py"
    assert (workspace / "new.txt").stat().st_uid == 10001
    assert seen.stdout == "from the host\n0\n"


@docker_test
@pytest.mark.parametrize(
    "script",
    [
        "umask 077; echo private > p.txt; echo open > o.txt",  # a file only its owner reads
        "mkdir -m 700 priv && echo private > priv/p.txt",  # a directory only its owner lists
        "mkdir -m 711 blind && echo private > blind/p.txt && chmod 600 blind/p.txt",
    ],
)
def test_what_only_the_command_user_may_read_comes_back_too(
    synced: DockerEnvironment, script: str
) -> None:
    result = run(synced, f"{script}; echo done", writable=True)
    again = run(synced, "cat p.txt priv/p.txt blind/p.txt 2>/dev/null; echo", writable=True)

    assert result.stdout == "done\n"
    found = sorted(
        p.relative_to(synced.workspace).as_posix() for p in synced.workspace.rglob("p.txt")
    )
    assert len(found) == 1
    assert (synced.workspace / found[0]).read_text() == "private\n"
    assert again.stdout == "private\n\n"
    assert again.extra["synced"]["written"] == 0  # nothing changed: nothing sent back


@docker_test
def test_deletions_go_both_ways(synced: DockerEnvironment) -> None:
    run(synced, "rm src/main.py", writable=True)
    (synced.workspace / ".gitignore").write_text("x\n")
    run(synced, "true")
    (synced.workspace / ".gitignore").unlink()
    after = run(synced, "ls -A; ls -A src")

    assert not (synced.workspace / "src" / "main.py").exists()
    assert after.stdout == ".git\nsrc\n"


@docker_test
def test_protected_paths_written_in_the_sandbox_never_come_back(synced: DockerEnvironment) -> None:
    plant = (
        'echo \'{"allowlist": {"run_command:*": "AlwaysThisProject"}}\' > codecoder.json;'
        "mkdir -p .codecoder/capabilities/x sub/.git/hooks;"
        "echo 'id > /tmp/pwned' > sub/.git/hooks/post-checkout; chmod +x sub/.git/hooks/*;"
        "printf '[submodule \"x\"]\\n' > sub/.gitmodules; mkdir -p .GIT/hooks;"
        "echo hook > .git/hooks/pre-commit 2>/dev/null; echo written > ok.txt"
    )
    result = run(synced, plant, writable=True)

    workspace = synced.workspace
    assert (workspace / "ok.txt").read_text() == "written\n"
    for planted in ("codecoder.json", ".codecoder", "sub/.git", "sub/.gitmodules", ".GIT"):
        assert not (workspace / planted).exists(), planted
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert set(result.extra["synced"]["kept_in_sandbox"]) >= {"codecoder.json", "sub/.git"}


@docker_test
def test_more_than_the_disk_budget_never_comes_back_and_the_volume_is_rebuilt(
    tight: DockerEnvironment,
) -> None:
    with pytest.raises(ExecutionFailed, match="more than its disk budget of 2m"):
        run(tight, "head -c 3M /dev/zero > big.bin; echo small > small.txt", writable=True)
    after = run(tight, "ls -A")

    assert not (tight.workspace / "big.bin").exists()
    assert after.stdout == ".git\nsrc\n"  # a fresh copy of the workspace


@docker_test
def test_a_call_stopped_at_its_budget_half_way_brings_nothing_back(
    tight: DockerEnvironment,
) -> None:
    # Written a piece at a time: the budget stops the command with part of it written.
    script = "for i in $(seq 100); do head -c 256K /dev/urandom > part$i; sleep 0.02; done"
    with pytest.raises(ExecutionFailed, match="more than its disk budget of 2m"):
        run(tight, script, writable=True)

    assert list(tight.workspace.glob("part*")) == []


@docker_test
def test_symlinks_out_of_the_workspace_and_fifos_never_come_back(synced: DockerEnvironment) -> None:
    result = run(
        synced,
        "ln -s /etc/passwd abs; ln -s ../../../etc/shadow src/up; ln -s .. top;"
        "ln -s main.py src/inside; mkdir -p a/b; ln -s ../../src a/b/back; mkfifo pipe;"
        "echo fine > fine.txt",
        writable=True,
    )
    workspace = synced.workspace

    assert (workspace / "fine.txt").read_text() == "fine\n"
    assert os.readlink(workspace / "src" / "inside") == "main.py"
    assert os.readlink(workspace / "a" / "b" / "back") == "../../src"
    for name in ("abs", "src/up", "top", "pipe"):
        assert not os.path.lexists(workspace / name), name
    assert sorted(result.extra["synced"]["kept_in_sandbox"]) == ["abs", "src/up", "top"]


@docker_test
def test_changes_too_large_for_the_answer_come_back_through_the_outbox(
    synced: DockerEnvironment, docker_engine: Any
) -> None:
    fetched: list[str] = []
    volume = synced._ensure_volume()
    pull = volume.pull
    volume.pull = lambda container, budget: fetched.append(container) or pull(container, budget)  # type: ignore[method-assign]
    result = run(synced, "head -c 600000 /dev/urandom > big.bin; sha256sum big.bin", writable=True)

    assert len(fetched) == 1
    assert result.extra["synced"]["written"] == 1
    digest = hashlib.sha256((synced.workspace / "big.bin").read_bytes()).hexdigest()
    assert result.stdout.split()[0] == digest


@docker_test
def test_state_of_one_grant_is_wiped_before_another_in_sync_mode(
    synced: DockerEnvironment,
) -> None:
    run(synced, "echo planted > /tmp/left", writable=True, grant="session:a")
    same = run(synced, "cat /tmp/left", writable=True, grant="session:a")
    other = run(synced, "cat /tmp/left 2>&1; echo done", writable=True, grant="session:b")

    assert same.stdout == "planted\n"
    assert "planted" not in other.stdout


@docker_test
def test_closing_removes_the_volumes_and_the_helper(workspace: Path, docker_engine: Any) -> None:
    env = DockerEnvironment(workspace, DockerSettings(workspace="sync"))
    run(env, "true", writable=True)
    session = f"codecoder.session={env.session_id}"
    volumes = docker_engine.api.volumes(filters={"label": session})["Volumes"]
    env.close()

    assert len(volumes) == 2
    assert docker_engine.api.volumes(filters={"label": session})["Volumes"] in (None, [])
    assert docker_engine.api.containers(all=True, filters={"label": session}) == []


@pytest.fixture
def with_nested_repository(synced: DockerEnvironment) -> DockerEnvironment:
    lib = synced.workspace / "vendor" / "lib"
    (lib / ".git" / "hooks").mkdir(parents=True)
    (lib / ".git" / "config").write_text("[core]\n")
    (lib / "lib.c").write_text("int x;\n")
    return synced


@docker_test
@pytest.mark.parametrize(
    "script",
    [
        # The nested .git is root's and read-only in the volume: renames are what can move it.
        "mv vendor/lib vendor/lib2",
        "mv vendor/lib .hidden && echo now-a-file > vendor/lib",
        "mv vendor/lib .hidden && ln -s ../src vendor/lib",
        "mv vendor .hidden",
        "mv vendor elsewhere && mkdir vendor",
        "mkdir -p deep/er && mv vendor deep/er/",
    ],
)
def test_a_nested_repository_is_never_taken_away_with_its_directory(
    with_nested_repository: DockerEnvironment, script: str
) -> None:
    env = with_nested_repository
    before = snapshot(env.workspace)

    with pytest.raises(ExecutionFailed, match=r"which holds vendor/lib/.git.*nothing was copied"):
        run(env, f"echo first > first.txt; {script}", writable=True)
    after = run(env, "ls -A vendor/lib; cat first.txt 2>&1 || true")

    assert snapshot(env.workspace) == before
    assert after.stdout.startswith(".git\nlib.c\n")  # the sandbox starts again from the host's
    assert "No such file" in after.stdout


@docker_test
def test_symlink_chains_that_lead_out_stay_in_the_sandbox(synced: DockerEnvironment) -> None:
    result = run(
        synced,
        "ln -s . a; ln -s a/.. up; ln -s up/outside/secret read; ln -s b c; ln -s . b;"
        "ln -s c/.. c-up; ln -s src/main.py fine",
        writable=True,
    )
    workspace = synced.workspace

    assert sorted(result.extra["synced"]["kept_in_sandbox"]) == ["c-up", "read", "up"]
    assert [os.readlink(workspace / n) for n in ("a", "b", "c", "fine")] == [
        ".",
        ".",
        "b",
        "src/main.py",
    ]
    for name in ("up", "read", "c-up"):
        assert not os.path.lexists(workspace / name), name


@docker_test
def test_a_link_that_would_lead_an_existing_one_out_is_refused_whole(
    synced: DockerEnvironment,
) -> None:
    (synced.workspace / "up").symlink_to("a/..")
    before = snapshot(synced.workspace)

    with pytest.raises(ExecutionFailed, match=r"symlink up -> a/.. would lead out of it"):
        run(synced, "echo x > first.txt; ln -s . a", writable=True)
    assert snapshot(synced.workspace) == before


@docker_test
def test_thousands_of_new_directories_come_back_whole_under_a_low_descriptor_limit(
    workspace: Path,
) -> None:
    synced = DockerEnvironment(workspace, DockerSettings(workspace="sync", disk_budget="64m"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    run(synced, "true", writable=True)  # the container started before the limit is lowered
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        result = run(
            synced,
            "for i in $(seq -w 0 1199); do mkdir -p pkg$i/src && echo x > pkg$i/src/m.py; done",
            writable=True,
            timeout=120,
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        synced.close()

    assert result.extra["synced"]["written"] == 3600
    assert len(list(synced.workspace.glob("pkg*/src/m.py"))) == 1200


@docker_test
@pytest.mark.parametrize(
    "script",
    [
        "truncate -s 4G sparse.bin",
        "dd if=/dev/zero of=sparse.bin bs=1 count=1 seek=3G status=none",
        "python3 -c \"f=open('sparse.bin','wb'); f.seek(5<<30); f.write(b'x')\"",
        "for i in $(seq 1 40); do truncate -s 100M part$i; done",
    ],
)
def test_sparse_files_count_whole_against_the_budget_and_never_come_back(
    tight: DockerEnvironment, script: str
) -> None:
    with pytest.raises(ExecutionFailed, match="more than its disk budget of 2m"):
        run(tight, f"{script}; echo small > small.txt", writable=True)
    after = run(tight, "ls -A")

    assert not list(tight.workspace.glob("sparse.bin")) + list(tight.workspace.glob("part*"))
    assert after.stdout == ".git\nsrc\n"


@docker_test
def test_a_host_file_with_holes_stays_out_of_the_volume_and_hard_links_go_as_links(
    synced: DockerEnvironment,
) -> None:
    workspace = synced.workspace
    with open(workspace / "disk.img", "wb") as image:
        image.truncate(1 << 30)
    (workspace / "data.bin").write_bytes(os.urandom(1 << 20))
    for i in range(20):
        os.link(workspace / "data.bin", workspace / f"name{i}.bin")
    result = run(
        synced,
        "ls disk.img 2>&1; stat -c %h data.bin; du -sk --apparent-size . | cut -f1; "
        "du -sk . | cut -f1",
    )
    lines = result.stdout.splitlines()

    assert result.extra["not_in_sandbox"] == ["disk.img"]
    assert "No such file" in lines[0]
    assert lines[1] == "21"
    assert int(lines[3]) < 2 * 1024  # KiB: one copy of data.bin, not 21


# --- remote engines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "local"),
    [
        (None, True),
        ("unix:///var/run/docker.sock", True),
        ("tcp://127.0.0.1:2375", True),
        ("tcp://localhost:2376", True),
        ("tcp://[::1]:2376", True),
        ("tcp://10.0.0.5:2376", False),
        ("ssh://builder@ci.example.com", False),
        ("https://docker.example.com:2376", False),
    ],
)
def test_an_engine_on_another_machine_is_told_apart(
    address: str | None, local: bool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if address is None:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    else:
        monkeypatch.setenv("DOCKER_HOST", address)

    assert engine_is_local() is local
    # A workspace of the command user's (one that belongs to root is synced anyway:
    # environments.docker.workspacemode).
    assert DockerEnvironment(workspace).sync is not local


def test_a_bind_mount_on_a_remote_engine_is_refused(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "ssh://builder@ci.example.com")
    image = SimpleNamespace(labels={LABEL_AGENT: str(AGENT_PROTOCOL)})
    client = SimpleNamespace(
        ping=lambda: True, images=SimpleNamespace(get=lambda name: image), close=lambda: None
    )
    env = DockerEnvironment(
        workspace, DockerSettings(workspace="bind"), client_factory=lambda: client
    )

    with pytest.raises(SandboxUnavailable, match="cannot bind-mount this workspace"):
        env.run(CommandRequest(cwd=workspace, argv=("true",)))


# --- inline changes (the copy-back itself: test_copyback.py) ---------------------------------


def volume_for(workspace: Path) -> WorkspaceVolume:
    volume = object.__new__(WorkspaceVolume)
    volume.workspace = workspace
    volume._manifest = {}
    volume.not_sent = set()
    return volume


@pytest.mark.parametrize(
    ("inline", "problem"),
    [
        ("not an object", "not an object"),
        ({"tar": "@@@", "summary": "{}"}, "malformed"),
        ({"summary": "{}"}, "malformed"),
        ({"tar": base64.b64encode(b"x" * 1024).decode(), "summary": "{}"}, "not a tar"),
        ({"tar": "", "summary": "[]"}, "not a JSON object"),
        ({"tar": "", "summary": "{"}, "not JSON"),
        ({"tar": "", "summary": 7}, "malformed"),
    ],
)
def test_inline_changes_that_are_not_what_the_agent_writes_are_refused(
    tmp_path: Path, inline: Any, problem: str
) -> None:
    volume = volume_for(tmp_path)

    with pytest.raises(ExecutionFailed, match=problem):
        volume.apply_inline(inline, 1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_inline_changes_are_checked_like_fetched_ones(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "ws").mkdir()
    volume = volume_for(tmp_path / "ws")
    changes = archive(
        ("ok", "file", b"fine"), ("sub/.git/config", "file", b"x"), ("out", "link", str(outside))
    )
    inline = {"tar": base64.b64encode(changes).decode(), "summary": "{}"}

    report = volume.apply_inline(inline, 1 << 20)
    with pytest.raises(ExecutionFailed, match="more than its disk budget"):
        volume.apply_inline(inline, 3)

    assert [p.name for p in volume.workspace.iterdir()] == ["ok"]
    assert (report.written, sorted(report.kept)) == (["ok"], ["out", "sub/.git/config"])


@pytest.mark.parametrize(
    "move",
    [
        "mv .git moved-git",
        "python3 -c \"import os; os.rename('.git', 'x')\"",
        "mv .codecoder stolen",
        "mv -T .codecoder other",
    ],
)
def test_a_protected_directory_moved_in_the_sandbox_fails_the_call_with_nothing_copied_back(
    synced: DockerEnvironment, move: str
) -> None:
    (synced.workspace / ".codecoder" / "approvals").mkdir(parents=True)
    run(synced, "echo warm > warm.txt", writable=True)  # the volume holds .codecoder too
    with pytest.raises(ExecutionFailed, match="sandboxed tools may never move protected paths"):
        run(synced, f"{move}; echo made > made.txt", writable=True)
    workspace = synced.workspace
    assert (workspace / ".git" / "config").read_text() == "[core]\n"
    assert (workspace / ".codecoder" / "approvals").is_dir()
    assert not (workspace / "made.txt").exists()
    assert not any(workspace.glob("moved-git")) and not (workspace / "stolen").exists()
    # The sandbox's copy was rebuilt from the workspace: it holds them again.
    assert run(synced, "ls -a").stdout.split() == [
        ".", "..", ".codecoder", ".git", "src", "warm.txt",
    ]  # fmt: skip
