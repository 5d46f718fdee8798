"""The benchmark harness runs and reports in a stable shape. Smoke only: the in-process areas at
the smallest counts; timings are never asserted, only what the report says and how."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.benchmarks import AREAS, SCHEMA, run_areas
from codecoder.benchmarks.__main__ import main
from codecoder.benchmarks.measure import Measured
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Report, Skipped

FIGURE_NAMES = [
    "permission.decide.session",
    "permission.decide.project",
    "permission.decide.none",
    "permission.call.mock",
    "permission.call.mock_no_audit",
    "keying.first.simple",
    "keying.first.compound",
    "keying.repeated",
    "allowlists.load.project",
    "allowlists.load.file",
    "allowlists.decide.command",
    "allowlists.decide.path",
    "allowlists.decide.session",
    "shell.call",
    "shell.environment",
    "shell.git_guard",
    "bwrap.call",
    "bwrap.cold_call",
    "bwrap.back_to_back",
    "bwrap.call_vs_bare",
    "bwrap.read_only",
    "bwrap.private_cold",
    "bwrap.private_warm",
    "bwrap.bare_without_network",
    "wasm.read_file.landlock",
    "wasm.read_file.warm",
    "wasm.read_file.environment",
    "wasm.read_file.fresh_cached",
    "wasm.read_file.fresh_uncached",
    "wasm.fresh_process.total",
    "docker.call.vs_exec_run",
    "docker.call.vs_cold_sdk",
    "docker.call.vs_cold_cli",
    "docker.environment",
    "docker_modes.runsc.vs_runc",
    "docker_modes.runsc.vs_exec_run",
    "docker_modes.sync.vs_bind",
    "docker_modes.sync.write",
    "pool.session.first_call",
    "pool.session.first_call_unpooled",
    "pool.session.first_call_vs_warm",
    "pool.process.first_call",
    "pool.process.first_call_in_process",
    "pool.process.back_to_back",
    "pool.process.first_call_unpooled",
    "search.grep.small",
    "search.glob.small",
    "search.grep.large",
    "search.glob.large",
    "search.grep.wasm",
    "search.glob.wasm",
    *(f"throughput.{env}.{n}" for env in ("mock", "shell", "wasm", "docker") for n in (1, 4, 16)),
    *(
        f"many_sessions.{runtime}.{figure}"
        for runtime in ("runc", "runsc")
        for figure in ("memory", "p50", "p99", "saturated")
    ),
    "agents.startup.decide",
    "agents.startup.hook",
    "agents.startup.call",
    "agents.startup.key",
    "agents.startup.tools",
    "agents.startup.replay",
    "agents.startup.call_in_process",
    "agents.startup.decide_in_process",
    "agents.startup.hook_in_process",
    "agents.mcp.result_size",
    "questions.first.bwrap",
    "questions.later.bwrap",
    "questions.contained.first",
    "questions.contained.later",
    "questions.contained.escalations",
    "questions.contained.escalations.later",
    "frameworks.acall",
    "frameworks.pydantic_ai",
    "frameworks.openai_agents",
    "frameworks.claude_agent_sdk",
    "reliability.kills.survived",
    "reliability.readers.refused",
    "reliability.concurrent.p99",
]
CHEAP = ["permission", "keying", "allowlists", "questions", "frameworks"]
STATS_KEYS = {"median", "p25", "p75", "iqr", "samples", "calls_per_sample"}
FIGURE_KEYS = {
    "name",
    "label",
    "unit",
    "better",
    "subject",
    "baseline_label",
    "baseline",
    "ratio",
    "target",
    "status",
    "note",
    "profile",
    "extra",
}


@pytest.fixture(scope="module")
def report() -> Report:
    return run_areas(AREAS, only=CHEAP, quick=True, profile_misses=False)


@pytest.fixture(scope="module")
def document(report: Report) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(report.to_json()))
    return result


def figures(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [figure for area in document["areas"] for figure in area["figures"]]


def test_the_cheap_areas_are_the_ones_the_smoke_test_runs() -> None:
    assert [area.name for area in AREAS if area.cheap] == CHEAP


def test_the_report_names_every_figure_of_every_area_in_a_fixed_order(
    document: dict[str, Any],
) -> None:
    assert document["schema"] == SCHEMA
    assert [figure["name"] for figure in figures(document)] == FIGURE_NAMES
    assert [area["name"] for area in document["areas"]] == [area.name for area in AREAS]


def test_the_top_level_of_the_report_has_a_fixed_shape(document: dict[str, Any]) -> None:
    assert set(document) == {
        "schema",
        "started_at",
        "duration_s",
        "options",
        "machine",
        "memory",
        "summary",
        "areas",
    }
    assert document["options"] == {"quick": True, "only": sorted(CHEAP)}
    assert set(document["memory"]) == {"start_rss_kib", "peak_rss_kib"}
    assert document["memory"]["peak_rss_kib"] >= document["memory"]["start_rss_kib"] > 0
    assert set(document["summary"]) == {"pass", "miss", "info", "skipped", "error"}
    assert sum(document["summary"].values()) == len(FIGURE_NAMES)
    assert {"python", "cpus", "wasmtime", "bashlex"} <= set(document["machine"])


def test_every_measured_figure_has_a_median_within_its_quartiles_and_a_baseline(
    document: dict[str, Any],
) -> None:
    measured = [f for f in figures(document) if f["name"].split(".")[0] in CHEAP]
    assert measured
    for figure in measured:
        assert set(figure) == FIGURE_KEYS
        assert figure["status"] in ("pass", "miss", "info"), figure
        assert figure["unit"] in ("us", "ms", "s", "calls/s", "per100")
        for side in ("subject", "baseline"):
            stats = figure[side]
            assert set(stats) == STATS_KEYS
            assert stats["p25"] <= stats["median"] <= stats["p75"]
            assert stats["samples"] >= 1 and stats["calls_per_sample"] >= 1
        assert figure["baseline_label"]
        assert figure["ratio"] == pytest.approx(
            figure["subject"]["median"] / figure["baseline"]["median"], rel=1e-3
        )
        if figure["target"] is None:
            assert figure["status"] == "info"
        else:
            assert set(figure["target"]) == {"kind", "limit", "text"}
            assert figure["status"] in ("pass", "miss")


def test_the_targets_of_the_issue_are_checked(document: dict[str, Any]) -> None:
    targets = {f["name"]: f["target"] for f in figures(document) if f["target"] is not None}
    assert targets["permission.decide.session"]["limit"] == 5.0
    assert targets["keying.repeated"] == {
        "kind": "max_ratio",
        "limit": 1 / 50,
        "text": "≤ 1/50 of bashlex.parse",
    }
    assert targets["allowlists.decide.path"]["limit"] == 2.0
    assert targets["shell.call"]["limit"] == 1.2
    assert targets["wasm.read_file.warm"]["limit"] == 1.0
    assert targets["wasm.read_file.fresh_cached"]["limit"] == pytest.approx(0.2)
    assert targets["docker.call.vs_exec_run"]["limit"] == pytest.approx(0.2)
    assert targets["docker.call.vs_cold_cli"]["limit"] == pytest.approx(0.04)
    assert targets["wasm.read_file.landlock"]["limit"] == pytest.approx(0.1)
    assert targets["questions.first.bwrap"] == {"kind": "max_value", "limit": 15.0, "text": "≤ 15"}
    assert targets["questions.later.bwrap"] == {"kind": "max_value", "limit": 3.0, "text": "≤ 3"}
    assert targets["questions.contained.first"]["limit"] == 5.0
    assert targets["questions.contained.later"]["limit"] == 1.0
    assert targets["questions.contained.escalations"]["limit"] == 0.5
    assert targets["questions.contained.escalations.later"]["limit"] == 0.5
    for name in (
        "search.grep.small",
        "search.glob.small",
        "search.grep.large",
        "search.glob.large",
    ):
        assert targets[name]["limit"] == 2.0


def test_areas_that_were_not_selected_are_reported_as_skipped_with_the_reason(
    document: dict[str, Any],
) -> None:
    not_run = [a for a in document["areas"] if a["name"] not in CHEAP]
    assert {a["status"] for a in not_run} == {"not_run"}
    for figure in (f for a in not_run for f in a["figures"]):
        assert figure["status"] == "skipped"
        assert figure["subject"] is None and figure["ratio"] is None
        assert figure["note"] == "not selected (--only)"


def test_the_table_has_one_row_per_figure_that_ran(report: Report) -> None:
    rows = report.table().splitlines()
    assert rows[0].startswith("| figure | median")
    ran = [f for f in FIGURE_NAMES if f.split(".")[0] in CHEAP]
    assert len(rows) == 2 + len(ran) + 1  # header, rule, figures, peak RSS


def test_an_unavailable_environment_is_skipped_and_a_failing_area_does_not_stop_the_run() -> None:
    spec = FigureSpec("fake.figure", "a fake figure", "ms", "nothing")

    @contextlib.contextmanager
    def unavailable(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
        raise Skipped("no engine here")
        yield {}

    @contextlib.contextmanager
    def broken(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
        raise OSError("disk on fire")
        yield {}

    @contextlib.contextmanager
    def fine(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
        yield {"fake.figure": Measured(subject=[0.002, 0.001, 0.003], baseline=[0.001])}

    areas = [
        Area("skips", "skips", (spec,), unavailable),
        Area("breaks", "breaks", (spec,), broken),
        Area("works", "works", (spec,), fine),
    ]
    document = run_areas(areas, quick=True).to_json()

    by_name = {area["name"]: area for area in document["areas"]}
    assert by_name["skips"]["status"] == "skipped"
    assert by_name["skips"]["figures"][0]["note"] == "no engine here"
    assert by_name["breaks"]["status"] == "error"
    assert by_name["breaks"]["reason"] == "OSError: disk on fire"
    assert by_name["works"]["figures"][0]["subject"]["median"] == 2.0
    assert by_name["works"]["figures"][0]["ratio"] == 2.0
    assert document["summary"] == {"pass": 0, "miss": 0, "info": 1, "skipped": 1, "error": 1}


def test_the_command_writes_the_json_and_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"

    status = main(["--quick", "--only", "keying", "--no-profile", "--json", str(out)])

    assert status == 0
    written = json.loads(out.read_text())
    assert [f["name"] for f in figures(written)] == FIGURE_NAMES
    printed = capsys.readouterr().out
    assert "| key_command, repeated (cached)" in printed


def test_codecoder_bench_runs_the_installed_benchmarks_from_anywhere(tmp_path: Path) -> None:
    done = subprocess.run(
        ["codecoder", "bench", "--quick", "--only", "keying", "--no-profile", "--json", "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert written["schema"] == SCHEMA
    assert written["options"]["only"] == ["keying"]
    helped = subprocess.run(["codecoder", "bench", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: codecoder bench")
