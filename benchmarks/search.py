"""grep and glob through the tools, on a generated tree of 3,000 files and one of 100,000,
against ripgrep run directly with the same options.

The read tools run in @landlock: ripgrep in a Landlock-confined worker, its output parsed,
sorted and rendered by the tool. The baseline is the same ripgrep binary with the same
arguments, started by `subprocess.run` from this process: what an unconfined agent would run.
The @wasm fallback (fileops walks and reads, Python matches) is measured on the small tree.

Trees: 3,000 Python files of 40 lines (plus a README per directory); 100,000 files of 12
lines in 2,000 directories. The grep pattern matches lines in one file of seven. Every side
must find the same matches: the counts are checked and kept in each figure's `extra`.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured, Subject, compare
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Skipped, Target
from codecoder.benchmarks.workspace import make_project, make_runtime, require_tools
from codecoder.foundation.ceiling import EnvironmentTag

__all__ = ["AREA", "generate_tree"]

PACKAGES, MODULES, FILES, LINES = 30, 10, 10, 40
PATTERN = r"TODO\(bench\)"
GLOB = "**/*.py"
RG_GREP = "rg, same options"
RG_FILES = "rg --files, same options"
TWO = Target("max_ratio", 2.0, "≤ 2× ripgrep")

SPECS = (
    FigureSpec("search.grep.small", "grep tool on @landlock, 3,000 files", "ms", RG_GREP, TWO),
    FigureSpec(
        "search.glob.small", f"glob tool `{GLOB}` on @landlock, 3,000 files", "ms", RG_FILES, TWO
    ),
    FigureSpec("search.grep.large", "grep tool on @landlock, 100,000 files", "ms", RG_GREP, TWO),
    FigureSpec(
        "search.glob.large", f"glob tool `{GLOB}` on @landlock, 100,000 files", "ms", RG_FILES, TWO
    ),
    FigureSpec("search.grep.wasm", "grep tool on @wasm (fallback), 3,000 files", "ms", RG_GREP),
    FigureSpec("search.glob.wasm", f"glob tool `{GLOB}` on @wasm (fallback)", "ms", RG_FILES),
)


def generate_tree(root: Path) -> int:
    """Write the 3,000-file tree under `root`; the number of lines the pattern matches."""
    hits = 0
    number = 0
    for p in range(PACKAGES):
        for m in range(MODULES):
            directory = root / f"pkg{p:02d}" / f"mod{m:02d}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "README.md").write_text(f"# module {p}.{m}\n\nNothing to see.\n")
            for f in range(FILES):
                lines = [
                    f"def function_{f}_{n}(value: int) -> int:  # line {n} of file {number}"
                    for n in range(LINES)
                ]
                if number % 7 == 0:
                    lines[5] = f"    # TODO(bench): revisit file {number}"
                    lines[30] = "    return value  # TODO(bench) second"
                    hits += 2
                (directory / f"file{f:02d}.py").write_text("\n".join(lines) + "\n")
                number += 1
    return hits


def generate_large_tree(root: Path, files: int) -> int:
    """`files` files of 12 lines, 50 to a directory; the number of lines the pattern matches."""
    hits = 0
    for number in range(files):
        directory = root / f"pkg{number // 1000:03d}" / f"mod{number // 50 % 20:02d}"
        if number % 50 == 0:
            directory.mkdir(parents=True, exist_ok=True)
        lines = [f"def function_{number}_{k}(value: int) -> int:  # line {k}" for k in range(12)]
        if number % 7 == 0:
            lines[5] = f"    # TODO(bench): revisit file {number}"
            hits += 1
        with open(directory / f"file{number % 50:02d}.py", "w") as handle:
            handle.write("\n".join(lines) + "\n")
    return hits


def _ripgrep(argv: list[str], cwd: Path) -> bytes:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, check=False, env={})
    if done.returncode not in (0, 1):
        raise RuntimeError(f"rg failed: {done.stderr.decode()[:200]}")
    return done.stdout


def _rg_argv(rg: str, grep: bool) -> list[str]:
    """The arguments the tools give ripgrep (runtime/tools/files/landlock.py), for `src`."""
    common = [rg, "--no-config", "--color=never", "--no-require-git", "--iglob=!.git"]
    if not grep:
        return [*common, "--files", "--null", "--", "src"]
    return [
        *common,
        *("--null", "--max-filesize", str(4 * 1024 * 1024), "--engine=auto"),
        *("--line-number", "--with-filename", "--no-heading", "--stats"),
        *("--no-context-separator", "-B", "0", "-A", "0", "--regexp", PATTERN, "--", "src"),
    ]


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    tools = require_tools("grep", "glob")
    try:
        from codecoder.environments.landlock import unavailable_reason
        from codecoder.environments.wasm.environment import WasmEnvironment
    except ImportError as exc:
        raise Skipped(f"the file environments are unavailable: {exc}") from exc
    reason = unavailable_reason()
    if reason is not None:
        raise Skipped(f"@landlock is unavailable: {reason}")
    from codecoder.environments.landlock import ripgrep_binary

    rg = str(ripgrep_binary())
    small = make_project(ctx.scratch / "small")
    expected_small = generate_tree(small / "src")
    large = make_project(ctx.scratch / "large")
    large_files = ctx.rounds(100_000, 5_000)
    expected_large = generate_large_tree(large / "src", large_files)
    fallback = make_project(
        ctx.scratch / "fallback",
        {"environments": {"grep": "@wasm", "glob": "@wasm"}},
    )
    generate_tree(fallback / "src")
    wasm = WasmEnvironment(cache_dir=ctx.scratch / "module-cache")
    grep_args = {"pattern": PATTERN, "path": "src", "max_results": 100_000}
    glob_args = {"pattern": GLOB, "path": "src", "max_results": 100_000}
    with (
        wasm,
        make_runtime(small, tools=tools) as small_rt,
        make_runtime(large, tools=tools) as large_rt,
        make_runtime(fallback, environments={EnvironmentTag.WASM: wasm}, tools=tools) as wasm_rt,
    ):
        sessions = {"small": small_rt.session(), "large": large_rt.session()}
        fallback_session = wasm_rt.session()

        def tool(session: Any, name: str, args: dict[str, Any]) -> Subject:
            return lambda: session.call(name, args).unwrap()

        figures: dict[str, tuple[Subject, str | None]] = {}
        baselines: dict[str, Subject] = {}
        counts: dict[str, dict[str, int]] = {}
        for size, project, expected in (
            ("small", small, expected_small),
            ("large", large, expected_large),
        ):
            session = sessions[size]
            grep, glob = tool(session, "grep", grep_args), tool(session, "glob", glob_args)
            grep_argv, files_argv = _rg_argv(rg, True), _rg_argv(rg, False)
            baselines[f"{RG_GREP} {size}"] = functools.partial(_ripgrep, grep_argv, project)
            baselines[f"{RG_FILES} {size}"] = functools.partial(_ripgrep, files_argv, project)
            figures[f"search.grep.{size}"] = (grep, f"{RG_GREP} {size}")
            figures[f"search.glob.{size}"] = (glob, f"{RG_FILES} {size}")
            counts[f"search.grep.{size}"] = {
                "tool": len(session.call("grep", grep_args).unwrap().data["matches"]),
                "rg": _ripgrep(grep_argv, project).count(b"\0"),
                "expected": expected,
            }
            counts[f"search.glob.{size}"] = {
                "tool": int(session.call("glob", glob_args).unwrap().data["total"]),
                "rg": _ripgrep(files_argv, project).count(b".py\0"),
                "expected": PACKAGES * MODULES * FILES if size == "small" else large_files,
            }
        figures["search.grep.wasm"] = (
            tool(fallback_session, "grep", grep_args),
            f"{RG_GREP} small",
        )
        figures["search.glob.wasm"] = (
            tool(fallback_session, "glob", glob_args),
            f"{RG_FILES} small",
        )
        counts["search.grep.wasm"] = {
            "tool": len(fallback_session.call("grep", grep_args).unwrap().data["matches"]),
            "expected": expected_small,
        }
        counts["search.glob.wasm"] = {
            "tool": int(fallback_session.call("glob", glob_args).unwrap().data["total"]),
            "expected": PACKAGES * MODULES * FILES,
        }
        measured = compare(figures, baselines, rounds=ctx.rounds(7, 2), sample_seconds=None)
        for name, figure in measured.items():
            found = counts[name]
            figure.extra["matches"] = found
            if len(set(found.values())) != 1:
                figure.note = f"the sides disagree on what they found: {found}"
        measured["search.grep.large"].extra["files"] = large_files
        yield measured


AREA = Area("search", "grep and glob on @landlock and @wasm, against ripgrep", SPECS, run)
