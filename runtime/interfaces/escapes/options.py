"""`AuditOptions`: replacements for parts of the project's configuration, which is how the tests
show that a weakened sandbox is reported as escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecoder.environments.base import CommandRequest, CommandResult, Environment
from codecoder.environments.docker.settings import DockerSettings
from codecoder.tools.base import Tool

__all__ = ["AuditOptions"]


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """Replacements for parts of the project's configuration; None keeps the project's own.

    They exist to show that the suite can fail: a weakened Docker configuration, a client that
    changes what containers are created with, a weakened @bwrap, a tool with a broken keyer.
    """

    tools: Mapping[str, Tool[Any]] | None = None
    docker_settings: DockerSettings | None = None
    docker_client_factory: Callable[[], Any] | None = None
    wasm_cache_dir: Path | None = None
    # The engine runtimes the docker layer attacks besides the project's own (None: every one
    # the engine offers that codecoder knows).
    docker_runtimes: Collection[str] | None = None
    # What the bwrap layer attacks instead of a @bwrap environment of the project's settings,
    # made for the scratch workspace and the environment variables given (a weakened one).
    bwrap_environment: (
        Callable[[Path, Mapping[str, str]], Environment[CommandRequest, CommandResult]] | None
    ) = None
