"""The habits live in the repository and CI runs them: `make check` (ruff, ruff format --check,
mypy strict, the import-linter layers) fails on each kind of violation, and `.ci/run` runs it
before the tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPIED = ("runtime", "environments", "sandboxes", "benchmarks", "scripts")
COPIED_FILES = ("pyproject.toml", "Makefile")


def test_ci_runs_make_check_before_the_tests() -> None:
    script = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in script if not line.lstrip().startswith(("#", "echo"))]
    assert "make check" in commands
    # The tests are the README's command, written out and checked against its set-up block
    # (.ci/run's setup_line) before it runs.
    readme = (REPO / "README.md").read_text().split("<!-- set-up -->", 1)[1]
    test_command = readme.splitlines()[3].split("#", 1)[0].strip()
    assert commands.index("make check") < commands.index(test_command)


def test_make_test_is_the_readmes_test_command() -> None:
    readme = (REPO / "README.md").read_text().split("<!-- set-up -->\n```sh\n", 1)[1]
    test_command = readme.splitlines()[1].split("#", 1)[0].strip()
    planned = subprocess.run(
        ["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert planned.endswith(test_command.removeprefix(".venv/bin/python"))
    if (REPO / ".venv" / "bin" / "python").exists():
        assert planned == test_command


def test_make_check_is_lint_format_types_and_layers() -> None:
    planned = subprocess.run(
        ["make", "-n", "check"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line.split(" ", 1)[-1] for line in planned] == [
        "-m ruff check .",
        "-m ruff format --check .",
        "scripts/typecheck.sh",
        "scripts/lint-imports.sh",
    ]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the code and its configuration, mypy's cache included so that only what a
    test changes is checked again."""
    root = tmp_path_factory.mktemp("checkout")
    ignored = shutil.ignore_patterns("__pycache__", "node_modules", "*.wasm", "confine-*")
    for folder in COPIED:
        shutil.copytree(REPO / folder, root / folder, ignore=ignored, symlinks=True)
    for name in COPIED_FILES:
        shutil.copy2(REPO / name, root / name)
    if (REPO / ".mypy_cache").is_dir():
        shutil.copytree(REPO / ".mypy_cache", root / ".mypy_cache")
    return root


VIOLATIONS = {
    # target: (file, text appended, what the failure names)
    "lint": ("runtime/foundation/terminal.py", "import json\n", "F401"),
    "format": ("runtime/foundation/terminal.py", "\n\nx = {'a':1}\n", "would be reformatted"),
    "types": ("runtime/foundation/terminal.py", '\n\nx: int = "text"\n', "Incompatible types"),
    # The lowest layer importing the session (clean for ruff and mypy: only the layers break).
    "layers": (
        "runtime/foundation/terminal.py",
        "\n\ndef _up() -> None:\n    import codecoder.session  # noqa: F401\n",
        "BROKEN",
    ),
}


@pytest.mark.parametrize("kind", VIOLATIONS)
def test_make_check_fails_on_each_kind_of_violation(checkout: Path, kind: str) -> None:
    path, text, said = VIOLATIONS[kind]
    target = checkout / path
    original = target.read_text()
    target.write_text(original + text)
    try:
        done = subprocess.run(
            ["make", "--no-print-directory", "check"],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        target.write_text(original)
    assert done.returncode != 0
    assert said in done.stdout + done.stderr
    assert path.split("/")[-1] in done.stdout + done.stderr or kind == "layers"
