"""@landlock, attacked for real: a Landlock-restricted worker running the real ripgrep, openat2
reads, real files, FIFOs, devices, symlink races and killed workers.

The read tools' behaviour on both backends is in tests/runtime/tools/test_files.py; this file
attacks the confinement itself and the fallback rules.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.settings import ShellSettings
from codecoder.environments import landlock as landlock_module
from codecoder.environments.landlock import (
    LandlockEnvironment,
    RipgrepRequest,
    unavailable_reason,
)
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.errors import ExecutionFailed, SandboxUnavailable
from codecoder.permissions.prompt import non_interactive
from codecoder.sandboxes.landlock import worker
from codecoder.session import Runtime
from codecoder.tools.base import ToolContext, ToolResult
from codecoder.tools.files import FILE_TOOLS
from codecoder.tools.files.backend import _Progress

pytestmark = pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"@landlock is unavailable: {unavailable_reason()}"
)

TOOLS = {tool.name: tool for tool in FILE_TOOLS}
SECRET = "top secret needle, outside the workspace"


@pytest.fixture(scope="module")
def env() -> Iterator[LandlockEnvironment]:
    environment = LandlockEnvironment()
    yield environment
    environment.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text(SECRET + "\n")
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("needle = 1\n")
    return root


@pytest.fixture
def ctx(workspace: Path, env: LandlockEnvironment) -> ToolContext:
    return ToolContext(
        workspace=workspace,
        environment=env,
        environment_tag=EnvironmentTag.LANDLOCK,
        session_id="t",
        limits=ShellSettings(timeout=10),
    )


def call(tool: str, ctx: ToolContext, **args: Any) -> ToolResult:
    return TOOLS[tool].execute(TOOLS[tool].parameters.model_validate(args), ctx)


def no_secret(ctx: ToolContext, tool: str, **args: Any) -> str:
    """The tool's output or error, asserting that the secret is in neither."""
    try:
        text = call(tool, ctx, **args).output
    except ExecutionFailed as exc:
        text = f"refused: {exc}"
    assert "top secret" not in text
    return text


# -- the ceiling and the environment ----------------------------------------------------------


def test_landlock_is_a_sandbox_whose_ceiling_is_the_project() -> None:
    assert EnvironmentTag.LANDLOCK.ceiling is Scope.PROJECT
    assert "Landlock" in EnvironmentTag.LANDLOCK.containment


def test_the_worker_runs_a_static_ripgrep_it_cannot_leave(env: LandlockEnvironment) -> None:
    assert landlock_module._is_static_elf(env.ripgrep)
    assert not landlock_module._is_static_elf(Path(sys.executable).resolve())


# -- paths that lead out ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    ["../outside/secret.txt", "{outside}/secret.txt", "/proc/self/root{outside}/secret.txt"],
)
def test_symlinks_out_are_refused_by_every_read_tool(
    ctx: ToolContext, workspace: Path, target: str
) -> None:
    outside = workspace.parent / "outside"
    (workspace / "file").symlink_to(target.format(outside=outside))
    (workspace / "dir").symlink_to(str(outside) if "{" in target else "../outside")

    assert "outside the workspace" in no_secret(ctx, "read_file", path="file")
    assert "outside the workspace" in no_secret(ctx, "read_file", path="dir/secret.txt")
    assert "outside the workspace" in no_secret(ctx, "list_dir", path="dir")
    assert "outside the workspace" in no_secret(ctx, "grep", pattern="needle", path="dir")
    assert "outside the workspace" in no_secret(ctx, "grep", pattern="needle", path="file")
    assert "outside the workspace" in no_secret(ctx, "diff", path="src/app.py", other_path="file")
    no_secret(ctx, "grep", pattern="needle", include_ignored=True, hidden=True)
    no_secret(ctx, "glob", pattern="**/*", include_ignored=True, hidden=True)


def test_proc_self_root_and_magic_links_lead_nowhere(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "proc").symlink_to("/proc")
    (workspace / "me").symlink_to("/proc/self/root")
    (workspace / "fd").symlink_to("/proc/self/fd")

    for path in ("proc/self/root/etc/passwd", "me/etc/passwd", "fd/0"):
        assert "outside the workspace" in no_secret(ctx, "read_file", path=path)
        assert "root:" not in no_secret(ctx, "grep", pattern="root", path=path)


def test_ripgrep_in_the_worker_cannot_read_outside_even_when_asked_directly(
    env: LandlockEnvironment, workspace: Path
) -> None:
    secret = str(workspace.parent / "outside" / "secret.txt")
    for cwd, args in [
        (workspace, ("needle", secret)),
        (workspace, ("needle", "../outside")),
        (workspace.parent / "outside", ("needle",)),
        (Path("/"), ("root", "etc/passwd")),
    ]:
        result = env.run(RipgrepRequest((workspace,), cwd, args, timeout=10))
        assert b"top secret" not in result.stdout and b"root:" not in result.stdout
        assert result.exit_code == 2 and "Permission denied" in result.stderr


def test_a_directory_swapped_for_a_symlink_during_a_search_never_reveals_the_outside(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "d").mkdir()
    (workspace / "d" / "inside.txt").write_text("needle inside\n")
    outside = workspace.parent / "outside"
    stop = threading.Event()

    def flip() -> None:
        real, link = workspace / "d", workspace / "d.link"
        parked = workspace / "d.real"
        while not stop.is_set():
            os.rename(real, parked)
            link.symlink_to(outside)
            os.rename(link, real)
            os.unlink(real)
            os.rename(parked, real)

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen = set()
    try:
        for _ in range(60):
            seen.add(no_secret(ctx, "grep", pattern="needle", path="d"))
            seen.add(no_secret(ctx, "grep", pattern="needle", hidden=True))
            seen.add(no_secret(ctx, "read_file", path="d/secret.txt"))
            seen.add(no_secret(ctx, "glob", pattern="d/*"))
    finally:
        stop.set()
        flipper.join()
    assert any("needle inside" in text for text in seen)


def test_a_hard_link_is_a_workspace_name_and_no_read_tool_can_make_one(
    ctx: ToolContext, workspace: Path
) -> None:
    """Landlock and openat2 go by path: a hard link the host put in the workspace is read like
    a copy would be. Making one needs write access to the workspace and to the file's
    directory on the same file system: no None-level tool writes at all, the worker may not
    link (below), and link(2) out of a container's bind mount fails with EXDEV."""
    os.link(workspace.parent / "outside" / "secret.txt", workspace / "copy.txt")

    assert "top secret" in call("read_file", ctx, path="copy.txt").output


def test_the_restriction_denies_writes_links_execution_and_tcp_to_the_worker_and_its_children(
    workspace: Path,
) -> None:
    outside = workspace.parent / "outside"
    probe = f"""
import os, socket, subprocess, sys
sys.path.insert(0, {str(Path(worker.__file__).parent)!r})
import worker
worker.restrict_self([{str(workspace)!r}], [])
def attempt(name, fn):
    try:
        fn()
        print(name, "ALLOWED")
    except OSError as exc:
        print(name, "denied", exc.errno)
attempt("read-outside", lambda: open({str(outside / "secret.txt")!r}).read())
attempt("write-inside", lambda: open({str(workspace / "new.txt")!r}, "w"))
attempt("link-in", lambda: os.link({str(outside / "secret.txt")!r}, {str(workspace / "l")!r}))
attempt("symlink", lambda: os.symlink("/etc/passwd", {str(workspace / "s")!r}))
attempt("mkdir", lambda: os.mkdir({str(workspace / "m")!r}))
attempt("exec", lambda: subprocess.run(["/bin/true"], check=True))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
attempt("read-inside", lambda: open({str(workspace / "src" / "app.py")!r}).read())
"""
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=30
    )
    verdicts = dict(line.split(" ", 1) for line in done.stdout.splitlines())

    assert verdicts.pop("read-inside") == "ALLOWED", done.stderr
    assert all(v.startswith("denied") for v in verdicts.values()), verdicts
    assert not (workspace / "new.txt").exists() and not (workspace / "l").exists()


# -- files that are not files ----------------------------------------------------------------


def test_fifos_never_block_a_read_tool(ctx: ToolContext, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    started = time.monotonic()

    assert "FIFO" in no_secret(ctx, "read_file", path="pipe")
    assert "not a regular file" in no_secret(ctx, "grep", pattern="x", path="pipe")
    assert "needle" in no_secret(ctx, "grep", pattern="needle")  # the walk skips it
    assert "pipe  (special file)" in call("list_dir", ctx).output
    assert time.monotonic() - started < 5


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs CAP_MKNOD")
def test_a_device_node_in_the_workspace_is_refused(ctx: ToolContext, workspace: Path) -> None:
    os.mknod(workspace / "zero", 0o600 | 0o020000, os.makedev(1, 5))  # like /dev/zero

    assert "a device" in no_secret(ctx, "read_file", path="zero")


# -- a worker that dies ----------------------------------------------------------------------


def _workers(env: LandlockEnvironment) -> list[Any]:
    return [w for idle in env._idle.values() for w in idle] + list(env._busy)


def test_a_worker_killed_while_idle_or_mid_call_is_replaced(
    ctx: ToolContext, env: LandlockEnvironment, workspace: Path
) -> None:
    assert "needle" in call("grep", ctx, pattern="needle").output
    for w in _workers(env):
        os.kill(w.proc.pid, signal.SIGKILL)
    assert "needle" in call("grep", ctx, pattern="needle").output  # idle: replaced at once

    os.mkfifo(workspace / "stuck")  # ripgrep, named it explicitly, blocks opening it
    request = RipgrepRequest((workspace,), workspace, ("x", "stuck"), timeout=30)
    killer = threading.Timer(
        0.5, lambda: [os.kill(w.proc.pid, signal.SIGKILL) for w in list(env._busy)]
    )
    killer.start()
    started = time.monotonic()
    with pytest.raises(ExecutionFailed, match="worker stopped during the call"):
        env.run(request)
    killer.join()
    assert time.monotonic() - started < 10
    assert "needle" in call("grep", ctx, pattern="needle").output  # the next call works


def test_a_search_past_its_deadline_is_stopped_and_the_worker_kept(
    env: LandlockEnvironment, workspace: Path, ctx: ToolContext
) -> None:
    os.mkfifo(workspace / "stuck")
    from codecoder.foundation.errors import ExecutionTimeout

    with pytest.raises(ExecutionTimeout):
        env.run(RipgrepRequest((workspace,), workspace, ("x", "stuck"), timeout=0.5))
    assert "needle" in call("grep", ctx, pattern="needle").output


# -- ignore rules, hidden files, caps, progress ------------------------------------------------


def test_gitignore_and_hidden_files_are_honoured_unless_asked(
    ctx: ToolContext, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("node_modules/\n*.log\n!keep.log\n")
    (workspace / "node_modules" / "lib").mkdir(parents=True)
    (workspace / "node_modules" / "lib" / "index.js").write_text("needle\n")
    (workspace / "debug.log").write_text("needle\n")
    (workspace / "keep.log").write_text("needle\n")
    (workspace / ".env").write_text("needle\n")

    def found(**args: Any) -> set[str]:
        return set(
            call("grep", ctx, pattern="needle", files_with_matches=True, **args).data["files"]
        )

    assert found() == {"keep.log", "src/app.py"}
    assert found(hidden=True) == {"keep.log", "src/app.py", ".env"}
    assert found(include_ignored=True) == {
        "keep.log",
        "src/app.py",
        "debug.log",
        "node_modules/lib/index.js",
    }
    assert call("glob", ctx, pattern="**/*.js").data["matches"] == []
    assert call("glob", ctx, pattern="**/*.js", include_ignored=True).data["matches"] == [
        "node_modules/lib/index.js"
    ]
    assert call("glob", ctx, pattern="node_modules/**/*.js").data["matches"] == [
        "node_modules/lib/index.js"
    ]  # a path named explicitly is searched


def test_results_are_capped_with_how_many_more_there_are(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "many.txt").write_text("needle\n" * 50)

    result = call("grep", ctx, pattern="needle", max_results=10)

    assert result.output.endswith("[41 more matching lines not shown (max_results 10)]\n")
    assert result.data["total"] == 51 and len(result.data["matches"]) == 10


def test_a_long_search_reports_progress(
    ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Progress, "FIRST", 0.0)
    monkeypatch.setattr(_Progress, "EVERY", 0.0)
    os.mkfifo(workspace / "stuck")
    heard: list[tuple[float, float | None, str | None]] = []
    ctx.progress = lambda done, total, message: heard.append((done, total, message))
    ctx.limits = type(ctx.limits)(timeout=0.8)

    with pytest.raises(Exception, match="stopped after"):
        # A search that cannot finish (ripgrep blocked on a FIFO named to it directly).
        ctx.environment.run(
            RipgrepRequest(
                (workspace,),
                workspace,
                ("x", "stuck"),
                timeout=0.8,
                on_progress=lambda lines: _Progress(ctx.progress, "grep")(lines, "so far"),
            )
        )
    assert heard and all(total is None for _, total, _ in heard)
    assert heard[-1][2] is not None and heard[-1][2].startswith("grep: ")


# -- where the kernel has no Landlock ---------------------------------------------------------


def test_without_landlock_the_read_tools_fall_back_to_wasm_and_say_so_once(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import codecoder.session as session_module

    monkeypatch.setattr(landlock_module, "unavailable_reason", lambda: "no Landlock (test)")
    session_module._notice_fallback.cache_clear()
    with Runtime(workspace, asker=non_interactive, audit_log=None) as runtime:
        outcome = runtime.session().call("read_file", {"path": "src/app.py"})
        again = runtime.session().call("grep", {"pattern": "needle"})

    assert outcome.ok and again.ok
    assert outcome.decision is not None and outcome.decision.environment is EnvironmentTag.WASM
    assert runtime.environment_of("grep") is EnvironmentTag.WASM
    assert capsys.readouterr().err.count("run in @wasm instead of @landlock") == 1


def test_with_neither_landlock_nor_wasm_the_read_tools_refuse(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codecoder.environments.wasm import environment as wasm_environment

    def unavailable(*args: Any, **kwargs: Any) -> None:
        raise SandboxUnavailable("no wasmtime here (test)")

    monkeypatch.setattr(landlock_module, "unavailable_reason", lambda: "no Landlock (test)")
    monkeypatch.setattr(wasm_environment.WasmEnvironment, "__init__", unavailable)
    with Runtime(workspace, asker=non_interactive, audit_log=None) as runtime:
        outcome = runtime.session().call("read_file", {"path": "src/app.py"})

    assert isinstance(outcome.error, SandboxUnavailable)
    assert outcome.result is None
