"""@wasm under attack, with real wasmtime: memory and tables beyond the store's limit, a FIFO in
place of a file, a module built to compile slowly, filling the disk, and planting protected
paths at any depth through a writable run. Each attack is carried out and must fail."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.request import Preopen, WasmRequest
from codecoder.foundation.decision import Answer
from codecoder.foundation.errors import (
    Cancelled,
    ExecutionFailed,
    ExecutionTimeout,
    OutOfMemory,
)
from codecoder.session import Runtime
from codecoder.tools.files import ConfinedFiles, run_wasm_preopens
from tests.conftest import RecordingAsker

PROBE = Path(__file__).resolve().parents[3] / "sandboxes" / "escapes" / "probe.wasm"
MiB = 1024 * 1024


@pytest.fixture
def env() -> Iterator[WasmEnvironment]:
    with WasmEnvironment(use_disk_cache=False) as environment:
        yield environment


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "x.c").write_text("int x;\n")
    return root


def probe(env: WasmEnvironment, *argv: str, **options: object) -> object:
    return env.run(WasmRequest(module=PROBE.read_bytes(), argv=("probe", *argv), **options))  # type: ignore[arg-type]


# --- memory, tables, compiling -----------------------------------------------------------------


def test_a_module_with_several_memories_is_refused(env: WasmEnvironment) -> None:
    two = b'(module (memory 1) (memory 1) (func (export "_start")))'
    with pytest.raises(ExecutionFailed, match="invalid wasm module"):
        env.run(WasmRequest(module=two, memory_limit=MiB))


def test_the_memory_limit_holds_for_the_module_as_a_whole(env: WasmEnvironment) -> None:
    with pytest.raises(OutOfMemory, match="memory limit of 67,108,864 bytes"):
        probe(env, "grow", str(200 * MiB), memory_limit=64 * MiB)


def test_a_table_beyond_its_share_of_the_limit_is_refused(env: WasmEnvironment) -> None:
    huge = b'(module (table 50000000 funcref) (func (export "_start")))'
    with pytest.raises(OutOfMemory, match="tables need more than their limit"):
        env.run(WasmRequest(module=huge))


def test_growing_tables_past_their_share_is_refused(env: WasmEnvironment) -> None:
    grows = b"""(module
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (table $t 1 funcref)
      (func (export "_start")
        (call $exit
          (i32.eq (table.grow $t (ref.null func) (i32.const 50000000)) (i32.const -1)))))"""

    result = env.run(WasmRequest(module=grows))

    assert result.exit_code == 1  # table.grow answered -1: refused


def _slow_to_compile(branches: int) -> bytes:
    """One function of `branches` ifs: small, and a long compile (register allocation)."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def section(number: int, body: bytes) -> bytes:
        return bytes([number]) + leb(len(body)) + body

    code = bytearray(leb(1) + leb(64) + b"\x7f")
    for i in range(branches):
        code += b"\x20" + leb(i % 64) + b"\x04\x40\x20" + leb((i + 1) % 64)
        code += b"\x41\x01\x6a\x21" + leb((i + 2) % 64) + b"\x0b"
    code += b"\x0b"
    return (
        b"\0asm\x01\0\0\0"
        + section(1, b"\x01\x60\x00\x00")
        + section(3, b"\x01\x00")
        + section(7, b"\x01\x06_start\x00\x00")
        + section(10, b"\x01" + leb(len(code)) + bytes(code))
    )


def test_compiling_counts_against_the_timeout(env: WasmEnvironment) -> None:
    module = _slow_to_compile(60_000)  # about 700 KB; several seconds to compile
    started = time.monotonic()

    with pytest.raises(ExecutionTimeout, match="compiling the module took longer than its time"):
        env.run(WasmRequest(module=module, timeout=0.5))
    elapsed = time.monotonic() - started
    after = probe(env, "exit", "3")

    assert elapsed < 2.5
    assert after.exit_code == 3  # type: ignore[attr-defined]  # the next compile works


# --- FIFOs -------------------------------------------------------------------------------------


def test_opening_a_fifo_no_one_writes_ends_at_the_timeout(
    env: WasmEnvironment, workspace: Path
) -> None:
    os.mkfifo(workspace / "src" / "fifo")
    started = time.monotonic()

    with pytest.raises(ExecutionTimeout):
        probe(
            env,
            "read",
            "/workspace/src/fifo",
            preopens=(Preopen(workspace, "/workspace"),),
            timeout=1,
        )

    assert time.monotonic() - started < 3


def test_a_cancelled_module_waiting_on_a_fifo_is_freed_at_once(
    env: WasmEnvironment, workspace: Path
) -> None:
    os.mkfifo(workspace / "src" / "fifo")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()

    with pytest.raises(Cancelled):
        probe(
            env,
            "read",
            "/workspace/src/fifo",
            preopens=(Preopen(workspace, "/workspace"),),
            timeout=60,
            cancel=cancel,
        )

    assert time.monotonic() - started < 3


def test_reading_a_fifo_a_writer_keeps_empty_does_not_hang(
    env: WasmEnvironment, workspace: Path
) -> None:
    fifo = workspace / "src" / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer that never writes
    started = time.monotonic()
    try:
        result = probe(
            env,
            "read",
            "/workspace/src/fifo",
            preopens=(Preopen(workspace, "/workspace"),),
            timeout=5,
        )
    finally:
        os.close(writer)

    # wasmtime reads files at an offset: a FIFO answers ESPIPE at once.
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert time.monotonic() - started < 3


def test_read_file_refuses_a_fifo(env: WasmEnvironment, workspace: Path) -> None:
    os.mkfifo(workspace / "src" / "fifo")
    files = ConfinedFiles(env, workspace, timeout=5)
    started = time.monotonic()

    with pytest.raises(ExecutionFailed, match="not a regular file"):
        files.read("src/fifo")
    control = files.read("src/x.c")

    assert time.monotonic() - started < 3
    assert control.data == b"int x;\n"


def test_a_fifo_in_place_of_a_module_file_is_refused(env: WasmEnvironment, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "module.wasm")
    with pytest.raises(ExecutionFailed, match="is not a regular file"):
        env.run(WasmRequest(module=tmp_path / "module.wasm"))


# --- the disk ----------------------------------------------------------------------------------


def test_a_writable_call_past_its_disk_budget_is_stopped(
    env: WasmEnvironment, workspace: Path
) -> None:
    started = time.monotonic()
    with pytest.raises(ExecutionFailed, match="disk budget of 16,777,216 bytes"):
        probe(
            env,
            "fill",
            "/workspace/src/big",
            str(4 * 1024 * MiB),
            preopens=(Preopen(workspace / "src", "/workspace/src", writable=True),),
            disk_budget=16 * MiB,
            timeout=60,
        )

    assert time.monotonic() - started < 20
    assert (workspace / "src" / "big").stat().st_size < 1024 * MiB


GiB = 1024 * MiB
SRC = "/workspace/src"


@pytest.mark.parametrize(
    "argv",
    [
        ("hole", f"{SRC}/sparse.img", str(8 * GiB)),  # ftruncate past the end
        ("far", f"{SRC}/far.img", str(64 * GiB)),  # one byte written far out
        ("hole", f"{SRC}/deep/4g.img", str(4 * GiB + 7)),
        ("links", f"{SRC}/seed.bin", f"{SRC}/deep/name", "40"),  # 40 names of one MiB
    ],
)
def test_what_an_untrusted_module_writes_counts_at_apparent_size_against_its_budget(
    env: WasmEnvironment, workspace: Path, argv: tuple[str, ...]
) -> None:
    (workspace / "src" / "seed.bin").write_bytes(os.urandom(MiB))
    writable = (Preopen(workspace / "src", SRC, writable=True),)

    with pytest.raises(ExecutionFailed, match="counting apparent sizes"):
        probe(env, *argv, preopens=writable, disk_budget=16 * MiB, workspace=workspace)
    time.sleep(0.05)  # a tick of the ctime clock later: the file above is not the control's
    control = probe(
        env,
        "fill",
        f"{SRC}/ok.bin",
        str(MiB),
        preopens=writable,
        disk_budget=16 * MiB,
        workspace=workspace,
    )

    assert control.exit_code == 0  # type: ignore[attr-defined]


def test_run_wasm_counts_a_sparse_file_at_its_apparent_size(project: Path) -> None:
    outcome = run_wasm(project, "hole", "/workspace/src/disk.img", str(64 * GiB))

    assert isinstance(outcome.error, ExecutionFailed), outcome  # type: ignore[attr-defined]
    assert "disk budget of 1,073,741,824 bytes" in str(outcome.error)  # type: ignore[attr-defined]
    assert "src/disk.img (68,719,476,736 bytes)" not in str(outcome.error)  # type: ignore[attr-defined]
    assert "disk.img (68,719,476,736 bytes)" in str(outcome.error)  # type: ignore[attr-defined]


# --- protected paths ---------------------------------------------------------------------------


@pytest.fixture
def project(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    shutil.copy(PROBE, workspace / "probe.wasm")
    (workspace / "vendor" / "lib" / ".git" / "hooks").mkdir(parents=True)
    (workspace / "vendor" / "lib" / "code.c").write_text("int y;\n")
    (workspace / "vendor" / "other").mkdir()
    (workspace / ".git").mkdir()
    return workspace


def run_wasm(project: Path, *args: str) -> object:
    with Runtime(project, asker=RecordingAsker(Answer.ONCE)) as runtime:
        return runtime.session().call(
            "run_wasm", {"path": "probe.wasm", "args": list(args), "writable": True}
        )


@pytest.mark.parametrize(
    ("args", "planted"),
    [
        (("mkdirs", "/workspace/src/deep/.git/hooks"), "src/deep/.git"),
        (("write", "/workspace/src/.gitmodules", "[submodule]"), "src/.gitmodules"),
        (("write", "/workspace/src/deep/.git", "gitdir: /tmp"), "src/deep/.git"),
        (("symlink", "deep", "/workspace/src/.git"), "src/.git"),
        (("rename", "/workspace/src/deep", "/workspace/src/.git"), "src/.git"),
        (("mkdirs", "/workspace/vendor/other/.GIT"), "vendor/other/.GIT"),
    ],
)
def test_a_writable_module_planting_a_protected_path_fails_and_it_is_quarantined(
    project: Path, args: tuple[str, ...], planted: str
) -> None:
    outcome = run_wasm(project, *args)

    assert isinstance(outcome.error, ExecutionFailed), outcome  # type: ignore[attr-defined]
    assert f"created {planted}" in str(outcome.error)  # type: ignore[attr-defined]
    assert "Quarantined" in str(outcome.error)  # type: ignore[attr-defined]
    assert not os.path.lexists(project / planted)


def test_writable_preopens_leave_out_every_directory_holding_a_protected_path(
    project: Path,
) -> None:
    preopens = run_wasm_preopens(project, writable=True)

    assert [(p.guest, p.writable) for p in preopens] == [
        ("/workspace", False),
        ("/workspace/src", True),
        ("/workspace/vendor/other", True),
    ]


@pytest.mark.parametrize(
    "target",
    [
        "/workspace/vendor/lib/.git/hooks/pre-commit",
        "/workspace/vendor/lib/code.c",
        "/workspace/.git/config",
        "/workspace/top-level.txt",
    ],
)
def test_a_writable_module_cannot_write_where_a_protected_path_is(
    project: Path, target: str
) -> None:
    outcome = run_wasm(project, "write", target, "planted")
    control = run_wasm(project, "write", "/workspace/vendor/other/ok.txt", "fine")

    assert outcome.unwrap().data["exit_code"] == 1  # type: ignore[attr-defined]
    assert control.unwrap().data["exit_code"] == 0  # type: ignore[attr-defined]
    assert (project / "vendor" / "lib" / "code.c").read_text() == "int y;\n"
    assert list((project / "vendor" / "lib" / ".git" / "hooks").iterdir()) == []


def test_a_guarded_writable_preopen_may_not_hold_a_protected_path(
    env: WasmEnvironment, project: Path
) -> None:
    with pytest.raises(ExecutionFailed, match=r"holds vendor/lib/\.git"):
        probe(
            env,
            "exit",
            "0",
            preopens=(Preopen(project / "vendor", "/workspace/vendor", writable=True),),
            workspace=project,
        )


def test_calls_blocked_on_fifos_do_not_hold_up_other_calls(
    env: WasmEnvironment, workspace: Path
) -> None:
    os.mkfifo(workspace / "src" / "fifo")
    probe(env, "exit", "0")  # compiled: what is measured is the run
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            probe(
                env,
                "read",
                "/workspace/src/fifo",
                preopens=(Preopen(workspace, "/workspace"),),
                timeout=3,
            )
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    other = probe(env, "exit", "5")
    elapsed = time.monotonic() - started
    thread.join()

    assert other.exit_code == 5  # type: ignore[attr-defined]
    assert elapsed < 2  # behind the blocked call it would take 2.8 s or more
    assert [type(e) for e in errors] == [ExecutionTimeout]
