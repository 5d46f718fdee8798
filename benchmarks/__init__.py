"""How fast is every layer of codecoder, measured against what users would use instead.

    python -m benchmarks                     # everything: a Markdown table on stdout
    python -m benchmarks --quick             # small counts (CI, smoke)
    python -m benchmarks --only permission keying --json bench.json

Every figure is a median with its quartiles, measured in the same run and in turn with its
baseline (these machines are noisy: ratios and medians, never single absolute times), and
checked against the target of issue 9 where there is one. A missed target is reported as a miss,
with a cProfile summary of where the time went; an area whose environment is unavailable (no
Docker engine, no wasm module) is reported as skipped, with the reason.

One module per area:

    permission   decide() for session/project grants and None tools; the dispatcher path
    keying       key_command first time and cached, against bashlex.parse
    allowlists   a 10,000-entry codecoder.json: load time, decision time against 10 entries
    shell        @shell calls against subprocess.run
    bwrap        @bwrap calls against the same call on @shell and a bare bubblewrap
    wasm         @wasm read_file warm and in a fresh process, against compiling and spawning
    docker       @docker warm calls against exec_run and docker run --rm
    docker_modes @docker under gVisor (runsc) and in sync mode, against runc and bind mode
    pool         a new session's (and process's) first @docker call with the warm pool and
                 without, and new processes calling back to back, against docker run --rm
    many_sessions
                 100 concurrent sessions with a warm sandbox each: host memory per idle
                 sandbox, call latency (p50, p99) with all active, runc and gVisor
    search       grep and glob through @wasm against Python and GNU tools
    throughput   calls per second with 1, 4 and 16 callers on each environment
    agents       start-up of `codecoder decide` and `codecoder hook` (run on every tool call of
                 another agent) against `python -c pass`; an MCP result's size against its text
    questions    questions per 100 calls of four recorded agent sessions (sessions/*.json),
                 first and later session, run_command in @bwrap against @shell
    frameworks   what each agent framework's adapter (pydantic-ai, the OpenAI Agents SDK, the
                 Claude Agent SDK) and the async face add to a call, against Session.call
    reliability  grants and revokes killed at random moments (survived per 100), readers
                 refused while others grant, p99 of 70 concurrent calls on loaded cores

`measure` holds the timing primitives, `report` the figures and their JSON and table, `runner`
the loop over areas. Peak memory (the RSS high-water mark) is part of every report.
"""

from __future__ import annotations

from codecoder.benchmarks import (
    agents,
    allowlists,
    bwrap,
    docker,
    dockermodes,
    frameworks,
    keying,
    manysessions,
    permission,
    pool,
    questions,
    reliability,
    search,
    shell,
    throughput,
    wasm,
)
from codecoder.benchmarks.report import SCHEMA, Area, Report
from codecoder.benchmarks.runner import run_areas

__all__ = ["AREAS", "SCHEMA", "Area", "Report", "run_areas"]

AREAS: tuple[Area, ...] = (
    permission.AREA,
    keying.AREA,
    allowlists.AREA,
    shell.AREA,
    bwrap.AREA,
    wasm.AREA,
    docker.AREA,
    dockermodes.AREA,
    pool.AREA,
    search.AREA,
    throughput.AREA,
    manysessions.AREA,
    agents.AREA,
    questions.AREA,
    frameworks.AREA,
    reliability.AREA,
)
