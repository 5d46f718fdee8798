"""Any image as the @docker sandbox: `codecoder image build --from` on an image with no Python,
no libc and no bash (a FROM-scratch busybox, built offline), and what refuses an image that is
not a sandbox image."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.docker.channel import AGENT_PROTOCOL, LABEL_AGENT
from codecoder.environments.docker.environment import DockerEnvironment, DockerSettings
from codecoder.environments.docker.image import (
    build_sandbox_image,
    default_tag,
    dockerfile,
    sandbox_status,
)
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from tests.conftest import write_config

STATIC_BUSYBOX = Path("/bin/busybox")
BUSYBOX_BASE = "codecoder-test-busybox:base"
BUSYBOX_SANDBOX = "codecoder-test-busybox:sandbox"

docker_test = pytest.mark.docker


def build(client: Any, tag: str, dockerfile_text: str, files: dict[str, bytes]) -> None:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile_text.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)


@pytest.fixture(scope="module")
def busybox_base(docker_engine: Any) -> str:
    """An image with no libc, no Python and no bash: a static busybox FROM scratch, whose own
    entrypoint would swallow any command and whose user is not root."""
    if not STATIC_BUSYBOX.exists():
        pytest.fail(f"{STATIC_BUSYBOX} is missing (apt-get install busybox-static)")
    build(
        docker_engine,
        BUSYBOX_BASE,
        "FROM scratch\n"
        "COPY busybox /bin/busybox\n"
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
        "USER 65534:65534\n"
        'ENTRYPOINT ["/bin/sh", "-c", "echo the base entrypoint ran"]\n',
        {"busybox": STATIC_BUSYBOX.read_bytes()},
    )
    return BUSYBOX_BASE


@pytest.fixture(scope="module")
def busybox_sandbox(busybox_base: str, docker_engine: Any) -> str:
    built = build_sandbox_image(busybox_base, BUSYBOX_SANDBOX, client=docker_engine)
    assert built.tag == BUSYBOX_SANDBOX
    return built.tag


@pytest.fixture
def busybox(workspace: Path, busybox_sandbox: str) -> Iterator[DockerEnvironment]:
    with DockerEnvironment(workspace, DockerSettings(image=busybox_sandbox)) as env:
        yield env


def run(env: DockerEnvironment, *argv: str, **options: Any) -> Any:
    options.setdefault("timeout", 30.0)
    return env.run(CommandRequest(cwd=env.workspace, argv=argv, **options))


# --- the recipe --------------------------------------------------------------------------------


def test_the_recipe_takes_the_agent_from_the_default_image_and_labels_the_result() -> None:
    text = dockerfile("node:20")

    assert text.splitlines()[:3] == [
        "FROM node:20",
        "COPY --from=codecoder-sandbox /opt/codecoder /opt/codecoder",
        "USER 0:0",
    ]
    assert f'LABEL {LABEL_AGENT}="{AGENT_PROTOCOL}" codecoder.base="node:20"' in text
    assert default_tag("node:20") == "codecoder-sandbox-node:20"


@pytest.mark.parametrize("base", ["node:20\nRUN rm -rf /", "", "-x", "a b"])
def test_a_base_that_is_not_an_image_reference_is_refused(base: str) -> None:
    with pytest.raises(ValueError, match="is not an image reference"):
        dockerfile(base)


# --- an image with nothing the agent could use -------------------------------------------------


@docker_test
def test_a_busybox_image_without_python_or_libc_runs_commands_as_the_workspace_user(
    busybox: DockerEnvironment, docker_engine: Any
) -> None:
    who = run(busybox, "id")
    caps = run(busybox, "grep", "-E", "^(CapEff|CapBnd|NoNewPrivs)", "/proc/self/status")
    python = run(busybox, "python3", "-c", "print(1)")
    stdin = run(busybox, "cat", stdin=b"through the agent\n")
    wrote = run(busybox, "touch", "made-by-busybox", writable=True)
    labels = docker_engine.images.get(BUSYBOX_SANDBOX).labels

    assert (who.exit_code, who.stdout) == (0, "uid=10001(sandbox) gid=10001(sandbox)\n")
    assert caps.stdout.split() == [
        "CapEff:",
        "0000000000000000",
        "CapBnd:",
        "0000000000000000",
        "NoNewPrivs:",
        "1",
    ]
    assert (python.exit_code, python.stderr) == (
        127,
        "python3: command not found\n"
        f"codecoder: the sandbox image {BUSYBOX_SANDBOX} has no python3. `codecoder image build "
        "--from IMAGE` makes a sandbox image of an image that has it (one on this engine), then "
        'set "docker": {"image": ...} in codecoder.json to use it (`codecoder check` confirms '
        "it)\n",
    )
    assert stdin.stdout == "through the agent\n"
    assert wrote.exit_code == 0
    assert (busybox.workspace / "made-by-busybox").stat().st_uid == 10001
    assert labels[LABEL_AGENT] == str(AGENT_PROTOCOL)


@docker_test
def test_without_bash_a_compound_command_is_refused_and_says_why(
    busybox: DockerEnvironment,
) -> None:
    with pytest.raises(ExecutionFailed, match="has no /bin/bash: compound commands are keyed"):
        busybox.run(CommandRequest(cwd=busybox.workspace, script="echo a && echo b"))

    assert run(busybox, "echo", "still", "serving").stdout == "still serving\n"


@docker_test
def test_the_base_images_entrypoint_and_user_never_wrap_the_agent(
    busybox: DockerEnvironment,
) -> None:
    parent = run(busybox, "cat", "/proc/1/cmdline")

    assert "the base entrypoint ran" not in parent.stdout
    assert parent.stdout.split("\0")[:2] == ["/sbin/docker-init", "--"]


@docker_test
def test_the_agent_of_a_built_image_holds_under_attack(busybox: DockerEnvironment) -> None:
    attacks = [
        ("kill", "-KILL", "1"),
        ("sh", "-c", "echo '{}' > /proc/1/fd/0 && echo worked"),
        ("sh", "-c", "cat /proc/$PPID/environ && echo worked"),
        ("sh", "-c", "touch /opt/codecoder/agent/__main__.py && echo worked"),
        ("sh", "-c", "echo x > /etc/passwd && echo worked"),
    ]
    results = [run(busybox, *attack, timeout=10) for attack in attacks]

    assert [r.stdout for r in results] == [""] * len(attacks)
    assert run(busybox, "echo", "alive").stdout == "alive\n"


# --- what is not a sandbox image ---------------------------------------------------------------


@docker_test
def test_an_image_without_the_agent_is_refused_with_the_command_that_makes_one(
    workspace: Path, busybox_base: str
) -> None:
    with (
        DockerEnvironment(workspace, DockerSettings(image=busybox_base)) as env,
        pytest.raises(SandboxUnavailable, match="is not a codecoder sandbox image") as raised,
    ):
        env.run(CommandRequest(cwd=workspace, argv=("true",)))

    assert f"codecoder image build --from {busybox_base}" in str(raised.value)


@docker_test
def test_a_base_without_any_shell_builds_says_so_and_runs_simple_commands(
    project: Path, docker_engine: Any
) -> None:
    """The agent needs nothing of the image (its interpreter is bundled), so a base with no
    shell at all (distroless-style) is accepted: the build says that compound commands are
    refused, simple ones run, and a compound one is refused saying why."""
    base = "codecoder-test-noshell:base"
    build(
        docker_engine,
        base,
        "FROM scratch\nCOPY busybox /bin/busybox\n",
        {"busybox": STATIC_BUSYBOX.read_bytes()},
    )
    built = codecoder(
        "image", "build", "--from", base, "--tag", "codecoder-test-noshell:sandbox", project=project
    )
    assert built.returncode == 0, built.stderr
    assert "compound commands: refused (no /bin/bash; simple commands run)" in built.stdout

    with DockerEnvironment(project, DockerSettings(image="codecoder-test-noshell:sandbox")) as env:
        simple = run(env, "/bin/busybox", "echo", "no shell needed")
        shell = run(env, "/bin/sh", "-c", "true")
        with pytest.raises(ExecutionFailed, match="has no /bin/bash"):
            env.run(CommandRequest(cwd=project, script="echo a && echo b", timeout=30))

    assert (simple.exit_code, simple.stdout) == (0, "no shell needed\n")
    assert shell.exit_code != 0


@docker_test
def test_building_from_a_missing_image_says_nothing_is_pulled(docker_engine: Any) -> None:
    with pytest.raises(SandboxUnavailable, match="nothing is pulled"):
        build_sandbox_image("codecoder-test-no-such:image", client=docker_engine)


@docker_test
def test_building_from_an_image_the_agent_cannot_be_installed_in_says_why(
    docker_engine: Any,
) -> None:
    base = "codecoder-test-workspace-file:base"
    build(docker_engine, base, "FROM scratch\nCOPY marker /workspace\n", {"marker": b""})

    with pytest.raises(SandboxUnavailable, match="codecoder image: cannot prepare /workspace"):
        build_sandbox_image(base, client=docker_engine)


@docker_test
def test_the_status_check_reports_the_image_its_agent_and_the_runtime(
    busybox_sandbox: str, busybox_base: str
) -> None:
    good = sandbox_status(DockerSettings(image=busybox_sandbox))
    plain = sandbox_status(DockerSettings(image=busybox_base))
    missing = sandbox_status(DockerSettings(image="codecoder-test-no-such:image"))
    unknown_runtime = sandbox_status(DockerSettings(runtime="codecoder-no-such-runtime"))

    assert (good.reachable, good.agent, good.problems) == (True, str(AGENT_PROTOCOL), [])
    assert good.runtime in good.runtimes
    assert plain.problems == [
        f"image {busybox_base!r} is not a sandbox image (no {LABEL_AGENT} label): "
        f"`codecoder image build --from {busybox_base}` makes one from it"
    ]
    assert "the engine has no image 'codecoder-test-no-such:image'" in missing.problems[0]
    assert "the engine has no runtime 'codecoder-no-such-runtime'" in unknown_runtime.problems[0]


def codecoder(*args: str, project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@docker_test
def test_check_fails_a_project_whose_image_is_not_a_sandbox_image(
    project: Path, busybox_base: str, busybox_sandbox: str
) -> None:
    write_config(project, {"docker": {"image": busybox_base}})
    bad = codecoder("check", "--json", project=project)
    write_config(project, {"docker": {"image": "codecoder-test-no-such:image"}})
    missing = codecoder("check", project=project)
    write_config(project, {"docker": {"image": busybox_sandbox}})
    good = codecoder("check", "--json", project=project)

    assert missing.returncode == 1
    assert (
        "the engine has no image 'codecoder-test-no-such:image'" in missing.stdout + missing.stderr
    )
    assert "codecoder image build --from <base> --tag codecoder-test-no-such:image" in (
        missing.stdout + missing.stderr
    )
    report = json.loads(bad.stdout)
    assert bad.returncode == 1
    assert [d["code"] for d in report["diagnostics"] if d["severity"] == "error"] == [
        "docker_unavailable"
    ]
    assert (good.returncode, json.loads(good.stdout)["docker"]["agent"]) == (0, "5")


@docker_test
def test_the_cli_builds_an_image_and_prints_the_recipe(project: Path, busybox_base: str) -> None:
    built = codecoder(
        "image",
        "build",
        "--from",
        busybox_base,
        "--tag",
        "codecoder-test-cli:1",
        "--json",
        project=project,
    )
    recipe = codecoder("image", "dockerfile", "--from", busybox_base, project=project)

    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["tag"] == "codecoder-test-cli:1"
    assert recipe.stdout == dockerfile(busybox_base)
