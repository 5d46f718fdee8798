"""Throwaway projects for the benchmarks, and runtimes on them built through the public API.

Every runtime here uses the built-in tools, a non-interactive asker (nothing is ever asked: the
grants a benchmark needs are made up front) and, unless a benchmark says otherwise, the default
audit log, because that is what every real call pays for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codecoder.environments.base import Environment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.prompt import non_interactive
from codecoder.session import Runtime
from codecoder.tools.base import Tool
from codecoder.tools.catalogue import builtin_tools

__all__ = [
    "SMALL_FILE",
    "SMALL_TEXT",
    "make_project",
    "make_runtime",
    "require_tools",
    "run_python",
]

SMALL_FILE = "small.txt"
SMALL_TEXT = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(20))


def make_project(directory: Path, config: Mapping[str, Any] | str | None = None) -> Path:
    """A project directory holding `small.txt` and, if given, a codecoder.json."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SMALL_FILE).write_text(SMALL_TEXT)
    if config is not None:
        text = config if isinstance(config, str) else json.dumps(config, indent=2) + "\n"
        (directory / "codecoder.json").write_text(text)
    return directory


def owned_by_a_user(project: Path) -> Path:
    """`project` given to the sandbox's command user when this process is root: root's own
    directory would put @docker in sync mode (commands never run as root, and uid 10001 cannot
    write it through a bind mount: `environments.docker.workspacemode`), which is never pooled;
    a user's project, the case measured, is bound."""
    if os.geteuid() == 0:
        from codecoder.environments.docker.workspacemode import FALLBACK_UID

        os.chown(project, FALLBACK_UID, FALLBACK_UID)
    return project


def require_tools(*names: str) -> dict[str, Tool[Any]]:
    """The built-in tools, or `Skipped` naming the ones this build does not have."""
    from codecoder.benchmarks.report import Skipped

    try:
        tools = builtin_tools()
    except Exception as exc:  # a tool module being rewritten must not take the run down
        raise Skipped(f"the built-in tools cannot be loaded ({type(exc).__name__}: {exc})") from exc
    missing = [name for name in names if name not in tools]
    if missing:
        raise Skipped(f"this build has no {', '.join(missing)} tool")
    return tools


def make_runtime(
    project: Path,
    *,
    environments: Mapping[EnvironmentTag, Environment[Any, Any]] | None = None,
    audit: bool = True,
    tools: Mapping[str, Tool[Any]] | None = None,
) -> Runtime:
    """A runtime on `project` that never asks; `audit=False` turns the audit log off.

    The project's codecoder.json is trusted (the benchmark wrote it), and the audit log is kept
    beside the project, in the scratch directory, not in the user's state directory.
    """
    return Runtime(
        project,
        asker=non_interactive,
        environments=environments,
        tools=tools if tools is not None else builtin_tools(),
        audit_log=project.parent / f"{project.name}.audit.jsonl" if audit else None,
        trusted=True,
    )


def run_python(code: str, *args: str, timeout: float = 120.0) -> str:
    """Run `code` in a fresh interpreter of this installation (which imports this codecoder,
    installed or editable); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child process failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout
