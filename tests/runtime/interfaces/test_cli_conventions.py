"""The conventions every command keeps (docs/cli.md): a reader that goes away ends a command
quietly, and options may stand anywhere before `--`. Real processes, in-process and through the
decision server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from codecoder.interfaces.forkserver.protocol import SERVED
from tests.runtime.interfaces.served import Machine

# --- a reader that goes away ---------------------------------------------------------------

# A command of each kind, with what makes it print: served by the decision server (SERVED) or
# run in the client's own process.
PRINTING = [
    ("tools",),
    ("tools", "--json"),
    ("key", "--", "git status"),
    ("check",),
    ("decide", "read_file", "big.txt"),
    ("call", "read_file", "big.txt"),
    ("call", "read_file", "--json", "big.txt"),
    ("schema", "--format", "openai"),
    ("log", "--last", "500"),
    ("allowlist", "list"),
    ("init", "--print"),
    ("trust", "--show"),
    ("completion", "bash"),
    ("call", "--help"),
    ("--help",),
]


def _closed_pipe_run(machine: Machine, argv: tuple[str, ...], daemon: bool) -> tuple[int, str]:
    """Run `codecoder ARGV` whose stdout is a pipe nobody reads any more (as `| head -1` leaves
    it once head has its line): the exit code and what it said on stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            machine.command(*argv),
            stdout=write,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=60,
            env=machine.environment(daemon),
            cwd=machine.project,
        )
    finally:
        os.close(write)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("argv", "daemon"),
    [
        *((argv, False) for argv in PRINTING),
        *((argv, True) for argv in PRINTING if argv[0] in SERVED),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else ("in-process", "served")[v],
)
def test_a_command_whose_reader_went_away_ends_quietly_with_141(
    machine: Machine, argv: tuple[str, ...], daemon: bool
) -> None:
    (machine.project / "big.txt").write_text("".join(f"line {n}\n" for n in range(20_000)))
    server = machine.serving() if daemon else None
    code, stderr = _closed_pipe_run(machine, argv, daemon)
    # 141 = 128 + SIGPIPE, what a shell shows for `seq 1 1000000 | head -1`'s seq. Help text
    # is written by argparse, which drops what it cannot write and exits 0 (when the text did
    # not wait in the buffer for the last flush).
    assert stderr == ""
    assert code in ((0, 141) if "--help" in argv else (141,))
    if daemon:
        assert machine.server_pid() == server  # it was served, not run in-process


def test_a_broken_pipe_that_is_not_the_readers_is_an_error(
    machine: Machine, tmp_path: Path
) -> None:
    """Only the command's own reader going away is quiet: the same error from anything else
    (here, a sitecustomize that breaks a pipe of its own) still says what happened."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import codecoder.interfaces.cli.catalogue as c\n"
        "def tools(args):\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "c.tools = tools\n"
    )
    done = subprocess.run(
        machine.command("tools"),
        capture_output=True,
        text=True,
        env={**machine.environment(daemon=False), "PYTHONPATH": str(site)},
        cwd=machine.project,
        timeout=60,
    )
    assert done.returncode == 1
    assert "BrokenPipeError" in done.stderr


# --- options anywhere before `--` ----------------------------------------------------------


def test_options_may_stand_between_the_tool_and_its_arguments(machine: Machine) -> None:
    (machine.project / "README.md").write_text("hello\n")
    for argv in (
        ("call", "read_file", "--json", "README.md"),
        ("call", "--json", "read_file", "README.md"),
        ("call", "read_file", "README.md", "--json"),
        ("call", "read_file", "--answer", "once", "--json", "README.md"),
    ):
        code, out, err = machine.run(*argv, daemon=False)
        assert (code, err) == (0, ""), argv
        assert json.loads(out)["result"]["output"] == "     1\thello\n", argv


@pytest.mark.parametrize("daemon", [False, True], ids=["in-process", "served"])
def test_every_word_after_the_first_double_dash_is_an_argument(
    machine: Machine, daemon: bool
) -> None:
    code, out, err = machine.run(
        "call", "run_command", "--answer", "once", "--json", "--", "echo", "--json", "--", "-x",
        daemon=daemon,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["result"]["data"]["stdout"] == "--json -- -x\n"
    code, out, _ = machine.run("key", "--json", "--", "-rf", daemon=daemon)
    assert (code, json.loads(out)["key"]) == (0, "run_command:-rf")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("decide", "read_file", "--json", "README.md"), '"decision": "allow"'),
        (("allowlist", "revoke", "--json", "run_command:make"), '"revoked": false'),
        (("key", "git status", "--json"), '"key": "run_command:git:status"'),
        (("log", "--json", "-n", "1"), ""),
        (("trust", "--show", "--json"), '"state": "nothing to trust"'),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_every_command_takes_its_options_after_its_arguments(
    machine: Machine, argv: tuple[str, ...], expected: str
) -> None:
    (machine.project / "README.md").write_text("hello\n")
    code, out, err = machine.run(*argv, daemon=False)
    assert "unrecognized arguments" not in err
    assert code in (0, 1) and expected in out, (code, out, err)


def test_an_unknown_option_anywhere_is_named(machine: Machine) -> None:
    code, _, err = machine.run("call", "read_file", "--jsn", "README.md", daemon=False)
    assert (code, err) == (2, "codecoder call: unrecognized arguments: --jsn\n")
