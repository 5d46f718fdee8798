"""200 parallel calls with timeouts and failures mixed in, then nothing is left behind."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.docker.environment import DockerEnvironment
from codecoder.foundation.errors import CodecoderError, ExecutionTimeout

pytestmark = pytest.mark.docker

CALLS = [
    ("ok", "echo ok", 10.0, False),
    ("exit", "exit 3", 10.0, False),
    ("missing", "no-such-program", 10.0, False),
    ("timeout", "sleep 30", 0.5, False),
    ("flood", "head -c 300000 /dev/zero | tr '\\0' x", 10.0, False),
    ("write", "echo x > out-$RANDOM.txt", 10.0, True),
    ("background", "sleep 60 & echo started", 10.0, False),
    ("readonly", "echo x > denied.txt", 10.0, False),
]


def outcome(
    env: DockerEnvironment, kind: str, script: str, timeout: float, writable: bool
) -> tuple[str, str]:
    try:
        result = env.run(
            CommandRequest(
                cwd=env.workspace,
                script=script,
                timeout=timeout,
                writable=writable,
                max_output=4096,
            )
        )
    except ExecutionTimeout:
        return kind, "timeout"
    except CodecoderError as exc:
        return kind, type(exc).__name__
    return kind, f"exit {result.exit_code}" + (" truncated" if result.truncated else "")


def test_two_hundred_mixed_parallel_calls_are_each_reported_and_leave_no_container(
    workspace: Path, docker_engine: Any
) -> None:
    env = DockerEnvironment(workspace)
    plan = [CALLS[i % len(CALLS)] for i in range(200)]
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(lambda call: outcome(env, *call), plan))
    finally:
        env.close()
    seen = Counter(results)
    assert seen == Counter(
        {
            ("ok", "exit 0"): 25,
            ("exit", "exit 3"): 25,
            ("missing", "exit 127"): 25,
            ("timeout", "timeout"): 25,
            ("flood", "exit 0 truncated"): 25,
            ("write", "exit 0"): 25,
            ("background", "exit 0"): 25,
            ("readonly", "exit 1"): 25,
        }
    )
    assert len(list(workspace.glob("out-*.txt"))) >= 1
    assert not (workspace / "denied.txt").exists()
    leftovers = docker_engine.api.containers(
        all=True, filters={"label": f"codecoder.session={env.session_id}"}
    )
    assert leftovers == []
