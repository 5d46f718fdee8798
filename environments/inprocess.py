"""@runtime: pure in-process work that runs no external code and touches no user files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from codecoder.environments.base import Environment
from codecoder.foundation.ceiling import EnvironmentTag


class InProcessEnvironment(Environment[Callable[[], Any], Any]):
    """Runs a callable in the runtime's own process; there is nothing to contain or close."""

    tag = EnvironmentTag.RUNTIME

    def run(self, request: Callable[[], Any]) -> Any:
        return request()
