"""A mock environment for tests where the environment is not what is being tested.

`MockEnvironment(handler)` answers every request with `handler(request)` and keeps the requests
it saw, like httpx's MockTransport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from codecoder.environments.base import Environment
from codecoder.foundation.ceiling import EnvironmentTag


class MockEnvironment(Environment[Any, Any]):
    def __init__(self, handler: Callable[[Any], Any], tag: EnvironmentTag = EnvironmentTag.SHELL):
        self.tag = tag
        self.handler = handler
        self.requests: list[Any] = []
        self.closed = False

    def run(self, request: Any) -> Any:
        self.requests.append(request)
        return self.handler(request)

    def close(self) -> None:
        self.closed = True
