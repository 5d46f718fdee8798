"""The starter codecoder.json that `codecoder init` writes: what the project is, and the file.

`detect(project)` reads the files a project's tools read (pyproject.toml, package.json,
Cargo.toml, go.mod, a Makefile's `test` target, ...) and says which language it is and which
command runs its tests; nothing is executed. `starter_text` writes a file that `codecoder check`
accepts, commented with keys that start with `//` (runtime.config.schema): what was found, which
environment runs commands here and why, how to grant the test command, and where to go next.
"""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.regularfile import read_regular_file

__all__ = ["Placement", "Project", "detect", "starter_text"]

COMMENT_WIDTH = 88
# A target line of a makefile: `test:` or `test check:` (not `test := ...`).
_MAKE_TEST = re.compile(r"^test\s*:(?!=)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Project:
    """What `detect` found: the language, the file that says so, the test command (if any),
    and the program that command needs (what a sandbox image must have)."""

    language: str | None = None
    evidence: str | None = None
    test_command: str | None = None
    program: str | None = None  # what the tests need: a program, or a module (pytest)
    notes: tuple[str, ...] = ()
    probe: str | None = None  # bash that succeeds where `program` can run (default: command -v)

    def probe_script(self) -> str | None:
        if self.program is None:
            return None
        return self.probe or f"command -v {self.program}"

    def describe(self) -> str:
        if self.language is None:
            return "no language recognised (no pyproject.toml, package.json, Cargo.toml, ...)"
        found = f"{self.language} ({self.evidence})"
        if self.test_command is None:
            return f"{found}; no test command found"
        return f"{found}; tests: `{self.test_command}`"


@dataclass(frozen=True, slots=True)
class Placement:
    """Which environment runs `run_command` here, why, and whether the file binds it."""

    environment: EnvironmentTag
    reason: str
    bind: bool = False  # written as "environments": {"run_command": ...}
    hints: tuple[str, ...] = field(default_factory=tuple)


def detect(project: Path) -> Project:
    """The project's language and test command, from its files (first match wins)."""
    for probe in (_python, _node, _rust, _go, _ruby, _java):
        found = probe(project)
        if found is not None:
            return _with_make(project, found)
    return _with_make(project, Project())


def _with_make(project: Path, found: Project) -> Project:
    """A makefile's `test` target is the project's own way to run its tests: it wins."""
    makefile = next(
        (
            project / name
            for name in ("GNUmakefile", "makefile", "Makefile")
            if (project / name).is_file()
        ),
        None,
    )
    if makefile is None or not _MAKE_TEST.search(_read(makefile)):
        return found
    return Project(
        found.language or "a make project",
        found.evidence or makefile.name,
        "make test",
        "make",
        (*found.notes, f"{makefile.name} has a test target"),
    )


def _python(project: Path) -> Project | None:
    markers = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "tox.ini")
    evidence = next((m for m in markers if (project / m).is_file()), None)
    if evidence is None:
        return None
    pyproject = _toml(project / "pyproject.toml")
    uses_pytest = (
        "pytest" in (pyproject.get("tool") or {})
        or (project / "pytest.ini").is_file()
        or (project / "conftest.py").is_file()
        or (project / "tests").is_dir()
        or "pytest" in _read(project / "requirements.txt")
        or "pytest" in json.dumps(pyproject.get("project", {}).get("optional-dependencies", {}))
    )
    if uses_pytest:
        probe = "python3 -m pytest --version"
        return Project("Python", evidence, "python3 -m pytest", "pytest", probe=probe)
    return Project("Python", evidence, "python3 -m unittest", "python3")


def _node(project: Path) -> Project | None:
    path = project / "package.json"
    if not path.is_file():
        return None
    try:
        package = json.loads(_read(path))
    except ValueError:
        return Project("JavaScript", "package.json", None, "node", ("package.json is not JSON",))
    scripts = package.get("scripts") if isinstance(package, dict) else None
    test = scripts.get("test") if isinstance(scripts, dict) else None
    manager = "npm"
    if (project / "pnpm-lock.yaml").is_file():
        manager = "pnpm"
    elif (project / "yarn.lock").is_file():
        manager = "yarn"
    language = "TypeScript" if (project / "tsconfig.json").is_file() else "JavaScript"
    if not isinstance(test, str) or "no test specified" in test:
        return Project(language, "package.json", None, manager, ("no test script",))
    return Project(language, "package.json", f"{manager} test", manager)


def _rust(project: Path) -> Project | None:
    if not (project / "Cargo.toml").is_file():
        return None
    return Project("Rust", "Cargo.toml", "cargo test", "cargo")


def _go(project: Path) -> Project | None:
    if not (project / "go.mod").is_file():
        return None
    return Project("Go", "go.mod", "go test ./...", "go")


def _ruby(project: Path) -> Project | None:
    if not (project / "Gemfile").is_file():
        return None
    if (project / "spec").is_dir():
        return Project("Ruby", "Gemfile", "bundle exec rspec", "bundle")
    return Project("Ruby", "Gemfile", "bundle exec rake test", "bundle")


def _java(project: Path) -> Project | None:
    if (project / "pom.xml").is_file():
        return Project("Java", "pom.xml", "mvn test", "mvn")
    for name in ("build.gradle", "build.gradle.kts"):
        if (project / name).is_file():
            gradle = "./gradlew" if (project / "gradlew").is_file() else "gradle"
            return Project("Java", name, f"{gradle} test", gradle)
    return None


# What `init` reads to recognise a project (package.json, pyproject.toml, ...).
_READ_LIMIT = 4 * 1024 * 1024


def _read(path: Path) -> str:
    try:
        return read_regular_file(path, limit=_READ_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError:
        return {}


def starter_text(
    project: Project,
    placement: Placement,
    test_key: str | None,
    limits: tuple[float, int] = (120.0, 65536),
) -> str:
    """The starter file: comments (`//` keys) around the settings a project starts with.

    `test_key` is the key a grant for the test command records (`run_command:npm:test`);
    `limits` the timeout and output cap in force (written as they are, so that the file
    widens nothing)."""
    document: dict[str, Any] = {
        "//": [
            "codecoder.json: what codecoder may do in this project without asking.",
            "Written by `codecoder init`. Keys that start with // are comments.",
            "`codecoder check` validates this file; edits apply after `codecoder reload`",
            "(or /reload in `codecoder session`). Grants the human gives are added here.",
        ],
        "// project": _wrapped(f"Found: {project.describe()}."),
        "// environments": _wrapped(
            f"run_command runs in {placement.environment.value}: {placement.reason}.",
            *placement.hints,
        ),
    }
    if placement.bind:
        document["environments"] = {"run_command": placement.environment.value}
    grants = _grant_notes(project, placement, test_key)
    document["// allowlist"] = _wrapped(*grants)
    document["allowlist"] = {}
    document["// deny"] = [
        "Never run, never asked, even inside a compound command. Remove an entry to be asked.",
    ]
    document["deny"] = ["run_command:git:push"]
    document["// limits"] = "Seconds before a command is killed; bytes of output kept per stream."
    timeout, max_output = limits
    document["limits"] = {
        "timeout": int(timeout) if float(timeout).is_integer() else timeout,
        "max_output": max_output,
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _wrapped(*paragraphs: str) -> list[str]:
    """Comment lines a reader can take in without scrolling sideways."""
    lines: list[str] = []
    for paragraph in paragraphs:
        lines += textwrap.wrap(paragraph, COMMENT_WIDTH, break_on_hyphens=False)
    return lines


def _grant_notes(project: Project, placement: Placement, test_key: str | None) -> list[str]:
    notes = [
        'Grants: "KEY": "AlwaysThisProject"; `codecoder key -- COMMAND` shows a command\'s key.',
    ]
    if test_key is None:
        return notes
    if placement.environment.allows(Scope.PROJECT):
        notes.append(
            f"To run the tests without asking (contained in {placement.environment.value}): "
            f'"{test_key}": "AlwaysThisProject"'
        )
    else:
        notes.append(
            f"{placement.environment.value} is not a sandbox, so a grant for "
            f"`{project.test_command}` ({test_key}) lasts one session at most (the answer "
            "'for this session'); bind run_command to @docker to grant it here."
        )
    return notes
