"""Questions per 100 calls (issue 22): how often realistic agent work stops for the human.

Four recorded agent sessions (`sessions/*.json`: a Python bug fix, a Node feature, a CI
investigation, a Rust clean-up; 110 tool calls, written as agents really work) are replayed
through the permission layer with `Session.call`: the read tools in @landlock and the write
tools in @wasm for real, run_command and commit on a mock environment that answers at once.
The human is simulated and tired: at every question they take the broadest lasting answer
offered (any simple command in the sandbox, then the program, then the key, for the project
before the session). A command that needs the host (`git push`, `gh run list`: the network and
the user's credentials, which a contained command never has) is the exception: its question says
that contained it would fail, so the human takes the broadest *host* choice (the program on the
host for the session), the one answer under which it works. No host grant outlives its session,
so such a command is asked again in every session.

Except `git push` to a routed remote: each project is a git repository whose origin is
`https://github.com/<team>/<name>.git`, the simulated user's own file routes github.com's
credential through the credential broker (`"credentials": {"github.com": {"from": "git"}}`,
`environments.broker`) and the project's codecoder.json admits github.com
(`"docker": {"network": {"allow": ["github.com"]}}`). Such a push runs contained
(`runtime.tools.containedpush`): its question offers AlwaysThisProject. When it runs, the
recorder stands in for the egress proxy too: it asks the call's network gate for
`network:github.com`, as the proxy would on the push's connection, through the real permission
chain (a question the first time, counted like every other).

Each session runs twice on a project of its own: a first session, and a later session of the
same project (a new Runtime, the same codecoder.json, the workspace's files as they were), once
with run_command on @shell (the baseline: no grant for it outlives the session, and read-only
commands are asked like any other) and once in @bwrap (read-only commands are reads, output
filters ride on their command's grant, the project choices fit the sandbox). Every question left
in @bwrap is reported with its tool, its key and why no grant covered it.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import require_tools
from codecoder.environments.base import CommandResult
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.permissions.prompt import AskRequest
from codecoder.session import Runtime

__all__ = ["AREA", "SESSIONS", "broadest_lasting", "replay"]

SESSIONS = ("python-bugfix", "node-feature", "ci-investigation", "rust-cleanup")
SHELL_BASELINE = "run_command on @shell"
# The code host the projects push to, whose credential the simulated user routes.
ROUTED_HOST = "github.com"

SPECS = (
    FigureSpec(
        "questions.first.bwrap",
        "questions per 100 calls, first session (4 agent sessions, 110 calls), run_command in "
        "@bwrap",
        "per100",
        SHELL_BASELINE,
        Target("max_value", 15.0, "≤ 15"),
    ),
    FigureSpec(
        "questions.later.bwrap",
        "questions per 100 calls, a later session of the same projects, run_command in @bwrap",
        "per100",
        SHELL_BASELINE,
        Target("max_value", 3.0, "≤ 3"),
    ),
)

# The tired human's order of preference: the widest grant that lasts longest.
_PREFERENCE = (
    Answer.PROJECT_ANY,
    Answer.PROJECT_PROGRAM,
    Answer.PROJECT,
    Answer.SESSION_PROGRAM,
    Answer.SESSION,
    Answer.HOST_SESSION_PROGRAM,
    Answer.HOST_SESSION,
    Answer.ONCE,
    Answer.HOST_ONCE,
)
_WRITES = frozenset({"write_file", "edit_file", "move_file", "delete_file"})


# For a command that would fail contained: the widest choice that runs it where it works.
_ON_HOST = (Answer.HOST_SESSION_PROGRAM, Answer.HOST_SESSION, Answer.HOST_ONCE)


def broadest_lasting(request: AskRequest) -> Answer:
    """The answer a tired human gives: the broadest lasting choice offered, or, for a command
    that would fail contained, the broadest choice that runs it on the host."""
    if request.host_key:
        on_host = [answer for answer in _ON_HOST if answer in request.choices]
        if on_host:
            return on_host[0]
    return next(answer for answer in _PREFERENCE if answer in request.choices)


@dataclass(frozen=True, slots=True)
class Question:
    """One question the replay asked, and why no grant covered its call."""

    session: str
    phase: str
    call: int
    tool: str
    key: str
    answer: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "phase": self.phase,
            "call": self.call,
            "tool": self.tool,
            "key": self.key,
            "answer": self.answer,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Replay:
    """What one replay of every session asked, by phase."""

    calls: int
    questions: tuple[Question, ...]

    def per100(self, phase: str) -> float:
        return 100.0 * sum(q.phase == phase for q in self.questions) / self.calls

    def count(self, phase: str, session: str | None = None) -> int:
        return sum(
            q.phase == phase and (session is None or q.session == session) for q in self.questions
        )


def load_session(name: str) -> dict[str, Any]:
    text = (
        importlib.resources.files("codecoder.benchmarks")
        .joinpath(f"sessions/{name}.json")
        .read_text(encoding="utf-8")
    )
    session: dict[str, Any] = json.loads(text)
    return session


def replay(binding: EnvironmentTag, scratch: Path, names: tuple[str, ...] = SESSIONS) -> Replay:
    """Replay every session, a first time and a later time, with run_command in `binding`."""
    with _user_routes(scratch / "user-config"):
        return _replay(binding, scratch, names)


@contextlib.contextmanager
def _user_routes(directory: Path) -> Iterator[None]:
    """The simulated user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`), routing
    github.com's credential, in effect while the block runs."""
    path = directory / "codecoder" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"credentials": {ROUTED_HOST: {"from": "git"}}}) + "\n")
    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(directory)
    try:
        yield
    finally:
        if before is None:
            del os.environ["XDG_CONFIG_HOME"]
        else:
            os.environ["XDG_CONFIG_HOME"] = before


def _replay(binding: EnvironmentTag, scratch: Path, names: tuple[str, ...]) -> Replay:
    tools = require_tools("run_command", "write_file", "edit_file", "read_file")
    questions: list[Question] = []
    calls = 0
    for name in names:
        recorded = load_session(name)
        project = scratch / f"{binding.name.lower()}-{name}"
        shutil.rmtree(project, ignore_errors=True)
        calls += len(recorded["calls"])
        _repository(project, name)
        for phase in ("first", "later"):
            _lay_out(project, recorded["files"])
            human = _TiredHuman()
            asked = human.asked
            with (
                Runtime(
                    project,
                    asker=human,
                    environments=_commands_answered_at_once(),
                    bindings={"run_command": binding, "commit": binding},
                    audit_log=None,
                    tools=tools,
                    trusted=True,
                ) as runtime,
                runtime.session() as session,
            ):
                for index, call in enumerate(recorded["calls"], start=1):
                    before = len(asked)
                    session.call(call["tool"], call["args"])
                    for request, answer in zip(asked[before:], human.answers[before:], strict=True):
                        questions.append(
                            Question(
                                name,
                                phase,
                                index,
                                request.tool,
                                request.key,
                                answer.value,
                                _why(request, binding, phase, call["args"]),
                            )
                        )
    return Replay(calls, tuple(questions))


class _TiredHuman:
    """Answers every question with the broadest lasting choice, and keeps the questions."""

    def __init__(self) -> None:
        self.asked: list[AskRequest] = []
        self.answers: list[Answer] = []

    def __call__(self, request: AskRequest) -> Answer:
        self.asked.append(request)
        self.answers.append(broadest_lasting(request))
        return self.answers[-1]


def _lay_out(project: Path, files: Mapping[str, str]) -> None:
    """The workspace's files as the session found them (codecoder.json is left as it is)."""
    for relative, content in files.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


def _repository(project: Path, name: str) -> None:
    """The project as a git repository whose origin is on the routed host, with the egress
    allowlist that admits it in codecoder.json."""
    project.mkdir(parents=True, exist_ok=True)
    for args in (
        ("init", "-q", "-b", "main"),
        ("remote", "add", "origin", f"https://{ROUTED_HOST}/codecoder-bench/{name}.git"),
    ):
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)
    allow = {"docker": {"network": {"allow": [ROUTED_HOST]}}}
    (project / "codecoder.json").write_text(json.dumps(allow, indent=2) + "\n")


def _commands_answered_at_once() -> dict[EnvironmentTag, MockEnvironment]:
    def done(request: Any) -> CommandResult:
        words = request.argv or (request.script or "").split()
        if request.network is not None and list(words[:2]) == ["git", "push"]:
            # What the egress proxy does when the contained push connects: the call's gate
            # decides network:github.com through the permission chain.
            why_not = request.network.admit(ROUTED_HOST, 443)
            if why_not is not None:
                return CommandResult(exit_code=128, stdout="", stderr=why_not, duration=0.0)
        return CommandResult(exit_code=0, stdout="", stderr="", duration=0.0)

    return {
        tag: MockEnvironment(done, tag)
        for tag in (EnvironmentTag.SHELL, EnvironmentTag.BWRAP, EnvironmentTag.DOCKER)
    }


def _why(request: AskRequest, binding: EnvironmentTag, phase: str, args: Mapping[str, Any]) -> str:
    """Why no grant covered the call, from what the question shows."""
    command = str(args.get("command", ""))
    if request.host_key:
        if phase == "later":
            return "it needs the host (network, credentials): no host grant outlives its session"
        return "it needs the host (network, credentials): asked so that the host can be chosen"
    if request.tool == "network":
        return "the first connection to the routed host: its network key, granted for the project"
    if binding is EnvironmentTag.BWRAP and command.startswith("git push"):
        return "git push, contained through the credential broker: asked once for the project"
    if request.tool in _WRITES:
        return "a path no earlier answer named: a write grant names one file"
    if request.key.startswith(f'{request.tool}:"'):
        return "a compound command: no wildcard covers it, only a grant of this exact string"
    if binding is EnvironmentTag.SHELL:
        if phase == "later":
            return "@shell grants end with the session that gave them"
        from codecoder.permissions.commandkey import key_command

        if command and key_command(command).read_only:
            return "read-only, but @shell does not confine it: asked like any command"
        return "the first command of its program in this session (@shell: session grants only)"
    return "the first command the project runs in the sandbox: no grant yet"


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    shell = replay(EnvironmentTag.SHELL, ctx.scratch)
    contained = replay(EnvironmentTag.BWRAP, ctx.scratch)
    left = [q.to_json() for q in contained.questions]
    by_session = {
        name: {
            phase: {"@shell": shell.count(phase, name), "@bwrap": contained.count(phase, name)}
            for phase in ("first", "later")
        }
        for name in SESSIONS
    }
    measured: dict[str, Measured] = {}
    for phase in ("first", "later"):
        remaining = [q for q in contained.questions if q.phase == phase]
        reasons: dict[str, int] = {}
        for question in remaining:
            reasons[question.why] = reasons.get(question.why, 0) + 1
        note = (
            f"{len(remaining)} questions in {contained.calls} calls in @bwrap against "
            f"{shell.count(phase)} on @shell"
        )
        if reasons:
            note += "; left: " + "; ".join(f"{n}× {why}" for why, n in reasons.items())
        measured[f"questions.{phase}.bwrap"] = Measured(
            subject=[contained.per100(phase)],
            baseline=[shell.per100(phase)],
            note=note,
            extra={
                "calls": contained.calls,
                "questions": len(remaining),
                "baseline_questions": shell.count(phase),
                "by_session": by_session,
                "left": [q for q in left if q["phase"] == phase],
            },
        )
    yield measured


AREA = Area("questions", "questions per 100 calls", SPECS, run, cheap=True)
