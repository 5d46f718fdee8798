"""Allowlists at scale: a codecoder.json of 10,000 entries against one of 10.

Loading is timed for the file alone (`load_project_file`: JSON, schema, positions) and for the
whole configuration (`load_project`, what `Runtime.reload()` runs: the file, then every entry
checked against its tool and indexed), both against `json.loads` of the same text. Deciding is
timed with `PermissionChain.decide()` for the same keys in both projects.

The 10,000 entries are spread like a real project's that has grown: many programs, several
subcommands each, exact compound commands, and path grants; a fifth of them share the path
prefix `src/`, which is the one place an index bucket could grow with the file.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.config.project import load_project
from codecoder.config.reading import load_project_file
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.permissions.chain import PermissionChain
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import Permission
from codecoder.permissions.patterns import KeyPattern, PatternIndex
from codecoder.session import Runtime
from codecoder.tools.base import Tool

__all__ = ["AREA", "generate_config"]

LARGE = 10_000
SMALL = 10
SMALL_FILE = "same key, 10-entry file"
JSON_LOADS = "json.loads of the same text"
WITHIN_2X = Target("max_ratio", 2.0, "≤ 2× the 10-entry file")

SPECS = (
    FigureSpec(
        "allowlists.load.project",
        "load_project (what reload() runs), 10,000 entries",
        "ms",
        JSON_LOADS,
        Target("max_value", 500.0, "well under 1 s (≤ 500 ms)"),
    ),
    FigureSpec(
        "allowlists.load.file",
        "load_project_file alone, 10,000 entries",
        "ms",
        JSON_LOADS,
    ),
    FigureSpec(
        "allowlists.decide.command",
        "decide(): run_command key granted by a 10,000-entry file",
        "us",
        SMALL_FILE,
        WITHIN_2X,
    ),
    FigureSpec(
        "allowlists.decide.path",
        "decide(): write_file key under src/ granted by a 10,000-entry file (2,000 share src/)",
        "us",
        SMALL_FILE,
        WITHIN_2X,
    ),
    FigureSpec(
        "allowlists.decide.session",
        "decide(): key granted for the session, 10,000-entry file consulted first",
        "us",
        SMALL_FILE,
        WITHIN_2X,
    ),
)

# The keys decided; both files grant them.
COMMAND = "cargo build --release"
PATH = "src/mod5000/lib.rs"
SESSION_COMMAND = "ls -la"
_DENY = ["run_command:git:push", "run_command:rm", "write_file:secrets/**"]


def generate_config(entries: int, tools: Mapping[str, Tool[Any]]) -> dict[str, Any]:
    """A codecoder.json with `entries` allowlist entries that include the decided keys."""
    paths = "write_file" in tools
    grants = ["run_command:cargo", "write_file:src/mod5000/**" if paths else "run_command:make"]
    i = 0
    while len(grants) < entries:
        kind = i % 5
        if kind == 0:
            grants.append(f"run_command:tool{i}")
        elif kind == 1:
            grants.append(f"run_command:tool{i - 1}:sub{i}")
        elif kind == 2:
            grants.append("run_command:" + json.dumps(f"make target{i} && echo done{i}"))
        elif kind == 3:
            grants.append(f"write_file:src/mod{i}/**" if paths else f"run_command:prog{i}:*")
        else:
            grants.append(f"write_file:assets{i}/*.png" if paths else f"run_command:bin{i}")
        i += 1
    return {
        "environments": {"run_command": "@docker"},
        "allowlist": dict.fromkeys(grants[:entries], "AlwaysThisProject"),
        "deny": [d for d in _DENY if d.split(":", 1)[0] in tools],
    }


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    tools = require_tools("run_command")
    large = make_project(ctx.scratch / "large", generate_config(LARGE, tools))
    small = make_project(ctx.scratch / "small", generate_config(SMALL, tools))
    with make_runtime(large, tools=tools) as big, make_runtime(small, tools=tools) as little:
        if len(big.config.allowlist) != LARGE or not big.config.ok:
            problems = [d.message for d in big.config.diagnostics][:3]
            raise RuntimeError(f"the generated 10,000-entry file does not load: {problems}")
        yield {**_loading(ctx, large, tools), **_deciding(ctx, big, little, tools)}


def _loading(
    ctx: BenchContext, project: Path, tools: Mapping[str, Tool[Any]]
) -> dict[str, Measured]:
    path = project / "codecoder.json"
    text = path.read_text()
    figures = {
        "allowlists.load.project": (
            lambda: load_project(project, tools, trusted=True),
            JSON_LOADS,
        ),
        "allowlists.load.file": (lambda: load_project_file(path), JSON_LOADS),
    }
    return compare(
        figures,
        {JSON_LOADS: lambda: json.loads(text)},
        rounds=ctx.rounds(7, 2),
        sample_seconds=None,
    )


def _deciding(
    ctx: BenchContext, big: Runtime, little: Runtime, tools: Mapping[str, Tool[Any]]
) -> dict[str, Measured]:
    tag = big.environment_of("run_command")
    command = Permission.ask(key_command(COMMAND).permission_key("run_command"))
    listing = Permission.ask(key_command(SESSION_COMMAND).permission_key("run_command"))
    if "write_file" in tools:
        writer = tools["write_file"]
        path = writer.permission(writer.parameters.model_validate({"path": PATH, "content": ""}))
        path_tool, path_tag = "write_file", big.environment_of("write_file")
    else:
        path = Permission.ask(key_command("make all").permission_key("run_command"))
        path_tool, path_tag = "run_command", tag
    assert listing.key is not None
    figures: dict[str, tuple[Callable[[], object], str | None]] = {}
    baselines: dict[str, Callable[[], object]] = {}
    cases = {
        "allowlists.decide.command": ("run_command", tag, command, "project"),
        "allowlists.decide.path": (path_tool, path_tag, path, "project"),
        "allowlists.decide.session": ("run_command", tag, listing, "session"),
    }
    for name, (tool, environment, permission, source) in cases.items():
        engines = []
        for runtime in (big, little):
            session = runtime.session()
            session.allowlist.grant(listing.key, tag)
            engine = session.engine
            got = engine.decide(tool, environment, permission).source
            if got != source:
                raise RuntimeError(f"{name}: decided by {got}, expected {source}")
            engines.append(engine)
        figures[name] = (_decider(engines[0], tool, environment, permission), f"{name}:small")
        baselines[f"{name}:small"] = _decider(engines[1], tool, environment, permission)
    measured = compare(
        figures, baselines, rounds=ctx.rounds(15, 5), sample_seconds=ctx.sample_seconds
    )
    for name, (_, _, permission, _) in cases.items():
        tested = {size: _candidates(size, tools, permission) for size in (LARGE, SMALL)}
        measured[name].extra["patterns_tested"] = {str(k): v for k, v in tested.items()}
        measured[name].note = (
            f"patterns tested for the key: {tested[LARGE]:,} of {LARGE:,}, {tested[SMALL]} of "
            f"{SMALL}"
        )
    measured["allowlists.decide.path"].miss_note = (
        "PatternIndex buckets path patterns by their first segment only, so every grant under "
        "src/ is a candidate of every key under src/ and is matched in turn (a regex each)."
    )
    return measured


def _candidates(entries: int, tools: Mapping[str, Tool[Any]], permission: Permission) -> int:
    """How many patterns a PatternIndex of the generated file tests for the key."""
    assert permission.key is not None
    index: PatternIndex[None] = PatternIndex()
    for raw in generate_config(entries, tools)["allowlist"]:
        pattern = KeyPattern.parse(raw)
        index.add(pattern, None, tools[pattern.tool].key_style)
    return len({id(pattern) for pattern, _ in index.candidates(permission.key)})


def _decider(
    engine: PermissionChain, tool: str, environment: EnvironmentTag, permission: Permission
) -> Callable[[], object]:
    return lambda: engine.decide(tool, environment, permission)


AREA = Area("allowlists", "Allowlists at scale", SPECS, run, cheap=True)
