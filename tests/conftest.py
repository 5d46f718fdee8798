"""Fixtures shared by the tests: a machine of each test's own, a project directory, a runtime on
mock environments, askers.

Every test, in every pytest-xdist worker, runs on a machine of its own as far as codecoder can
tell (`private_state_and_config`, `private_worker_machine`): its own state and configuration
directories, decision and pool servers (they live in the state directory), TMPDIR per worker,
and nothing of the machine around it: git's and codecoder's search for a project stops
at the worker's temporary directory (GIT_CEILING_DIRECTORIES), so a foreign `.git` or
`codecoder.json` above TMPDIR changes nothing, and the signal dispositions a parent left ignored
(nohup, cron, a CI runner's background job) are back to the defaults, in the test process and
so in every process it starts.

The markers (`docs/development.md`): `docker` (a Docker engine and the sandbox image), `bwrap`
(real bubblewrap sandboxes), `agents` (the real agent CLIs from npm), `slow` (codecoder, a build
or a suite started in processes of their own), `serial` (runs while no other test runs: give
the reason), `fresh_machine` (the README's set-up in a fresh container; also `docker`).
`make test-fast` runs what none of the first four marks; most are marked here, by
rule (`pytest_collection_modifyitems`).
"""

from __future__ import annotations

import fcntl
import inspect
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.trust import record_trust
from codecoder.environments.base import CommandRequest, CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.permissions.prompt import AskRequest
from codecoder.session import Runtime


class RecordingAsker:
    """Answers prompts from a list (then Deny) and keeps every request it was shown."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[AskRequest] = []

    def __call__(self, request: AskRequest) -> Answer:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else Answer.DENY


def echo_handler(request: CommandRequest) -> CommandResult:
    shown = " ".join(request.argv) if request.argv is not None else f"bash: {request.script}"
    return CommandResult(exit_code=0, stdout=shown + "\n", stderr="", duration=0.001)


MARKERS = {
    "docker": "needs a running Docker engine and the codecoder-sandbox image",
    "bwrap": "runs commands in real bubblewrap sandboxes",
    "agents": "drives the real agent CLIs (Claude Code, Gemini CLI, Codex) from npm",
    "slow": "takes seconds: starts codecoder (or a build, a suite) in processes of its own",
    "serial": "serial(reason): runs while no other test of the run does",
    "fresh_machine": "the README's set-up run verbatim in a fresh Debian 12 container (reaches"
    " Debian's mirror and PyPI; tests/test_fresh_machine.py)",
}
# What the parent may have left ignored that Python itself ignores too (it restores them in
# every child it starts).
_PYTHON_IGNORES = frozenset({signal.SIGPIPE, signal.SIGXFSZ})


# What the process environment says of the terminal's size, which overrides the terminal's own.
_TERMINAL_SIZE = ("COLUMNS", "LINES")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def gone(*pids: int, within: float = 10.0) -> bool:
    """Whether every one of `pids` is gone, soon. A process sent SIGKILL is not gone when kill()
    returns: on a loaded machine it may take a moment to be scheduled and die, so a test that
    asks right after the call returned fails for the machine's sake, not the product's."""
    deadline = time.monotonic() + within
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    restore_default_signal_dispositions()
    given = getattr(config, "workerinput", {}).get("terminal_size")
    if given is not None:
        restore_terminal_size(given)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(pytest-xdist, in the controller) What the run was given of COLUMNS and LINES."""
    node.workerinput["terminal_size"] = {name: os.environ.get(name) for name in _TERMINAL_SIZE}


def restore_terminal_size(given: dict[str, str | None]) -> None:
    """A worker's COLUMNS and LINES as the run was given them. A worker starts with COLUMNS=80
    and LINES=24 that nobody set (the controller's C environment has them, from the readline
    of a process without a terminal), and every program a test starts in a terminal of its own
    size (pexpect's) would believe them instead of the terminal: a question shown at 220
    columns was wrapped at 80."""
    for name in _TERMINAL_SIZE:
        value = given.get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# What marks a test without a marker of its own: where it lives, the fixtures it takes, what
# its module uses. A test that starts a real sandbox some other way is marked by hand.
_DOCKER_FIXTURES = frozenset({"docker_engine", "remote_engine", "canary", "docker_services"})
_BWRAP_NAMES = frozenset({"need_bwrap", "BwrapEnvironment"})
# A module that starts `codecoder` as a process (each pays the runtime's import, about half a
# second, more on a loaded machine), directly, through a user's `Machine`, or at a terminal.
_STARTS_CODECODER = re.compile(
    r'"-m",\s*"codecoder"|\bMachine\(|\bpexpect\b'
    r"|from tests\.runtime\.interfaces\.(served|test_interactive|test_mcp_server|test_cli)\b"
)
# Modules that start other programs the rule cannot see, each with what it starts.
_SLOW_MODULES = {
    "runtime/tools/test_git_bounds.py": "each call in a process of its own, its RSS measured",
    "runtime/permissions/test_commandkey_oracle.py": "bash, as the oracle, hundreds of times",
    "runtime/interfaces/test_mcp_typescript.py": "node and the MCP server it starts",
    "test_habits.py": "make check (ruff, mypy, import-linter) on copies of the code",
    "test_layout.py": "import-linter, and a wheel built and installed",
    "test_machine_independence.py": "a slice of the suite",
    "benchmarks/test_benchmarks_shape.py": "the benchmarks' areas",
}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    starts: dict[str, bool] = {}
    for item in items:
        path = Path(str(item.path)).resolve()
        inside = path.relative_to(_TESTS).parts if path.is_relative_to(_TESTS) else ()
        fixtures = set(getattr(item, "fixturenames", ()))
        module = getattr(item, "module", None)
        if (
            fixtures & _DOCKER_FIXTURES
            or item.get_closest_marker("fresh_machine")
            or _calls_need_docker(item)
        ):
            item.add_marker(pytest.mark.docker)
        if inside[:1] == ("integrations",):
            item.add_marker(pytest.mark.agents)
        if module is not None and _BWRAP_NAMES & set(vars(module)):
            item.add_marker(pytest.mark.bwrap)
        if str(path) not in starts:
            try:
                starts[str(path)] = bool(_STARTS_CODECODER.search(path.read_text()))
            except OSError:
                starts[str(path)] = False
        if starts[str(path)] or "/".join(inside) in _SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def _calls_need_docker(item: pytest.Item) -> bool:
    """A test whose own body calls a `need_docker()` (a module's own check for the engine)."""
    function = getattr(item, "function", None)
    if function is None:
        return False
    try:
        return "need_docker(" in inspect.getsource(function)
    except (OSError, TypeError):
        return False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core, at most eight. The suite spends most of its time
    waiting on the processes, sandboxes and containers it starts (a run with one worker per
    core used a quarter of its CPU), so twice as many workers as cores keep the cores busy.
    Measured on two cores: four workers ran a quarter of the suite 2.5x faster than one."""
    return max(1, min(2 * (os.cpu_count() or 1), 8))


def restore_default_signal_dispositions() -> None:
    """Every signal a parent left ignored or blocked (nohup ignores SIGHUP, a shell's
    background job SIGINT and SIGQUIT) back to its default: SIGINT raises KeyboardInterrupt
    again, and the processes the tests start (which inherit ignored signals, never handlers)
    meet Ctrl-C, SIGHUP and SIGQUIT as they would from a terminal."""
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP) or number in _PYTHON_IGNORES:
            continue
        try:
            ignored = signal.getsignal(number) is signal.SIG_IGN
        except (OSError, ValueError):
            continue
        if ignored:
            default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
            signal.signal(number, default)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


@pytest.fixture(scope="session", autouse=True)
def private_worker_machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A TMPDIR of this pytest process's own (one per xdist worker), beside pytest's temporary
    directory and like /tmp (sticky, open to every user: a test may hand a directory in it to
    another user), removed at the end; no search for a project goes above either. (The cache
    stays the user's: the Wasm module cache is safe to share, and the audit's bait home must
    lie outside /tmp, which a sandbox replaces with its own.)"""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    scratch = Path(tempfile.mkdtemp(prefix=f"codecoder-tests-{worker}-"))
    scratch.chmod(0o1777)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(scratch))
        patch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
        patch.setenv("GIT_CEILING_DIRECTORIES", os.pathsep.join([str(base), str(scratch)]))
        for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"):
            patch.delenv(name, raising=False)
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def _alone_lock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """Two locks every worker of the run shares (in the run's own temporary directory): the
    gate, taken briefly before a test starts, and the run lock, held shared by every test and
    exclusively by a `serial` one. A serial test holds the gate until it has the run lock, so
    tests that start meanwhile wait rather than starve it."""
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    gate = os.open(root / "serial.gate", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    run = os.open(root / "serial.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    yield gate, run
    os.close(gate)
    os.close(run)


@pytest.fixture(autouse=True)
def _serial_tests_run_alone(
    request: pytest.FixtureRequest, _alone_lock: tuple[int, int]
) -> Iterator[None]:
    gate, run = _alone_lock
    alone = request.node.get_closest_marker("serial") is not None
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    finally:
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(run, fcntl.LOCK_UN)
        if alone:
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def private_state_and_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test gets its own state directory (trust records, audit logs, notes) and an empty
    user configuration: nothing of the machine's own leaks in, nothing of a test leaks out."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    # Commands run as processes evaluate in-process: a test that wants the decision server
    # (tests/runtime/interfaces/test_forkserver.py) turns it on and stops the server it started.
    monkeypatch.setenv("CODECODER_DAEMON", "0")
    # Nor does a test start a warm pool's server (its own state directory would give it one
    # each): the tests of the pool (tests/environments/docker/test_pool.py) turn it on.
    monkeypatch.setenv("CODECODER_POOL", "0")
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def write_config(root: Path, config: dict[str, Any] | str, *, trusted: bool = True) -> Path:
    """Write the project's codecoder.json and, unless `trusted=False`, trust it as the human
    would with `codecoder trust` (a test about what a file grants is not about trust)."""
    path = root / "codecoder.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config, indent=2) + "\n")
    if trusted:
        trust_project(root)
    return path


def trust_project(root: Path) -> None:
    """Record the project's codecoder.json, as it is now, as trusted."""
    record_trust(root.resolve(), (root / "codecoder.json").read_bytes(), ())


@pytest.fixture
def make_runtime(project: Path) -> Callable[..., Runtime]:
    """A runtime whose @shell, @bwrap (where commands run by default) and @docker are mock
    environments that echo what they would run."""

    def make(asker: Any = None, **kw: Any) -> Runtime:
        environments = kw.pop("environments", None) or {
            EnvironmentTag.SHELL: MockEnvironment(echo_handler, EnvironmentTag.SHELL),
            EnvironmentTag.BWRAP: MockEnvironment(echo_handler, EnvironmentTag.BWRAP),
            EnvironmentTag.DOCKER: MockEnvironment(echo_handler, EnvironmentTag.DOCKER),
        }
        return Runtime(project, asker=asker or RecordingAsker(), environments=environments, **kw)

    return make
