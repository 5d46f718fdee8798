"""The shape of the code: one installed name, layers that point down, modules of a readable size.

The layer contracts themselves are in pyproject.toml (`[tool.importlinter]`); this runs them, so
a cycle or an upward import (a type-level one included) fails the build.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("runtime", "environments", "sandboxes", "benchmarks")
MAX_LINES = 800


def _modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def test_the_layer_contracts_hold() -> None:
    # The interpreter running the tests (the venv's, which `python3` on the PATH need not be).
    proc = subprocess.run(
        ["bash", "scripts/lint-imports.sh"],
        cwd=REPO,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_no_module_is_longer_than_about_800_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_package_folder_is_installed_under_codecoder() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]

    def package(init: Path) -> str:
        folder = init.parent.relative_to(REPO)
        if folder.parts[0] == "runtime":  # runtime/ is the package `codecoder` itself
            folder = folder.relative_to("runtime")
        return ".".join(("codecoder", *folder.parts))

    folders = {package(init) for folder in FOLDERS for init in (REPO / folder).rglob("__init__.py")}
    assert set(config["packages"]) == folders
    assert config["package-dir"] == {
        "codecoder": "runtime",
        **{f"codecoder.{folder}": folder for folder in FOLDERS if folder != "runtime"},
    }


def test_nothing_imports_the_folders_by_their_bare_names() -> None:
    bare = []
    tests = [p for p in (REPO / "tests").rglob("*.py") if "node_modules" not in p.parts]
    for path in [*_modules(), *sorted(tests)]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bare += [
                f"{path.relative_to(REPO)}:{node.lineno} {name}"
                for name in names
                if name.split(".")[0] in FOLDERS
            ]
    assert bare == []


def _source(tmp_path: Path) -> Path:
    """The checkout as it is, copied: pip builds in the source tree (build/), not in ours."""
    skipped = shutil.ignore_patterns(".git", "node_modules", "build", ".venv", "*.egg-info")
    return Path(shutil.copytree(REPO, tmp_path / "source", ignore=skipped, symlinks=True))


def test_the_wheel_holds_one_top_level_name(tmp_path: Path) -> None:
    source = _source(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {
        "codecoder",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    assert "codecoder/__init__.py" in names  # the public API: `import codecoder`
    assert "codecoder/__main__.py" in names
    assert "codecoder/sandboxes/fileops/fileops.wasm" in names
    assert "codecoder/sandboxes/escapes/docker.json" in names
    # The confine helper of @bwrap and @confined, executable as installed.
    for arch in ("x86_64", "aarch64"):
        info = zipfile.ZipFile(wheel).getinfo(f"codecoder/sandboxes/bwrap/confine-{arch}")
        assert (info.external_attr >> 16) & 0o111, arch


def test_the_installed_command_runs_from_the_wheel(tmp_path: Path) -> None:
    target, source = tmp_path / "site", _source(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q",
         "--target", str(target), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    assert sorted(p.name for p in target.iterdir() if p.name != "bin") == [
        "codecoder",
        next(p.name for p in target.iterdir() if p.name.endswith(".dist-info")),
    ]
    proc = subprocess.run(
        [sys.executable, "-I", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); "
         "sys.argv = ['codecoder', *sys.argv[2:]]; "
         "from codecoder.__main__ import main; sys.exit(main())",
         str(target), "--version"],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("codecoder ")
    helper = target / "codecoder" / "sandboxes" / "bwrap" / f"confine-{os.uname().machine}"
    assert os.access(helper, os.X_OK)
