"""The @wasm environment with real wasmtime: confinement, limits, trap mapping, module cache.

The modules are small `.wat` programs written here (each one an attempt to do something it must
not, or to exhaust a limit) plus the committed fileops.wasm, which does whatever its argv asks.
"""

from __future__ import annotations

import importlib.resources
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import wasmtime

from codecoder.environments.wasm.environment import WasmEnvironment
from codecoder.environments.wasm.request import Preopen, WasmRequest, WasmResult
from codecoder.foundation.errors import (
    Cancelled,
    CodecoderError,
    ExecutionFailed,
    ExecutionTimeout,
    OutOfFuel,
    OutOfMemory,
    SandboxUnavailable,
    ToolError,
)

FILEOPS = Path(
    str(importlib.resources.files("codecoder.sandboxes").joinpath("fileops/fileops.wasm"))
)

CAT = b"""(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (local $n i32)
    (loop $again
      (i32.store (i32.const 0) (i32.const 1024))
      (i32.store (i32.const 4) (i32.const 4096))
      (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $n (i32.load (i32.const 8)))
      (if (i32.gt_u (local.get $n) (i32.const 0))
        (then
          (i32.store (i32.const 4) (local.get $n))
          (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 12)))
          (br $again))))))
"""

# Prints its argv buffer, then its environment buffer, and exits with the number of variables.
ARGV_AND_ENVIRON = b"""(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get"
    (func $env_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $env_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 2)
  (func $print (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (drop (call $args_sizes (i32.const 16) (i32.const 20)))
    (drop (call $args_get (i32.const 1024) (i32.const 8192)))
    (call $print (i32.const 8192) (i32.load (i32.const 20)))
    (drop (call $env_sizes (i32.const 24) (i32.const 28)))
    (drop (call $env_get (i32.const 2048) (i32.const 32768)))
    (call $print (i32.const 32768) (i32.load (i32.const 28)))
    (call $exit (i32.load (i32.const 24)))))
"""

EXIT_7 = b"""(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "bye\\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 4))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const 7))))
"""

LOOP_FOREVER = b'(module (func (export "_start") (loop $l (br $l))))'

GROW_WITHOUT_BOUND = b"""(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable))
"""

HUGE_INITIAL_MEMORY = b'(module (memory (export "memory") 1000) (func (export "_start")))'

UNREACHABLE = b'(module (memory (export "memory") 1) (func (export "_start") unreachable))'


def flood(chunks: int | None) -> bytes:
    """Writes 64 KiB of `x` per chunk to stdout (forever if None), then `END`."""
    repeat = "(br $again)" if chunks is None else "(br_if $again (local.get $i))"
    return f"""(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "END")
  (func (export "_start")
    (local $i i32)
    (memory.fill (i32.const 65536) (i32.const 120) (i32.const 65536))
    (local.set $i (i32.const {chunks or 0}))
    (loop $again
      (i32.store (i32.const 0) (i32.const 65536))
      (i32.store (i32.const 4) (i32.const 65536))
      (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      {repeat})
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 3))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
""".encode()


def open_attempts(paths: list[str], *, fds: range = range(3, 4), write: bool = False) -> bytes:
    """A module that calls path_open for each path under each preopened fd, following
    symlinks, and exits with how many opens succeeded (and, when writing, wrote `pwned`)."""
    oflags = 1 | 8 if write else 0  # CREAT | TRUNC
    rights = 64 if write else 2  # FD_WRITE or FD_READ
    data, calls = [], []
    offset = 1024
    for path in paths:
        raw = path.encode()
        data.append(f'(data (i32.const {offset}) "{path}")')
        for fd in fds:
            calls.append(
                f"""(if (i32.eqz (call $path_open (i32.const {fd}) (i32.const 1)
                      (i32.const {offset}) (i32.const {len(raw)}) (i32.const {oflags})
                      (i64.const {rights}) (i64.const {rights}) (i32.const 0) (i32.const 8)))
                  (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))
                        (drop (call $fd_write (i32.load (i32.const 8)) (i32.const 16)
                                            (i32.const 1) (i32.const 24)))))"""
            )
        offset += len(raw) + 8
    return f"""(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 512) "pwned")
  {" ".join(data)}
  (func (export "_start")
    (local $ok i32)
    (i32.store (i32.const 16) (i32.const 512))
    (i32.store (i32.const 20) (i32.const 5))
    {" ".join(calls)}
    (call $exit (local.get $ok))))
""".encode()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[WasmEnvironment]:
    environment = WasmEnvironment(cache_dir=tmp_path / "cache")
    yield environment
    environment.close()


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A directory to preopen, next to a secret that must stay out of reach."""
    (tmp_path / "secret.txt").write_text("top secret\n")
    root = tmp_path / "box"
    (root / "sub").mkdir(parents=True)
    (root / "inside.txt").write_text("inside\n")
    (root / "link_out").symlink_to("..")
    (root / "abs_link").symlink_to(tmp_path / "secret.txt")
    (root / "rel_link").symlink_to("../secret.txt")
    return root


def fileops(
    env: WasmEnvironment, root: Path, *argv: str, writable: bool = False, stdin: bytes = b""
) -> WasmResult:
    return env.run(
        WasmRequest(
            module=FILEOPS,
            argv=("fileops", *argv),
            stdin=stdin,
            preopens=(Preopen(root, "/box", writable=writable),),
        )
    )


# -- argv, stdin, stdout, environment -------------------------------------------------------


def test_stdin_comes_back_on_stdout(env: WasmEnvironment) -> None:
    result = env.run(WasmRequest(module=CAT, stdin=b"hello\nworld\n" * 1000))

    assert (result.exit_code, result.stdout, result.stderr) == (0, b"hello\nworld\n" * 1000, b"")
    assert not result.truncated and result.fuel_consumed > 0


def test_the_module_sees_exactly_its_argv_and_an_empty_environment(
    env: WasmEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODECODER_TEST_SECRET", "must-not-leak")

    result = env.run(WasmRequest(module=ARGV_AND_ENVIRON, argv=("prog", "a", "b c")))

    assert result.stdout == b"prog\0a\0b c\0"
    assert result.exit_code == 0  # the number of environment variables it saw


def test_fileops_arguments_select_the_operation(env: WasmEnvironment, box: Path) -> None:
    result = fileops(env, box, "read", "/box/inside.txt", "0", "100")

    assert result.exit_code == 0
    assert result.stdout == b'{"size":7,"offset":0,"length":7}\ninside\n'


# -- confinement ----------------------------------------------------------------------------


def test_a_read_only_preopen_refuses_every_write(env: WasmEnvironment, box: Path) -> None:
    by_fileops = fileops(env, box, "write", "/box/inside.txt", stdin=b"changed")
    by_hand = env.run(
        WasmRequest(
            module=open_attempts(["inside.txt", "new.txt"], write=True),
            preopens=(Preopen(box, "/box"),),
        )
    )

    assert by_fileops.exit_code == 1 and b"EPERM" in by_fileops.stderr
    assert by_hand.exit_code == 0  # opens that succeeded
    assert (box / "inside.txt").read_text() == "inside\n"
    assert not (box / "new.txt").exists()


def test_the_same_module_writes_through_a_writable_preopen(env: WasmEnvironment, box: Path) -> None:
    result = env.run(
        WasmRequest(
            module=open_attempts(["new.txt"], write=True),
            preopens=(Preopen(box, "/box", writable=True),),
        )
    )

    assert result.exit_code == 1
    assert (box / "new.txt").read_text() == "pwned"


ESCAPES = [
    "../secret.txt",
    "sub/../../secret.txt",
    "link_out/secret.txt",
    "abs_link",
    "rel_link",
    "/etc/passwd",
    "/proc/self/environ",
]


def test_nothing_outside_the_preopen_can_be_opened(env: WasmEnvironment, box: Path) -> None:
    preopens = (Preopen(box, "/box"),)

    escapes = env.run(WasmRequest(module=open_attempts(ESCAPES), preopens=preopens))
    control = env.run(WasmRequest(module=open_attempts(["inside.txt"]), preopens=preopens))

    assert escapes.exit_code == 0
    assert control.exit_code == 1


def test_nothing_outside_a_writable_preopen_can_be_written(env: WasmEnvironment, box: Path) -> None:
    preopens = (Preopen(box, "/box", writable=True),)

    result = env.run(WasmRequest(module=open_attempts(ESCAPES[:5], write=True), preopens=preopens))

    assert result.exit_code == 0
    assert (box.parent / "secret.txt").read_text() == "top secret\n"


@pytest.mark.parametrize(
    "path",
    ["/box/../secret.txt", "/box/link_out/secret.txt", "/box/abs_link", "/proc/self/environ"],
)
def test_fileops_cannot_read_outside_the_preopen(
    env: WasmEnvironment, box: Path, path: str
) -> None:
    result = fileops(env, box, "read", path, "0", "100")

    assert result.exit_code == 1
    assert b"secret" not in result.stdout and result.stdout == b""
    assert b'"errno":"EPERM"' in result.stderr or b'"errno":"ENOTCAPABLE"' in result.stderr


def test_a_module_cannot_open_a_socket(env: WasmEnvironment) -> None:
    accept_on_stdin = b"""(module
      (import "wasi_snapshot_preview1" "sock_accept"
        (func $accept (param i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start")
        (call $exit (call $accept (i32.const 0) (i32.const 0) (i32.const 8)))))
    """
    open_one = b"""(module
      (import "wasi_snapshot_preview1" "sock_open" (func $open (param i32 i32 i32) (result i32)))
      (memory (export "memory") 1)
      (func (export "_start") (drop (call $open (i32.const 1) (i32.const 1) (i32.const 8)))))
    """

    assert env.run(WasmRequest(module=accept_on_stdin)).exit_code != 0  # an errno
    with pytest.raises(ExecutionFailed, match="cannot be linked"):
        env.run(WasmRequest(module=open_one))


# -- limits and traps -----------------------------------------------------------------------


def test_running_out_of_fuel_is_out_of_fuel(env: WasmEnvironment) -> None:
    with pytest.raises(OutOfFuel, match="fuel"):
        env.run(WasmRequest(module=LOOP_FOREVER, fuel=1_000_000))


def test_an_infinite_loop_is_stopped_near_its_timeout(env: WasmEnvironment) -> None:
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout, match=r"timeout of 0\.5s"):
        env.run(WasmRequest(module=LOOP_FOREVER, timeout=0.5, fuel=10**15))

    assert 0.45 <= time.monotonic() - started < 1.5


def test_growing_memory_past_the_limit_is_out_of_memory(env: WasmEnvironment) -> None:
    with pytest.raises(OutOfMemory, match="memory limit of 4,194,304 bytes"):
        env.run(WasmRequest(module=GROW_WITHOUT_BOUND, memory_limit=4 * 1024 * 1024))


def test_a_module_needing_more_initial_memory_than_the_limit_is_out_of_memory(
    env: WasmEnvironment,
) -> None:
    with pytest.raises(OutOfMemory, match="needs more memory"):
        env.run(WasmRequest(module=HUGE_INITIAL_MEMORY, memory_limit=1024 * 1024))


def test_proc_exit_is_an_exit_code_not_an_error(env: WasmEnvironment) -> None:
    result = env.run(WasmRequest(module=EXIT_7))

    assert (result.exit_code, result.stdout, result.stderr) == (7, b"", b"bye\n")


def test_any_other_trap_is_execution_failed_with_the_trap_message(env: WasmEnvironment) -> None:
    with pytest.raises(ExecutionFailed, match="unreachable"):
        env.run(WasmRequest(module=UNREACHABLE))


def test_output_beyond_the_cap_keeps_head_and_tail_with_a_marker(env: WasmEnvironment) -> None:
    result = env.run(WasmRequest(module=flood(16), max_output=1000))  # 1 MiB, then END

    assert result.stdout_truncated
    assert result.stdout.startswith(b"x" * 500 + b"\n[... ")
    assert result.stdout.endswith(b"x" * 497 + b"END")
    assert f"[... {16 * 65536 + 3 - 1000} bytes truncated ...]".encode() in result.stdout


def test_a_module_flooding_stdout_forever_is_stopped_at_its_timeout(env: WasmEnvironment) -> None:
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout):
        env.run(WasmRequest(module=flood(None), timeout=1.0, max_output=4096))

    assert time.monotonic() - started < 3.0


@pytest.mark.parametrize(
    ("module", "error"),
    [
        (b"\0asm\x01\0\0\0garbage", ExecutionFailed),
        (b"(module (func $f", ExecutionFailed),
        (b"(module)", ExecutionFailed),  # no _start
        (UNREACHABLE, ExecutionFailed),
        (LOOP_FOREVER, OutOfFuel),
        (GROW_WITHOUT_BOUND, OutOfMemory),
    ],
)
def test_no_wasmtime_exception_leaks(
    env: WasmEnvironment, module: bytes, error: type[ToolError]
) -> None:
    with pytest.raises(CodecoderError) as raised:
        env.run(WasmRequest(module=module, fuel=10_000_000, memory_limit=1 << 20))

    assert type(raised.value) is error
    assert not isinstance(raised.value, wasmtime.WasmtimeError | wasmtime.Trap)


def test_a_missing_module_file_is_execution_failed(env: WasmEnvironment, tmp_path: Path) -> None:
    with pytest.raises(ExecutionFailed, match="cannot read module"):
        env.run(WasmRequest(module=tmp_path / "nope.wasm"))


def test_concurrent_calls_share_one_ticker_and_keep_their_own_output(env: WasmEnvironment) -> None:
    results: dict[int, bytes] = {}
    # Tickers of environments other tests of this process left behind are not this one's.
    before = {t for t in threading.enumerate() if t.name == "codecoder-wasm-epoch"}

    def run(i: int) -> None:
        results[i] = env.run(WasmRequest(module=CAT, stdin=f"call {i}\n".encode() * 5000)).stdout

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == {i: f"call {i}\n".encode() * 5000 for i in range(8)}
    tickers = {t for t in threading.enumerate() if t.name == "codecoder-wasm-epoch"} - before
    assert len(tickers) <= 1


def test_a_closed_environment_refuses_to_run(tmp_path: Path) -> None:
    environment = WasmEnvironment(cache_dir=tmp_path / "cache")
    environment.close()

    with pytest.raises(SandboxUnavailable):
        environment.run(WasmRequest(module=CAT))


# -- the compiled-module cache --------------------------------------------------------------


def test_a_new_environment_loads_the_compiled_module_from_disk(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with WasmEnvironment(cache_dir=cache) as first:
        first.run(WasmRequest(module=FILEOPS, argv=("fileops",)))
        first.run(WasmRequest(module=FILEOPS, argv=("fileops",)))
        first_stats = first.cache_stats
    with WasmEnvironment(cache_dir=cache) as second:
        result = second.run(WasmRequest(module=FILEOPS, argv=("fileops",)))
        second_stats = second.cache_stats

    assert result.exit_code == 2  # usage: the module ran
    assert (first_stats.compiled, first_stats.stored, first_stats.memory_hits) == (1, 1, 1)
    assert (second_stats.compiled, second_stats.disk_hits) == (0, 1)


def test_the_cache_directory_is_created_private(tmp_path: Path) -> None:
    cache = tmp_path / "deep" / "cache"
    with WasmEnvironment(cache_dir=cache) as environment:
        environment.run(WasmRequest(module=CAT))

    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    entries = [p for p in cache.iterdir() if p.suffix == ".cwasm"]
    assert len(entries) == 1
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache.iterdir())


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in cache.iterdir() if p.suffix == ".cwasm"]
    return entry


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _wrong_magic(path: Path) -> None:
    path.write_bytes(b"NOTMAGIC" + path.read_bytes()[8:])


def _garbage_with_a_valid_mac(path: Path) -> None:
    # What a writer who knew the key could plant: authenticated, but not a compiled module.
    import hashlib
    import hmac

    secret = (path.parent / "hmac.key").read_bytes()
    key = path.name.removesuffix(".cwasm")
    payload = b"definitely not machine code"
    mac = hmac.new(secret, key.encode() + b"\0" + payload, hashlib.sha256).digest()
    path.write_bytes(b"CCWASM\x01\n" + mac + len(payload).to_bytes(8, "big") + payload)


@pytest.mark.parametrize(
    "tamper", [_flip_last_byte, _truncate, _wrong_magic, _garbage_with_a_valid_mac]
)
def test_a_tampered_cache_entry_is_discarded_and_recompiled(
    tmp_path: Path, tamper: Callable[[Path], None]
) -> None:
    cache = tmp_path / "cache"
    with WasmEnvironment(cache_dir=cache) as first:
        first.run(WasmRequest(module=EXIT_7))
    tamper(_entry(cache))

    with WasmEnvironment(cache_dir=cache) as second:
        result = second.run(WasmRequest(module=EXIT_7))
        stats = second.cache_stats

    assert result.exit_code == 7
    assert (stats.discarded, stats.compiled, stats.disk_hits, stats.stored) == (1, 1, 0, 1)
    with WasmEnvironment(cache_dir=cache) as third:  # the rewritten entry is good again
        third.run(WasmRequest(module=EXIT_7))
        assert third.cache_stats.disk_hits == 1


def test_an_entry_renamed_to_another_modules_key_is_not_loaded(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with WasmEnvironment(cache_dir=cache) as first:
        first.run(WasmRequest(module=EXIT_7))
        exit_entry = _entry(cache)
        first.run(WasmRequest(module=CAT, stdin=b"x"))
    cat_entry = next(p for p in cache.glob("*.cwasm") if p != exit_entry)
    os.replace(exit_entry, cat_entry)  # the exit module's code under the cat module's key

    with WasmEnvironment(cache_dir=cache) as second:
        result = second.run(WasmRequest(module=CAT, stdin=b"hello"))

    assert (result.exit_code, result.stdout) == (0, b"hello")
    assert second.cache_stats.discarded == 1


def test_an_entry_from_another_cache_is_not_loaded(tmp_path: Path) -> None:
    with WasmEnvironment(cache_dir=tmp_path / "theirs") as theirs:
        theirs.run(WasmRequest(module=EXIT_7))
    with WasmEnvironment(cache_dir=tmp_path / "ours") as ours:
        ours.run(WasmRequest(module=CAT))
    foreign = _entry(tmp_path / "theirs")
    os.replace(foreign, tmp_path / "ours" / foreign.name)

    with WasmEnvironment(cache_dir=tmp_path / "ours") as again:
        assert again.run(WasmRequest(module=EXIT_7)).exit_code == 7
        assert (again.cache_stats.discarded, again.cache_stats.compiled) == (1, 1)


def _make_group_writable(cache: Path) -> None:
    cache.mkdir()
    cache.chmod(0o770)


def _make_world_writable(cache: Path) -> None:
    cache.mkdir()
    cache.chmod(0o777)


def _make_a_symlink(cache: Path) -> None:
    real = cache.parent / "real-cache"
    real.mkdir(mode=0o700)
    cache.symlink_to(real)


def _make_owned_by_another_user(cache: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a directory's owner needs root")
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)


def _loosen_the_key(cache: Path) -> None:
    with WasmEnvironment(cache_dir=cache):
        pass
    (cache / "hmac.key").chmod(0o644)


@pytest.mark.parametrize(
    "spoil",
    [
        _make_group_writable,
        _make_world_writable,
        _make_a_symlink,
        _make_owned_by_another_user,
        _loosen_the_key,
    ],
)
def test_a_cache_directory_others_could_write_is_not_used(
    tmp_path: Path, spoil: Callable[[Path], None]
) -> None:
    cache = tmp_path / "cache"
    spoil(cache)
    before = sorted(p.name for p in cache.iterdir())

    with WasmEnvironment(cache_dir=cache) as environment:
        result = environment.run(WasmRequest(module=EXIT_7))
        stats = environment.cache_stats

        assert environment.disk_cache_dir is None
    assert result.exit_code == 7
    assert (stats.compiled, stats.stored, stats.disk_hits) == (1, 0, 0)
    assert sorted(p.name for p in cache.iterdir()) == before


def test_a_module_file_that_changes_is_compiled_again(env: WasmEnvironment, tmp_path: Path) -> None:
    module = tmp_path / "m.wat"
    module.write_bytes(EXIT_7)
    first = env.run(WasmRequest(module=module))
    module.write_bytes(EXIT_7.replace(b"i32.const 7", b"i32.const 9"))

    second = env.run(WasmRequest(module=module))

    assert (first.exit_code, second.exit_code) == (7, 9)


def test_a_warm_environment_does_not_reread_an_unchanged_module_file(
    env: WasmEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "m.wat"
    module.write_bytes(EXIT_7)
    env.run(WasmRequest(module=module))

    def no_reading(self: Path) -> bytes:
        raise AssertionError("the module was read again")

    monkeypatch.setattr(Path, "read_bytes", no_reading)
    assert env.run(WasmRequest(module=module)).exit_code == 7
    assert env.cache_stats.memory_hits == 1


def sleeper(seconds: float, clock: int = 1, absolute: bool = False) -> bytes:
    """A module that sleeps through poll_oneoff on one clock subscription, then exits 7."""
    timeout = int(seconds * 1e9)
    set_timeout = f"(i64.store (i32.const 24) (i64.const {timeout}))"
    if absolute:
        set_timeout = (
            "(drop (call $clock_time_get (i32.const 1) (i64.const 0) (i32.const 200)))"
            f"(i64.store (i32.const 24) (i64.add (i64.load (i32.const 200)) "
            f"(i64.const {timeout})))"
        )
    return f"""(module
      (import "wasi_snapshot_preview1" "poll_oneoff"
        (func $poll (param i32 i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "clock_time_get"
        (func $clock_time_get (param i32 i64 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start")
        (i64.store (i32.const 0) (i64.const 42))
        (i32.store8 (i32.const 8) (i32.const 0))
        (i32.store (i32.const 16) (i32.const {clock}))
        {set_timeout}
        (i32.store16 (i32.const 40) (i32.const {1 if absolute else 0}))
        (drop (call $poll (i32.const 0) (i32.const 100) (i32.const 1) (i32.const 300)))
        (if (i32.ne (i32.load (i32.const 300)) (i32.const 1)) (then (call $exit (i32.const 1))))
        (if (i64.ne (i64.load (i32.const 100)) (i64.const 42)) (then (call $exit (i32.const 2))))
        (call $exit (i32.const 7))))""".encode()


@pytest.mark.parametrize("absolute", [False, True])
def test_a_sleep_past_the_timeout_is_stopped_at_the_timeout(
    env: WasmEnvironment, absolute: bool
) -> None:
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout, match=r"slept past its timeout of 0\.5s"):
        env.run(WasmRequest(module=sleeper(3600, absolute=absolute), timeout=0.5))
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("module", [LOOP_FOREVER, sleeper(3600)], ids=["spinning", "sleeping"])
def test_a_cancelled_module_stops_at_once_not_at_its_timeout(
    env: WasmEnvironment, module: bytes
) -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    started = time.monotonic()
    timer.start()
    with pytest.raises(Cancelled, match=r"cancelled after 0\.\d+s: the module was stopped"):
        env.run(WasmRequest(module=module, timeout=60, fuel=10**15, cancel=cancel))
    assert time.monotonic() - started < 1.5
    assert env.run(WasmRequest(module=sleeper(0.01), timeout=5)).exit_code == 7  # still serves


def test_a_short_sleep_within_the_timeout_completes(env: WasmEnvironment) -> None:
    started = time.monotonic()
    result = env.run(WasmRequest(module=sleeper(0.2), timeout=5))
    assert result.exit_code == 7
    assert 0.2 <= time.monotonic() - started < 2.0
