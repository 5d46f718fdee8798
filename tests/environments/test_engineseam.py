"""The engine seam: templates travel whole and keyed, and Docker makes them with every protection.

No engine is needed: these tests look at what would be sent to one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.docker.containers import SandboxContainers
from codecoder.environments.docker.engine import DockerEngine
from codecoder.environments.docker.settings import DockerSettings
from codecoder.environments.engineseam import SandboxTemplate, TemplateMount
from codecoder.environments.workspaceguard import ProtectedScan


def template_of(workspace: Path, mode: str = "rw", **settings: Any) -> SandboxTemplate:
    containers = SandboxContainers(
        workspace, DockerSettings(**settings), "s", sync=False, resolver=None, volume=None
    )
    scan = ProtectedScan(workspace) if mode == "rw" else None
    return containers.template("rw" if mode == "rw" else "ro", scan)


def test_a_template_survives_its_journey_as_json(project: Path) -> None:
    (project / ".git").mkdir()
    template = template_of(project.resolve(), runtime="runsc")

    again = SandboxTemplate.from_json(json.loads(json.dumps(template.to_json())))

    assert again == template
    assert again.key == template.key


def test_templates_that_make_different_sandboxes_have_different_keys(project: Path) -> None:
    workspace = project.resolve()
    base = template_of(workspace)
    (workspace / ".git").mkdir()

    others = [
        template_of(workspace),  # a protected path more
        template_of(workspace, mode="ro"),
        template_of(workspace, runtime="runsc"),
        template_of(workspace, memory="512m"),
        template_of(workspace, user="10002"),
    ]

    assert len({base.key, *(t.key for t in others)}) == 1 + len(others)


BROKEN = {
    "nothing": lambda good: {},
    "a list": lambda good: [good],
    "a field more": lambda good: {**good, "privileged": True},
    "a field less": lambda good: {k: v for k, v in good.items() if k != "mounts"},
    "a tmpfs mount": lambda good: {**good, "mounts": [{**good["mounts"][0], "kind": "tmpfs"}]},
    "a bad identity": lambda good: {**good, "mounts": [{**good["mounts"][0], "identity": [1]}]},
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_what_is_not_a_template_is_refused(project: Path, broken: str) -> None:
    good = json.loads(json.dumps(template_of(project.resolve()).to_json()))

    with pytest.raises(ValueError, match="not a sandbox template"):
        SandboxTemplate.from_json(BROKEN[broken](good))


def test_docker_makes_a_template_with_every_protection_the_seam_requires(project: Path) -> None:
    workspace = project.resolve()
    (workspace / ".git").mkdir()
    template = template_of(workspace)

    config = DockerEngine(lambda: None).container_config(template, "n", {"a": "b"})

    assert {k: v for k, v in config.items() if k not in ("mounts", "log_config")} == {
        "image": "codecoder-sandbox",
        "entrypoint": list(template.entrypoint),
        "name": "n",
        "labels": {"a": "b"},
        "user": "0:0",
        "working_dir": "/workspace",
        "environment": {"HOME": "/tmp", "LANG": "C.UTF-8"},
        "stdin_open": True,
        "detach": False,
        "tty": False,
        "init": True,
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "cap_add": ["SETUID", "SETGID", "KILL", "SETPCAP"],
        "security_opt": ["no-new-privileges:true"],
        "pids_limit": 256,
        "mem_limit": 1024**3,
        "memswap_limit": 1024**3,
        "nano_cpus": 1_000_000_000,
        "ipc_mode": "private",
        "shm_size": 64 * 1024**2,
        "tmpfs": {
            "/tmp": "rw,noexec,nosuid,nodev,size=67108864",
            "/opt/codecoder/capability": "rw,nosuid,nodev,size=100663296,mode=755",
        },
    }
    assert config["log_config"]["Type"] == "none"
    assert [(m["Target"], m["Source"], m["ReadOnly"]) for m in config["mounts"]] == [
        ("/workspace", str(workspace), False),
        ("/workspace/.git", str(workspace / ".git"), True),
    ]


def test_a_mount_records_which_directory_it_was_made_for(project: Path) -> None:
    workspace = project.resolve()
    info = workspace.stat()

    mount = template_of(workspace, mode="ro").mounts[0]

    assert mount == TemplateMount(
        "/workspace", str(workspace), "bind", True, (info.st_dev, info.st_ino)
    )


def test_docker_never_fills_a_volume_with_what_the_image_holds_there() -> None:
    """Sync mode's workspace is an empty volume: Docker's copy-up would give it the image's
    root-owned /workspace, which commands cannot write and which would come back as changes."""
    template = SandboxTemplate(
        image="codecoder-sandbox",
        entrypoint=("agent",),
        command_user=(10001, 10001),
        mounts=(
            TemplateMount("/workspace", "workspace-volume", "volume", read_only=False),
            TemplateMount("/outbox", "outbox-volume", "volume", read_only=False),
            TemplateMount("/workspace/.git", "/srv/project/.git"),
        ),
    )

    config = DockerEngine(lambda: None).container_config(template, "n", {})

    assert [dict(m) for m in config["mounts"]] == [
        {
            "Target": "/workspace",
            "Source": "workspace-volume",
            "Type": "volume",
            "ReadOnly": False,
            "VolumeOptions": {"NoCopy": True},
        },
        {
            "Target": "/outbox",
            "Source": "outbox-volume",
            "Type": "volume",
            "ReadOnly": False,
            "VolumeOptions": {"NoCopy": True},
        },
        {
            "Target": "/workspace/.git",
            "Source": "/srv/project/.git",
            "Type": "bind",
            "ReadOnly": True,
        },
    ]
