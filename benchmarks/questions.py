"""Questions per 100 calls (issues 22 and 34): how often realistic agent work stops for the human.

Two sets of recorded sessions. The four of issue 22 (`SESSIONS`) are described below. The
twelve of issue 34 (`CONTAINED_SESSIONS`: Python, TypeScript, Rust, Go, Django, a pnpm monorepo,
C with sanitizers, a data script, a docs site, a git-heavy release, a uv project, a Node
upgrade; 230 calls) also say which hosts each command connects to (`"network"`), and their
replay makes those connections for real: through the runtime's egress proxy
(`environments.egress.EgressProxy`, serving the call's gate, as in @bwrap) to a stand-in server
on loopback that plays every registry (nothing leaves this machine), so a host's question comes
during the call as it would, through the permission chain. Network questions are counted per
host, host escalations (an answer that runs a command on the host) apart, first and later
sessions; the user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`) is shared by the
replay's projects, as a person's is, so an "every project" answer holds in the projects after
it (`Replay.fresh_user` replays each project with an empty one, for comparison).

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
import shlex
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecoder.benchmarks.measure import Measured
from codecoder.benchmarks.report import Area, BenchContext, FigureSpec, Target
from codecoder.benchmarks.workspace import require_tools
from codecoder.environments.base import CommandResult, NetworkGate
from codecoder.environments.egress import Egress, EgressProxy
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer
from codecoder.permissions.prompt import AskRequest
from codecoder.session import Runtime

__all__ = ["AREA", "CONTAINED_SESSIONS", "SESSIONS", "broadest_lasting", "replay"]

SESSIONS = ("python-bugfix", "node-feature", "ci-investigation", "rust-cleanup")
CONTAINED_SESSIONS = (
    *("py-library-feature", "ts-api-endpoint", "rust-cli-flag", "go-service-timeout"),
    *("django-model-field", "pnpm-monorepo-shared-types", "c-parser-sanitizers"),
    *("data-cleaning-script", "docs-site-page", "git-release", "uv-cli-bugfix"),
    "node-dependency-upgrade",
)
# What the replay's resolver answers for every name: a public address the proxy never reaches
# (its connections go to the stand-in).
_PLACEHOLDER = "93.184.216.34"
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
    FigureSpec(
        "questions.contained.first",
        "questions per 100 calls, network hosts included, first session (12 agent sessions, "
        "230 calls, their connections through the egress proxy), run_command in @bwrap",
        "per100",
        SHELL_BASELINE,
        Target("max_value", 5.0, "≤ 5"),
    ),
    FigureSpec(
        "questions.contained.later",
        "questions per 100 calls, network hosts included, a later session of the same "
        "projects, run_command in @bwrap",
        "per100",
        SHELL_BASELINE,
        Target("max_value", 1.0, "≤ 1"),
    ),
    FigureSpec(
        "questions.contained.escalations",
        "host escalations per 100 calls (answers that run a command on the host, unconfined), "
        "first session, the 12 sessions in @bwrap; baseline: every command on @shell runs there",
        "per100",
        SHELL_BASELINE,
        Target("max_value", 0.5, "≤ 0.5"),
    ),
    FigureSpec(
        "questions.contained.escalations.later",
        "host escalations per 100 calls, a later session, the 12 sessions in @bwrap",
        "per100",
        SHELL_BASELINE,
        Target("max_value", 0.5, "≤ 0.5"),
    ),
)

# The tired human's order of preference: the widest grant that lasts longest.
_PREFERENCE = (
    Answer.EVERY_PROJECT,
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

    def escalations(self, phase: str) -> int:
        """Answers that ran a command on the host, unconfined."""
        return sum(
            q.phase == phase and Answer(q.answer).on_host for q in self.questions if q.answer
        )

    def hosts(self, phase: str) -> dict[str, int]:
        """Network questions by host."""
        found: dict[str, int] = {}
        for q in self.questions:
            if q.phase == phase and q.tool == "network":
                host = q.key.removeprefix("network:")
                found[host] = found.get(host, 0) + 1
        return found


def load_session(name: str) -> dict[str, Any]:
    text = (
        importlib.resources.files("codecoder.benchmarks")
        .joinpath(f"sessions/{name}.json")
        .read_text(encoding="utf-8")
    )
    session: dict[str, Any] = json.loads(text)
    return session


def replay(
    binding: EnvironmentTag,
    scratch: Path,
    names: tuple[str, ...] = SESSIONS,
    *,
    fresh_user: bool = False,
) -> Replay:
    """Replay every session, a first time and a later time, with run_command in `binding`;
    `fresh_user`: each project with an empty user file (else one file for all, as a person's)."""
    user = scratch / f"user-config-{binding.name.lower()}{'-fresh' if fresh_user else ''}"
    shutil.rmtree(user, ignore_errors=True)
    with _user_routes(user), _StandIn() as stand_in:
        return _replay(binding, scratch, names, stand_in, user if fresh_user else None)


@contextlib.contextmanager
def _user_routes(directory: Path) -> Iterator[None]:
    """The simulated user's own file (`$XDG_CONFIG_HOME/codecoder/config.json`), routing
    github.com's credential, in effect while the block runs."""
    _routes_only(directory)
    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(directory)
    try:
        yield
    finally:
        if before is None:
            del os.environ["XDG_CONFIG_HOME"]
        else:
            os.environ["XDG_CONFIG_HOME"] = before


def _routes_only(directory: Path) -> None:
    """The user's file holding the credential route and nothing else (no grant yet)."""
    path = directory / "codecoder" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"credentials": {ROUTED_HOST: {"from": "git"}}}) + "\n")


def _replay(
    binding: EnvironmentTag,
    scratch: Path,
    names: tuple[str, ...],
    stand_in: _StandIn,
    fresh_user: Path | None,
) -> Replay:
    tools = require_tools("run_command", "write_file", "edit_file", "read_file")
    questions: list[Question] = []
    calls = 0
    for name in names:
        recorded = load_session(name)
        project = scratch / f"{binding.name.lower()}-{name}"
        shutil.rmtree(project, ignore_errors=True)
        calls += len(recorded["calls"])
        _repository(project, name)
        if fresh_user is not None:
            _routes_only(fresh_user)
        connects = {
            call["args"]["command"]: tuple(call.get("network", ()))
            for call in recorded["calls"]
            if call["tool"] == "run_command"
        }
        for phase in ("first", "later"):
            _lay_out(project, recorded["files"])
            human = _TiredHuman()
            asked = human.asked
            with (
                Runtime(
                    project,
                    asker=human,
                    environments=_commands_answered_at_once(connects, stand_in),
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


class _StandIn:
    """A stand-in for every registry and code host, on loopback: answers any request with 200
    and a few bytes; and the egress proxy the replay's calls connect through to it (as @bwrap's
    sandboxes do: every https host asked for, each decided through the call's gate)."""

    def __enter__(self) -> _StandIn:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self.proxy = EgressProxy(
            Egress.asking(),
            resolver=lambda host, port: [_PLACEHOLDER],
            unix=False,
            upstream=self.server.getsockname(),
        )
        return self

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def connect(self, hosts: tuple[str, ...], gate: NetworkGate) -> list[str]:
        """Connect to each host through the proxy, for the call whose gate is `gate`, as the
        command would; what each connection was answered (its status line)."""
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        address = listener.getsockname()
        said = []
        with self.proxy.serving(listener, gate):
            for host in hosts:
                with socket.create_connection(address, timeout=10) as conn:
                    conn.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                    answer = conn.recv(4096).decode(errors="replace")
                    if answer.startswith("HTTP/1.1 200"):
                        conn.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                        conn.recv(4096)
                    said.append(answer.split("\r\n", 1)[0])
        listener.close()
        return said

    def __exit__(self, *exc: object) -> None:
        self.proxy.close()
        self.server.close()


def _commands_answered_at_once(
    connects: Mapping[str, tuple[str, ...]], stand_in: _StandIn
) -> dict[EnvironmentTag, MockEnvironment]:
    def done(request: Any) -> CommandResult:
        command = request.script or shlex.join(request.argv or ())
        hosts = connects.get(command, ())
        if not hosts and command.startswith("git push"):
            hosts = (ROUTED_HOST,)  # the four sessions of issue 22 name no hosts
        if request.network is not None and hosts:
            refused = [s for s in stand_in.connect(hosts, request.network) if " 200 " not in s]
            if refused:
                return CommandResult(exit_code=1, stdout="", stderr=refused[0], duration=0.0)
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
        return (
            "a host's first connection from the sandbox: its network key (a package index's "
            "hosts as one)"
        )
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
    return "the first command the sandbox runs: no grant yet (the answer holds in every project)"


@contextlib.contextmanager
def run(ctx: BenchContext) -> Iterator[dict[str, Measured]]:
    measured = _issue_22(ctx)
    measured.update(_contained(ctx))
    yield measured


def _reasons(questions: list[Question]) -> str:
    reasons: dict[str, int] = {}
    for question in questions:
        reasons[question.why] = reasons.get(question.why, 0) + 1
    return "; ".join(f"{n}× {why}" for why, n in reasons.items())


def _issue_22(ctx: BenchContext) -> dict[str, Measured]:
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
        note = (
            f"{len(remaining)} questions in {contained.calls} calls in @bwrap against "
            f"{shell.count(phase)} on @shell"
        )
        if remaining:
            note += "; left: " + _reasons(remaining)
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
    return measured


def _contained(ctx: BenchContext) -> dict[str, Measured]:
    names = CONTAINED_SESSIONS
    shell = replay(EnvironmentTag.SHELL, ctx.scratch, names)
    contained = replay(EnvironmentTag.BWRAP, ctx.scratch, names)
    fresh = replay(EnvironmentTag.BWRAP, ctx.scratch, names, fresh_user=True)
    by_session = {
        name: {
            phase: {"@shell": shell.count(phase, name), "@bwrap": contained.count(phase, name)}
            for phase in ("first", "later")
        }
        for name in names
    }
    measured: dict[str, Measured] = {}
    for phase, figure in (("first", "first"), ("later", "later")):
        remaining = [q for q in contained.questions if q.phase == phase]
        note = (
            f"{len(remaining)} questions in {contained.calls} calls in @bwrap "
            f"({sum(contained.hosts(phase).values())} of them for network hosts) against "
            f"{shell.count(phase)} on @shell; with an empty user file for each project "
            f"{fresh.count(phase)} ({fresh.per100(phase):.1f} per 100)"
        )
        if remaining:
            note += "; left: " + _reasons(remaining)
        measured[f"questions.contained.{figure}"] = Measured(
            subject=[contained.per100(phase)],
            baseline=[shell.per100(phase)],
            note=note,
            extra={
                "calls": contained.calls,
                "questions": len(remaining),
                "baseline_questions": shell.count(phase),
                "network_by_host": contained.hosts(phase),
                "fresh_user_questions": fresh.count(phase),
                "fresh_user_per100": fresh.per100(phase),
                "by_session": by_session,
                "left": [q.to_json() for q in remaining],
            },
        )
    commands = sum(
        call["tool"] == "run_command" for name in names for call in load_session(name)["calls"]
    )
    for phase, name in (("first", "escalations"), ("later", "escalations.later")):
        escalated = [
            q for q in contained.questions if q.phase == phase and Answer(q.answer).on_host
        ]
        measured[f"questions.contained.{name}"] = Measured(
            subject=[100.0 * len(escalated) / contained.calls],
            baseline=[100.0 * commands / contained.calls],
            note=f"{len(escalated)} in {contained.calls} calls: "
            + (", ".join(f"{q.session}: {q.key}" for q in escalated) or "none"),
            extra={"escalations": [q.to_json() for q in escalated]},
        )
    return measured


AREA = Area("questions", "questions per 100 calls", SPECS, run, cheap=True)
