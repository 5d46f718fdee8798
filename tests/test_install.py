"""Installing codecoder, on this machine (no network): a wheel installed where every sandbox
hides (a home under /tmp, a path with spaces) still contains commands, and scripts/install.sh
removes only what it made. The whole set-up on a fresh Debian 12, as root and not, from a clone
in the home directory, is tests/test_fresh_machine.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.environments.bwrap_support import need_bwrap

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "install.sh"


def _source(tmp_path: Path) -> Path:
    skipped = shutil.ignore_patterns(".git", "node_modules", "build", ".venv", "*.egg-info")
    return Path(shutil.copytree(REPO, tmp_path / "source", ignore=skipped, symlinks=True))


def test_a_wheel_installed_in_a_hidden_home_runs_contained_commands(tmp_path: Path) -> None:
    need_bwrap()
    home = tmp_path / "home"
    target = home / "my tools" / "site-packages"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q",
         "--target", str(target), str(_source(tmp_path))],
        check=True,
        capture_output=True,
    )  # fmt: skip
    project = home / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-I", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import codecoder; "
         "assert codecoder.__file__.startswith(sys.argv[1]), codecoder.__file__; "
         "sys.argv = ['codecoder', *sys.argv[2:]]; "
         "from codecoder.__main__ import main; sys.exit(main())",
         str(target), "call", "--project", str(project), "--json", "--answer", "once",
         "run_command", "--", "touch", "made-inside"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["decision"]["environment"] == "@bwrap"
    assert (project / "made-inside").is_file()


def _install(clone: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CODECODER_BIN_DIR": str(bin_dir), "HOME": str(clone.parent)}
    return subprocess.run(
        ["bash", str(clone / "scripts" / "install.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone as scripts/install.sh leaves it: its venv, and the command in it."""
    root = tmp_path / "a clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(INSTALL, root / "scripts" / "install.sh")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / ".venv" / "bin" / "codecoder").write_text("#!/bin/sh\n")
    return root


def test_uninstall_removes_the_link_and_the_venv_it_made_and_says_what_stays(
    clone: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codecoder").symlink_to(clone / ".venv" / "bin" / "codecoder")
    done = _install(clone, bin_dir, "--uninstall")
    assert done.returncode == 0, done.stderr
    assert not (bin_dir / "codecoder").is_symlink()
    assert not (clone / ".venv").exists()
    assert "kept (yours to remove)" in done.stdout
    assert str(Path(os.environ["XDG_STATE_HOME"]) / "codecoder") in done.stdout


def test_uninstall_leaves_another_installs_command_alone(clone: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    other = tmp_path / "other clone" / ".venv" / "bin" / "codecoder"
    (bin_dir / "codecoder").symlink_to(other)
    done = _install(clone, bin_dir, "--uninstall")
    assert done.returncode == 0, done.stderr
    assert os.readlink(bin_dir / "codecoder") == str(other)
    assert "left" in done.stdout and "alone" in done.stdout


def test_an_unknown_option_is_refused_before_anything_is_done(clone: Path, tmp_path: Path) -> None:
    done = _install(clone, tmp_path / "bin", "--wheels")
    assert done.returncode == 2
    assert "unknown option --wheels" in done.stderr
    assert (clone / ".venv" / "pyvenv.cfg").exists()
    assert not (tmp_path / "bin").exists()
