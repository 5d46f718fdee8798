"""Sync mode (`"docker": {"workspace": "sync"}`, and automatically for a remote DOCKER_HOST):
the workspace in a per-session volume, kept in step both ways, against a real engine; then the
copy-back on its own, fed archives a compromised agent could write."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT
from codecoder.environments.docker.engine import engine_is_local
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.sync import WorkspaceVolume, _points_out
from codecoder.runtime.kernel.errors import ExecutionFailed, SandboxUnavailable

docker_test = pytest.mark.docker


@pytest.fixture
def synced(workspace: Path) -> Iterator[DockerEnvironment]:
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print('hello')\n")
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    with DockerEnvironment(workspace, DockerSettings(workspace="sync", disk_budget="2m")) as env:
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

    assert (read.stdout, write.exit_code) == ("print('hello')\n[core]\n", 0)
    assert {m["Type"] for m in mounts} == {"volume"}
    assert {m["Destination"] for m in mounts} == {"/workspace", "/opt/codecoder/outbox"}
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
    synced: DockerEnvironment,
) -> None:
    with pytest.raises(ExecutionFailed, match="more than its disk budget of 2m"):
        run(synced, "head -c 3M /dev/zero > big.bin; echo small > small.txt", writable=True)
    after = run(synced, "ls -A")

    assert not (synced.workspace / "big.bin").exists()
    assert after.stdout == ".git\nsrc\n"  # a fresh copy of the workspace


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
    address: str | None, local: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if address is None:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    else:
        monkeypatch.setenv("DOCKER_HOST", address)

    assert engine_is_local() is local
    assert DockerEnvironment("/tmp").sync is not local


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


# --- the copy-back, fed what a compromised agent could write -------------------------------------


def archive(*members: tuple[str, str, bytes | str]) -> bytes:
    """A changes.tar: (name, kind, content or link target) with kind file, dir, link, hardlink,
    fifo."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o6755 if kind == "file" else 0o755
            if kind == "file":
                assert isinstance(content, bytes)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "link": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind in ("link", "hardlink"):
                assert isinstance(content, str)
                info.linkname = content
            tar.addfile(info)
    return data.getvalue()


def apply(workspace: Path, changes: bytes, deleted: list[str] = (), budget: int = 1 << 20) -> Any:  # type: ignore[assignment]
    volume = object.__new__(WorkspaceVolume)
    volume.workspace = workspace
    volume._manifest = {}
    with tarfile.open(fileobj=io.BytesIO(changes)) as tar:
        return volume._apply(tar, {"deleted": list(deleted)}, budget)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret").write_text("keep\n")
    return target


def test_a_symlink_sent_back_is_never_written_through(tmp_path: Path, outside: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    report = apply(
        workspace,
        archive(("d", "link", str(outside)), ("d/secret", "file", b"overwritten\n")),
    )

    assert (outside / "secret").read_text() == "keep\n"
    assert (workspace / "d").is_dir() and not (workspace / "d").is_symlink()
    assert (workspace / "d" / "secret").read_text() == "overwritten\n"
    assert (report.written, report.kept) == (["d/secret"], ["d"])


def test_an_existing_symlink_on_the_host_is_replaced_not_followed(
    tmp_path: Path, outside: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "d").symlink_to(outside)
    (workspace / "f").symlink_to(outside / "secret")
    apply(workspace, archive(("d/secret", "file", b"a\n"), ("f", "file", b"b\n")))

    assert (outside / "secret").read_text() == "keep\n"
    assert (workspace / "f").read_text() == "b\n" and not (workspace / "f").is_symlink()
    assert not (workspace / "d").is_symlink()


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../escape", "", "."])
def test_names_outside_the_workspace_refuse_the_whole_archive(tmp_path: Path, name: str) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()

    with pytest.raises(ExecutionFailed, match="not beneath it"):
        apply(workspace, archive(("fine.txt", "file", b"x"), (name, "file", b"x")))
    assert list(workspace.iterdir()) == []


@pytest.mark.parametrize(("kind", "content"), [("hardlink", "fine.txt"), ("fifo", b"")])
def test_entries_other_than_files_directories_and_symlinks_refuse_the_archive(
    tmp_path: Path, kind: str, content: bytes | str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()

    with pytest.raises(ExecutionFailed, match="of a kind never copied back"):
        apply(workspace, archive(("fine.txt", "file", b"x"), ("odd", kind, content)))
    assert list(workspace.iterdir()) == []


def test_protected_paths_in_every_spelling_are_kept_out(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    report = apply(
        workspace,
        archive(
            ("codecoder.json", "file", b"{}"),
            (".codecoder/approvals/x", "file", b"x"),
            ("a/.git/hooks/post-checkout", "file", b"id"),
            ("b/.GIT", "file", b"gitdir: /tmp"),
            ("c/GIT~1/config", "file", b"x"),
            ("d/.gitmodules", "file", b"x"),
            ("e/.git.", "dir", b""),
            ("ok", "file", b"fine"),
        ),
    )

    assert [p.name for p in workspace.iterdir()] == ["ok"]
    assert report.written == ["ok"]
    assert sorted(report.kept) == [
        ".codecoder/approvals/x",
        "a/.git/hooks/post-checkout",
        "b/.GIT",
        "c/GIT~1/config",
        "codecoder.json",
        "d/.gitmodules",
        "e/.git.",
    ]


@pytest.mark.parametrize(
    ("path", "target", "out"),
    [
        ("link", "/etc/passwd", True),
        ("link", "..", True),
        ("link", "", True),
        ("a/link", "../../x", True),
        ("a/link", "b/../../../x", True),
        ("a/link", "./../..", True),
        ("link", "a/b/../c", False),
        ("a/b/link", "../../x", False),
        ("link", ".", False),
    ],
)
def test_a_symlink_is_judged_out_by_its_target_alone(path: str, target: str, out: bool) -> None:
    assert _points_out(path, target) is out


def test_a_deleted_name_outside_the_workspace_refuses_the_archive_before_any_deletion(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "keep").write_text("x")

    with pytest.raises(ExecutionFailed, match="not beneath it"):
        apply(workspace, archive(("new", "file", b"y")), deleted=["keep", "../ws/keep"])
    assert [p.name for p in workspace.iterdir()] == ["keep"]


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
    volume = object.__new__(WorkspaceVolume)
    volume.workspace = tmp_path
    volume._manifest = {}

    with pytest.raises(ExecutionFailed, match=problem):
        volume.apply_inline(inline, 1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_inline_changes_are_checked_like_fetched_ones(tmp_path: Path, outside: Path) -> None:
    volume = object.__new__(WorkspaceVolume)
    volume.workspace = tmp_path / "ws"
    volume.workspace.mkdir()
    volume._manifest = {}
    changes = archive(
        ("ok", "file", b"fine"), ("sub/.git/config", "file", b"x"), ("out", "link", str(outside))
    )
    inline = {"tar": base64.b64encode(changes).decode(), "summary": "{}"}

    report = volume.apply_inline(inline, 1 << 20)
    with pytest.raises(ExecutionFailed, match="more than its disk budget"):
        volume.apply_inline(inline, 3)

    assert [p.name for p in volume.workspace.iterdir()] == ["ok"]
    assert (report.written, sorted(report.kept)) == (["ok"], ["out", "sub/.git/config"])


def test_setuid_bits_are_dropped_and_the_budget_counts_before_anything_is_written(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    apply(workspace, archive(("tool", "file", b"#!/bin/sh\n")))

    with pytest.raises(ExecutionFailed, match="more than its disk budget"):
        apply(workspace, archive(("a", "file", b"x" * 600), ("b", "file", b"y" * 600)), budget=1000)
    assert (workspace / "tool").stat().st_mode & 0o7777 == 0o755
    assert not (workspace / "a").exists()


@docker_test
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


@pytest.mark.parametrize("deleted", [".codecoder", ".git", ".git/hooks", "sub/.git", ".claude"])
def test_a_deleted_protected_path_refuses_the_archive_before_anything_is_applied(
    tmp_path: Path, deleted: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "keep").write_text("x")
    with pytest.raises(ExecutionFailed, match="may never move protected paths"):
        apply(workspace, archive(("new", "file", b"y")), deleted=["keep", deleted])
    assert [p.name for p in workspace.iterdir()] == ["keep"]
