"""`codecoder audit`: the corpus, the runner's verdicts, and the proof that the suite can fail.

The keying and permission-file attempts need no sandbox; the @wasm ones run real wasmtime; the
@docker ones need an engine and the codecoder-sandbox image: without them they skip on a
developer machine and FAIL when CI=true, like tests/environments/docker/test_environment.py.

"The suite can fail" is shown by weakening one setting at a time — through codecoder.json where
a project can loosen it (network, read-only rootfs), through `AuditOptions` where it cannot
(a keyer blind to compound commands, a Docker client that keeps capabilities or drops the
protected-path mounts) — and asserting exactly which attempts are then reported as escaped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.mock import MockEnvironment
from codecoder.interfaces.cli import main
from codecoder.interfaces.escapes.corpus import (
    LAYERS,
    ContainedEntry,
    KeyingEntry,
    Layer,
    load_corpus,
)
from codecoder.interfaces.escapes.options import AuditOptions
from codecoder.interfaces.escapes.outcomes import Status
from codecoder.interfaces.escapes.report import AuditReport
from codecoder.interfaces.escapes.runner import run_audit
from codecoder.permissions.allowlist import SessionAllowlist
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import CallSite, Permission
from codecoder.tools.base import ToolContext, ToolResult
from codecoder.tools.catalogue import builtin_tools
from codecoder.tools.execute import RunCommand, RunCommandParameters
from tests.conftest import write_config

BLOCKED, ESCAPED, NOT_RUN, NOT_APPLICABLE = (
    Status.BLOCKED,
    Status.ESCAPED,
    Status.NOT_RUN,
    Status.NOT_APPLICABLE,
)

# Escapes this suite found that are not fixed yet (none now: the poll_oneoff sleep it found
# is bounded by the call's deadline since). Add an id here only with the defect it stands for.
KNOWN_ESCAPES: set[str] = set()

# The capability attempts attack the tools of issue 6: blocked once they exist, not applicable
# (with the reason) before.
CAPABILITY_ATTEMPTS = {
    "permission-files.capability-digest-tampered",
    "permission-files.capability-self-created",
}
CAPABILITIES_BUILT = {"create_capability", "run_capability"} <= set(builtin_tools())
CAPABILITY_STATUS = BLOCKED if CAPABILITIES_BUILT else NOT_APPLICABLE

# Not applicable on a default project: run_command and commit run contained (@bwrap), where a
# project grant for them is legitimate, PATH is the sandbox's own and the protected paths are
# mounts (and the capability attempts until capabilities exist). The host-only attempts run on
# a project that binds them to @shell (`ON_SHELL`).
NOT_APPLICABLE_BY_DEFAULT = {
    "permission-files.shell-entry-commit",
    "permission-files.shell-entry-run-command",
    "permission-files.shell-entry-wildcard",
    "permission-files.path-hijack-venv",
    "permission-files.write-through-link-to-git",
    "permission-files.bare-repository-fsmonitor",
    "permission-files.bare-repository-in-subdirectory",
} | (set() if CAPABILITIES_BUILT else CAPABILITY_ATTEMPTS)
ON_SHELL = {"environments": {"run_command": "@shell", "commit": "@shell"}}


def statuses(report: AuditReport) -> dict[str, Status]:
    return {result.attempt.id: result.status for result in report.results}


def ids(layer: Layer) -> list[str]:
    return [attempt.id for attempt in load_corpus([layer])]


def other_runtimes(client: Any) -> list[str]:
    """The runtimes the docker layer runs under again, besides the engine's default (runsc)."""
    info = client.info()
    return [
        runtime
        for runtime in ("runc", "runsc")
        if runtime in (info.get("Runtimes") or {}) and runtime != info.get("DefaultRuntime")
    ]


def keying_entries() -> list[KeyingEntry]:
    entries = [attempt.entry for attempt in load_corpus(["keying"])]
    return [entry for entry in entries if isinstance(entry, KeyingEntry)]


@pytest.fixture(autouse=True)
def _private_wasm_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cache attempts tamper with entries of their own; keep even those out of ~/.cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def docker_engine() -> Iterator[Any]:
    """A Docker engine with the sandbox image, or a skip (a failure when CI=true)."""
    import docker

    try:
        client = docker.from_env(timeout=30)
        client.ping()
        client.images.get("codecoder-sandbox")
    except Exception as exc:
        reason = f"no Docker engine with the sandbox image ({exc}); run scripts/docker-setup.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the audit's Docker tests must run, but {reason}")
        pytest.skip(reason)
    yield client
    client.close()


# --- the corpus ----------------------------------------------------------------------------


def test_the_corpus_has_every_layer_and_well_over_sixty_attempts() -> None:
    corpus = load_corpus()

    per_layer = {layer: sum(a.layer == layer for a in corpus) for layer in LAYERS}
    assert per_layer == {
        "keying": 191,
        "contained": 77,
        "permission-files": 55,
        "rules": 20,
        "hooks": 31,
        "wasm": 46,
        "bwrap": 49,
        "docker": 62,
        "pool": 19,
    }
    assert len({a.id for a in corpus}) == len(corpus) == 550
    assert all(a.id.startswith(f"{a.layer}.") and a.description and a.defence for a in corpus)


def test_every_keying_attempt_is_keyed_compound_or_as_another_key_than_its_innocent_grant() -> None:
    # The corpus itself is checked against the keyer, so an attempt cannot pass by being benign.
    entries = keying_entries()
    assert len(entries) == 191
    for entry in entries:
        attack, innocent = key_command(entry.command), key_command(entry.innocent)
        assert not innocent.compound, entry.id
        if entry.expect == "argv" or entry.deny:
            continue
        narrower = not entry.program_wide and attack.levels != innocent.levels
        assert (
            attack.compound or attack.protected or attack.program != innocent.program or (narrower)
        ), entry.id


# --- rules and hooks: rules that cannot be lost or dodged -----------------------------------


def test_every_rules_and_hooks_attempt_is_blocked_on_a_default_project(project: Path) -> None:
    report = run_audit(project, ["rules", "hooks"])

    assert statuses(report) == dict.fromkeys([*ids("rules"), *ids("hooks")], BLOCKED)
    how = {r.attempt.id: r.how for r in report.results}
    assert how["rules.trailing-comma"].startswith(
        "--allow refused; the call refused without a question: codecoder.json:1:32: error: "
        "[syntax] not valid JSON"
    )
    assert how["rules.untrusted-sandbox-binding"].startswith(
        "untrusted: the binding to @docker was obeyed"
    )
    assert "codecoder trust --git" in how["rules.host-copy-plants-hook"]
    assert how["hooks.fetch-metadata"].startswith(
        "denied: codecoder: refused to fetch http://169.254.169.254/latest/meta-data/: "
        "169.254.169.254 is a cloud metadata address"
    )
    assert "a protected path" in how["hooks.claude-writes-its-settings"]


# --- keying --------------------------------------------------------------------------------


def test_every_keying_attempt_is_blocked_on_a_default_project(project: Path) -> None:
    report = run_audit(project, ["keying"])

    assert statuses(report) == dict.fromkeys(ids("keying"), BLOCKED)
    assert report.ok
    by_id = {r.attempt.id: r.how for r in report.results}
    assert by_id["keying.and-list"] == (
        'keyed run_command:"git status && git push --force origin main" (command list), '
        "not covered by run_command:git:status, run_command:git, run_command:git:*, "
        "run_command:*; the prompt refused it; nothing ran"
    )
    assert by_id["keying.deny-absolute-path"] == (
        "refused by the deny rule run_command:git:push; nothing ran"
    )
    # Contained (@bwrap), `git log` is a read that needs no grant, and the program is the
    # sandbox's own `git` (on @shell it is the one found on PATH when the call was keyed: below).
    assert by_id["keying.quoted-metacharacters"] == (
        "allowed read-only (run_command:git:log, a read-only command), run confined read-only "
        "in @bwrap as the argv ['git', 'log', '--grep=$(rm -rf .); id'] without a shell"
    )
    on_host = write_config(project, ON_SHELL)
    host = run_audit(project, ["keying"], attempts=["keying.quoted-metacharacters"])
    on_host.unlink()
    git = shutil.which("git")
    assert host.results[0].how == (
        "allowed (session: run_command:git), run as the argv "
        f"['{git}', 'log', '--grep=$(rm -rf .); id'] without a shell"
    )
    assert by_id["keying.escape-conceal"].endswith(
        "the prompt shows every control character made visible, and every long run of "
        "characters that render blank as a marker with its length"
    )


def test_a_sandboxed_run_command_is_attacked_under_project_wildcard_grants(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@docker"}})

    report = run_audit(project, ["keying"])

    assert statuses(report) == dict.fromkeys(ids("keying"), BLOCKED)
    assert report.results[0].how == (
        'keyed run_command:"git status && git push --force origin main" (command list), '
        "not covered by run_command:git:status, run_command:git, run_command:git:*, "
        "run_command:*; the prompt refused it; nothing ran"
    )


class CompoundBlindRunCommand(RunCommand):
    """A deliberately broken keyer: compound commands keep their key but are treated as simple,
    so `run_command:*` (every simple command) covers them."""

    def permission(self, args: RunCommandParameters) -> Permission:
        key = key_command(args.command).permission_key(self.name)
        return Permission.ask(dataclasses.replace(key, compound=False))


def test_a_keyer_blind_to_compound_commands_is_caught_by_the_wildcard_grant(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@docker"}})
    tools = {**builtin_tools(), "run_command": CompoundBlindRunCommand()}

    report = run_audit(project, ["keying"], options=AuditOptions(tools=tools))

    def escapes(entry: KeyingEntry) -> bool:
        keyed = key_command(entry.command)
        # Protected paths are refused whatever the keyer says, and so are programs no grant
        # names; deny rules still see every command inside the string.
        return entry.wildcard and keyed.compound and not keyed.protected and not entry.deny

    expected = {e.id: ESCAPED if escapes(e) else BLOCKED for e in keying_entries()}
    assert statuses(report) == expected
    assert sum(s is ESCAPED for s in expected.values()) == 147
    assert not report.ok
    assert report.results[0].how == (
        "allowed (project: run_command:*), and the script "
        "'git status && git push --force origin main' (run by bash) was handed to @docker"
    )


ARGV_ATTEMPTS = {"keying.quoted-metacharacters", "keying.double-quoted-semicolon"}


class WritableReadsRunCommand(RunCommand):
    """A deliberately broken tool: a read-only command, allowed unasked, runs writable."""

    def execute(self, args: RunCommandParameters, ctx: ToolContext) -> ToolResult:
        return super().execute(args, dataclasses.replace(ctx, read_only=False))


class ShellRunCommand(RunCommand):
    """A deliberately broken tool: every command, simple ones too, is handed to a shell."""

    def execute(self, args: RunCommandParameters, ctx: ToolContext) -> ToolResult:
        inner = ctx.environment

        def by_bash(request: CommandRequest) -> Any:
            argv = request.argv
            script = shlex.join(argv) if argv is not None else request.script
            return inner.run(dataclasses.replace(request, argv=None, script=script))

        shell = MockEnvironment(by_bash, ctx.environment_tag)
        return super().execute(args, dataclasses.replace(ctx, environment=shell))


def test_a_read_only_argv_attempt_run_writable_or_by_a_shell_is_caught(project: Path) -> None:
    # Allowed read-only in @bwrap is blocked only as exactly its argv, without a shell, read-only.
    writable = {**builtin_tools(), "run_command": WritableReadsRunCommand()}
    shell = {**builtin_tools(), "run_command": ShellRunCommand()}

    reports = [
        run_audit(project, ["keying"], options=AuditOptions(tools=tools))
        for tools in (writable, shell)
    ]

    expected = {i: ESCAPED if i in ARGV_ATTEMPTS else BLOCKED for i in ids("keying")}
    assert [statuses(report) for report in reports] == [expected, expected]
    assert [not report.ok for report in reports] == [True, True]
    written, by_bash = ({r.attempt.id: r.how for r in rep.results} for rep in reports)
    assert written["keying.quoted-metacharacters"] == (
        "allowed as a read-only command, but handed to @bwrap writable"
    )
    assert by_bash["keying.quoted-metacharacters"] == (
        "allowed (read-only: a read-only command (git), run confined read-only in @bwrap: the "
        "file system read-only, your secrets hidden, no network) and the script "
        "\"git log '--grep=$(rm -rf .); id'\" (run by bash)"
    )


def test_a_control_that_only_runs_read_only_must_still_be_covered_by_its_grant(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session that records no grant: `git status` still runs, read-only, but proves nothing
    # about the grant its attempt is made under.
    monkeypatch.setattr(SessionAllowlist, "grant", lambda *args, **kwargs: 0.0)

    report = run_audit(project, ["keying"])

    expected = {
        attempt.id: NOT_RUN if key_command(attempt.entry.innocent).read_only else BLOCKED
        for attempt in load_corpus(["keying"])
        if isinstance(attempt.entry, KeyingEntry)
    }
    assert statuses(report) == expected
    assert sum(s is NOT_RUN for s in expected.values()) == 118
    assert {r.attempt.id: r.how for r in report.results}["keying.and-list"] == (
        "'git status' runs read-only, and the grant for it does not cover it, so this attempt "
        "would prove nothing"
    )


# --- contained commands --------------------------------------------------------------------


def contained_entries() -> list[ContainedEntry]:
    entries = [attempt.entry for attempt in load_corpus(["contained"])]
    return [entry for entry in entries if isinstance(entry, ContainedEntry)]


def test_every_contained_attempt_attacks_what_the_table_would_otherwise_allow() -> None:
    # The corpus itself is checked against the keyer, so an attempt cannot pass by being benign:
    # a read-only attempt is not read-only, a filter attempt is not keyed as its innocent command,
    # an escalation attempt needs the host.
    for entry in contained_entries():
        keyed = key_command(entry.command)
        if entry.kind == "read-only" and entry.id.startswith("contained.glob-"):
            # Read-only by the table whatever its glob expands to: its attack is on the
            # confinement (tests/environments/test_bwrap_globs.py shows each one writes
            # unconfined), or on what else makes the line compound.
            assert keyed.compound and "*" in entry.command, entry.id
        elif entry.kind == "read-only":
            assert keyed.read_only == "", entry.id
        elif entry.kind == "filter":
            assert keyed.compound and entry.innocent is not None, entry.id
            assert key_command(entry.innocent).read_only == "", entry.id
        else:
            assert keyed.needs_host, entry.id


def test_every_contained_attempt_is_blocked_on_a_default_project(project: Path) -> None:
    report = run_audit(project, ["contained"])

    assert statuses(report) == dict.fromkeys(ids("contained"), BLOCKED)
    by_id = {r.attempt.id: r.how for r in report.results}
    assert by_id["contained.sort-output-abbreviated"] == (
        "asked for run_command:sort: denied at the prompt; nothing ran unasked"
    )
    assert by_id["contained.cat-secret"] == (
        'not covered by run_command:npm:test: asked for run_command:"npm test | cat '
        '~/.ssh/id_rsa": denied at the prompt; nothing ran'
    )
    assert by_id["contained.push-under-wildcards"] == (
        "asked with the host offered, answered project-any: ran contained in @bwrap, never on "
        "the host"
    )


class EverythingReadOnlyRunCommand(RunCommand):
    """A deliberately broken table and tool: every command is read-only, and it runs writable."""

    def permission_in(self, args: RunCommandParameters, site: CallSite) -> Permission:
        key = key_command(args.command).permission_key(self.name)
        return Permission.read_only(dataclasses.replace(key, read_only="everything"))

    def execute(self, args: RunCommandParameters, ctx: ToolContext) -> ToolResult:
        return super().execute(args, dataclasses.replace(ctx, read_only=False))


def test_a_table_that_calls_everything_read_only_is_caught(project: Path) -> None:
    tools = {**builtin_tools(), "run_command": EverythingReadOnlyRunCommand()}

    report = run_audit(project, ["contained"], options=AuditOptions(tools=tools))

    expected = {
        f"contained.{e.id.split('.', 1)[1]}": BLOCKED if e.kind == "escalation" else ESCAPED
        for e in contained_entries()
    }
    # Invalid arguments are refused before any key is computed.
    assert statuses(report) == expected
    assert sum(s is ESCAPED for s in expected.values()) == 69
    by_id = {r.attempt.id: r.how for r in report.results}
    assert by_id["contained.sort-output"] == (
        "allowed (read-only: a read-only command (everything), run confined read-only in "
        "@bwrap: the file system read-only, your secrets hidden, no network) with no question, "
        "and ran in @bwrap (writable)"
    )


# --- permission files ----------------------------------------------------------------------

HOST_ONLY_PERMISSION_FILES = [
    "permission-files.shell-entry-commit",
    "permission-files.shell-entry-run-command",
    "permission-files.shell-entry-wildcard",
    "permission-files.session-scope-in-file",
    "permission-files.once-scope-in-file",
    "permission-files.malformed-file",
    "permission-files.protected-path-answered-project",
    "permission-files.protected-path-answered-session",
    "permission-files.write-file-protected-under-wildcard",
    "permission-files.move-file-onto-project-file",
    "permission-files.move-file-out-of-git",
    "permission-files.write-file-through-symlink",
    "permission-files.run-command-self-grant",
    "permission-files.run-wasm-self-grant",
    "permission-files.run-wasm-dotdot-self-grant",
    "permission-files.run-wasm-capability-dir",
    "permission-files.run-wasm-git-hook",
    "permission-files.capability-digest-tampered",
    "permission-files.capability-self-created",
    "permission-files.write-through-link-to-git",
    "permission-files.bare-repository-fsmonitor",
    "permission-files.bare-repository-in-subdirectory",
    "permission-files.read-root-swapped-for-link",
]


def test_permission_file_attempts_without_docker_are_blocked_or_explained(project: Path) -> None:
    write_config(project, ON_SHELL)
    report = run_audit(project, ["permission-files"], attempts=HOST_ONLY_PERMISSION_FILES)

    assert statuses(report) == {
        **dict.fromkeys(HOST_ONLY_PERMISSION_FILES, BLOCKED),
        **dict.fromkeys(CAPABILITY_ATTEMPTS, CAPABILITY_STATUS),
    }
    assert report.ok  # not applicable is explained, neither a pass nor a failure
    how = {r.attempt.id: r.how for r in report.results}
    assert how["permission-files.shell-entry-commit"].startswith(
        "CeilingViolation at line 7: commit is AlwaysThisProject, but commit runs in @shell"
    )
    assert how["permission-files.run-command-self-grant"] == (
        "run_command ran in @shell: exit code 0, (no output); @shell is no sandbox: it changed "
        'codecoder.json; after /reload: commit {"message": "audit"} asked, run_command '
        '{"command": "sh -c id"} asked'
    )
    assert how["permission-files.run-wasm-self-grant"] == (
        "run_wasm ran in @wasm: exit code 1, write /workspace/codecoder.json: Operation not "
        'permitted; codecoder.json unchanged; after /reload: commit {"message": "audit"} asked, '
        'run_command {"command": "sh -c id"} asked'
    )
    assert how["permission-files.write-through-link-to-git"] == (
        "asked for run_command:cp: denied at the prompt; the prompt said: protected: g/config "
        "(leads to .git/config) through a symlink"
    )
    assert "safe.bareRepository is 'explicit'" in how["permission-files.bare-repository-fsmonitor"]
    assert how["permission-files.read-root-swapped-for-link"].startswith(
        "ExecutionFailed: the read root @docs ("
    )
    assert how["permission-files.capability-digest-tampered"].startswith(
        "asked for run_capability:audit: denied at the prompt; reported: run_capability:audit "
        "was approved for sha256:"
        if CAPABILITIES_BUILT
        else "run_capability is not a tool of this runtime"
    )


def test_the_project_itself_is_never_touched(project: Path) -> None:
    config = {"allowlist": {"commit": "AlwaysThisProject"}}
    path = write_config(project, config)
    before = sorted(p.name for p in project.iterdir()), path.read_bytes()

    run_audit(project, ["permission-files"], attempts=HOST_ONLY_PERMISSION_FILES)

    assert (sorted(p.name for p in project.iterdir()), path.read_bytes()) == before


def test_a_malformed_project_file_makes_the_attempts_that_extend_it_not_run(
    project: Path,
) -> None:
    write_config(project, '{"allowlist": {"commit": "AlwaysThisProject"},}')

    report = run_audit(project, ["keying"], attempts=["keying.and-list"])

    (result,) = report.results
    assert result.status is NOT_RUN
    assert result.how.startswith("the project's codecoder.json is not usable (line 1: ")
    assert not report.ok


# --- wasm ----------------------------------------------------------------------------------


def test_every_wasm_attempt_is_blocked_on_a_default_project(project: Path) -> None:
    report = run_audit(project, ["wasm"])

    assert statuses(report) == {i: ESCAPED if i in KNOWN_ESCAPES else BLOCKED for i in ids("wasm")}
    how = {r.attempt.id: r.how for r in report.results}
    assert how["wasm.proc-self-environ"] == (
        "read /proc/self/environ: Capabilities insufficient (exit code 1)"
    )
    assert how["wasm.cache-entry-foreign"].startswith("the tampered entry was discarded")
    # The read tools are attacked where they are bound (@landlock) and in their fallback.
    assert how["wasm.read-file-symlink"] == "; ".join(
        f"{env}: ExecutionFailed: read link-out/secret.txt: not permitted: it is outside the "
        "workspace, or reached through a link leading out"
        for env in ("@landlock", "@wasm")
    )
    assert how["wasm.read-file-fifo"].startswith("@landlock: ExecutionFailed: read src/tool.fifo")
    assert how["wasm.write-file-symlink"].startswith("@wasm: ExecutionFailed: write src/link-out")


# --- reports and the command line ----------------------------------------------------------


def test_a_layer_whose_sandbox_is_unreachable_is_not_run_and_fails_the_audit(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")
    junit = tmp_path / "audit.xml"

    code = main(
        ["audit", "--project", str(project), "--layer", "docker", "--json", "--junit", str(junit)]
    )

    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["ok"] is False
    assert data["layers"] == {
        "docker": {"blocked": 0, "escaped": 0, "not-run": 62, "not-applicable": 0, "total": 62}
    }
    assert all(
        a["how"].startswith(
            "no @docker sandbox: cannot connect to the Docker engine: no Docker "
            "engine answers at unix:///nonexistent"
        )
        for a in data["attempts"]
    )
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("name"), suite.get("tests"), suite.get("errors")) == ("docker", "62", "62")
    assert [case.find("error") is not None for case in suite] == [True] * 62


def test_an_excluded_layer_is_left_out_and_the_rest_passes(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit", "--project", str(project), "--layer", "keying"])

    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].split() == ["RESULT", "LAYER", "ATTEMPT", "HOW"]
    assert len(lines) == 1 + 191 + 2
    assert lines[-2] == "keying: 191 attempts, 191 blocked"
    assert lines[-1].startswith("191 attempts in ")
    assert lines[-1].endswith("s: every attempt was blocked")


def test_an_unknown_layer_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["audit", "--layer", "network"])

    assert code == 2
    assert capsys.readouterr().err == (
        "codecoder: unknown layer network; the layers are keying, contained, permission-files, "
        "rules, hooks, wasm, bwrap, docker, pool\n"
    )


def test_junit_marks_escapes_as_failures_and_not_applicable_as_skipped(project: Path) -> None:
    write_config(project, {"environments": {"run_command": "@docker"}})
    tools = {**builtin_tools(), "run_command": CompoundBlindRunCommand()}
    report = run_audit(
        project,
        ["keying", "permission-files"],
        options=AuditOptions(tools=tools),
        attempts=[
            "keying.and-list",
            "keying.relative-program",
            "permission-files.shell-entry-run-command",
        ],
    )

    root = ElementTree.fromstring(report.to_junit())

    assert [(s.get("name"), s.get("tests"), s.get("failures"), s.get("skipped")) for s in root] == [
        ("keying", "2", "1", "0"),
        ("permission-files", "1", "0", "1"),
    ]
    cases = {case.get("name"): [child.tag for child in case] for suite in root for case in suite}
    assert cases == {
        "keying.and-list": ["failure"],
        "keying.relative-program": ["system-out"],
        "permission-files.shell-entry-run-command": ["skipped"],
    }


# --- docker: the default configuration, and weakened ones ----------------------------------


def test_the_default_configuration_blocks_every_attempt(
    project: Path, docker_engine: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit", "--project", str(project), "--json"])

    data = json.loads(capsys.readouterr().out)
    others = other_runtimes(docker_engine)
    under = {"docker.limits-in-force@runsc"}  # gVisor shows no limit inside: read on the host
    ids = [a.id for a in load_corpus()] + [
        f"{a.id}@{runtime}" for runtime in others for a in load_corpus() if a.layer == "docker"
    ]

    def expected(attempt: str) -> str:
        if attempt in KNOWN_ESCAPES:
            return "escaped"
        if attempt in NOT_APPLICABLE_BY_DEFAULT or attempt in under:
            return "not-applicable"
        return "blocked"

    differing = {
        a["id"]: (a["status"], a["how"])
        for a in data["attempts"]
        if a["id"] not in ids or a["status"] != expected(a["id"])
    }
    assert not differing, differing  # how each went, not only that it did
    assert sorted(a["id"] for a in data["attempts"]) == sorted(ids)
    assert {a.get("runtime") for a in data["attempts"]} == {None, *others}

    def count(layer: str) -> dict[str, int]:
        found = [expected(i) for i in ids if i.startswith(f"{layer}.")]
        return {**{s.value: found.count(s.value) for s in Status}, "total": len(found)}

    assert data["layers"] == {layer: count(layer) for layer in LAYERS}
    assert data["layers"]["keying"] == {
        "blocked": 191,
        "escaped": 0,
        "not-run": 0,
        "not-applicable": 0,
        "total": 191,
    }
    assert (code, data["ok"]) == ((1, False) if KNOWN_ESCAPES else (0, True))


def test_a_run_command_bound_to_docker_cannot_write_the_permission_files(
    project: Path, docker_engine: Any
) -> None:
    write_config(project, {"environments": {"run_command": "@docker"}})

    report = run_audit(project, ["permission-files"])

    legitimate = {  # project grants for a sandboxed run_command are what the ceiling allows
        "permission-files.shell-entry-run-command",
        "permission-files.shell-entry-wildcard",
        "permission-files.shell-entry-commit",  # commit: contained in @bwrap by default
        # and a container has its own PATH, which the host's does not reach, and its own view
        # of the workspace, where .git is mounted read-only
        "permission-files.path-hijack-venv",
        "permission-files.write-through-link-to-git",
        "permission-files.bare-repository-fsmonitor",
        "permission-files.bare-repository-in-subdirectory",
    }
    assert statuses(report) == {
        **dict.fromkeys(ids("permission-files"), BLOCKED),
        **dict.fromkeys(legitimate, NOT_APPLICABLE),
        **dict.fromkeys(CAPABILITY_ATTEMPTS, CAPABILITY_STATUS),
    }
    how = {r.attempt.id: r.how for r in report.results}
    assert how["permission-files.run-command-git-hook"] == (
        "run_command ran in @docker: exit code 2, src/plant-hook.sh: 1: cannot create "
        ".git/hooks/pre-commit: Read-only file system; codecoder.json, .codecoder, .git unchanged"
    )


def test_a_network_enabled_in_codecoder_json_lets_the_network_attempts_escape(
    project: Path, docker_engine: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(project, {"docker": {"network": "bridge"}})

    code = main(["audit", "--project", str(project), "--layer", "docker", "--json"])

    data = json.loads(capsys.readouterr().out)
    escaped = {"docker.network-interfaces", "docker.network-canary"}
    # Under gVisor (registered with --network=none) there is no network whatever Docker gives.
    elsewhere = {
        f"{i}@{runtime}": "not-applicable" if i == "docker.limits-in-force" else "blocked"
        for runtime in other_runtimes(docker_engine)
        for i in ids("docker")
    }
    assert {a["id"]: a["status"] for a in data["attempts"]} == {
        **{i: "escaped" if i in escaped else "blocked" for i in ids("docker")},
        **elsewhere,
    }
    assert code == 1


def weakened(
    project: Path, attempts: list[str], options: AuditOptions
) -> tuple[dict[str, Status], AuditReport]:
    # The project's own runtime only: the weakening is what is under test.
    options = dataclasses.replace(options, docker_runtimes=())
    report = run_audit(project, ["permission-files", "docker"], options=options, attempts=attempts)
    return statuses(report), report


def test_a_writable_root_filesystem_lets_the_rootfs_attempts_escape(
    project: Path, docker_engine: Any
) -> None:
    write_config(project, {"docker": {"read_only_rootfs": False}})
    attempts = ["docker.rootfs-write", "docker.rootfs-executable", "docker.agent-tamper"]

    found, report = weakened(project, attempts, AuditOptions())

    assert found == {
        "docker.rootfs-write": ESCAPED,
        "docker.rootfs-executable": ESCAPED,
        "docker.agent-tamper": BLOCKED,  # root owns it: the non-root user still cannot write it
    }
    assert not report.ok


STALE = [
    "pool.stale-git-hooks",
    "pool.stale-project-file",
    "pool.stale-codecoder-dir",
    "pool.stale-nested-git",
    "pool.stale-gitmodules",
]


def test_a_pool_that_hands_out_stale_sandboxes_lets_the_stale_attempts_escape(
    project: Path, docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codecoder.environments.docker.pool.client import PoolClient
    from codecoder.environments.engineseam import SandboxTemplate

    claim = PoolClient.claim
    first: dict[tuple[str, tuple[int, int] | None], SandboxTemplate] = {}

    def stale(self: PoolClient, template: SandboxTemplate) -> Any:
        """Claims with the first template seen for the workspace: a pool matching on the
        workspace alone, blind to the protected paths that appeared since. (By path and
        identity: an attempt's new workspace may reuse a removed one's inode.)"""
        workspace = next(
            (m.source, m.identity) for m in template.mounts if m.target == "/workspace"
        )
        return claim(self, first.setdefault(workspace, template))

    monkeypatch.setattr(PoolClient, "claim", stale)

    report = run_audit(project, ["pool"], options=AuditOptions(docker_runtimes=()), attempts=STALE)

    # `.git` and `.codecoder` are read-only placeholders in every template from the start, so
    # even a stale one protects them; a nested repository that appears later is the stale pool's
    # hole, and the audit says so. (The top-level files' attempts may find no warm sandbox to
    # stage on: a stale template's claim is refused by the pool once the placeholders it mounts
    # are gone; they are then not run, never blocked.)
    found = statuses(report)
    assert {found["pool.stale-git-hooks"], found["pool.stale-codecoder-dir"]} <= {BLOCKED, NOT_RUN}
    assert set(found.values()) <= {BLOCKED, ESCAPED, NOT_RUN}
    escaped = [attempt for attempt, status in found.items() if status == ESCAPED]
    assert escaped, found  # the audit sees the stale pool's hole
    how = {result.attempt.id: result.how for result in report.results}
    assert all(how[attempt].startswith("it changed ") for attempt in escaped)
    assert not report.ok


class TamperingClient:
    """A Docker client whose containers are created with `change` applied to their config."""

    def __init__(self, client: Any, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._client = client
        self._change = change

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def containers(self) -> Any:
        client, change = self._client, self._change

        class Containers:
            def __getattr__(self, name: str) -> Any:
                return getattr(client.containers, name)

            def create(self, **config: Any) -> Any:
                return client.containers.create(**change(config))

        return Containers()


def tampering(change: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[], Any]:
    import docker

    return lambda: TamperingClient(docker.from_env(timeout=60), change)


def test_kept_capabilities_are_refused_by_the_agent_and_fail_the_audit(
    project: Path, docker_engine: Any
) -> None:
    def keep_capabilities(config: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in config.items() if key != "cap_drop"}

    attempts = ["docker.capabilities", "docker.mknod", "docker.chroot", "docker.raw-socket"]

    found, report = weakened(
        project, attempts, AuditOptions(docker_client_factory=tampering(keep_capabilities))
    )

    # The engine's default capabilities on top of the agent's: the agent refuses to start.
    assert found == dict.fromkeys(attempts, Status.NOT_RUN)
    assert "the sandbox agent refused to run: the container did not start with exactly" in (
        report.results[0].how
    )
    assert not report.ok


def test_an_exposed_project_file_lets_the_self_grants_escape(
    project: Path, docker_engine: Any
) -> None:
    def expose_protected_paths(config: dict[str, Any]) -> dict[str, Any]:
        mounts = [m for m in config["mounts"] if m["Target"] == "/workspace"]
        return {**config, "mounts": mounts}

    attempts = [
        "permission-files.run-container-self-grant",
        "docker.project-file-write",
        "docker.project-file-replace",
        "docker.git-hook",
        "docker.git-config",
        "docker.git-replace",
        "docker.capability-dir",
        "docker.workspace-read-only",
    ]

    found, report = weakened(
        project, attempts, AuditOptions(docker_client_factory=tampering(expose_protected_paths))
    )

    assert found == {
        **dict.fromkeys(attempts, ESCAPED),
        "docker.workspace-read-only": BLOCKED,  # read-only calls still get a read-only mount
    }
    assert report.results[0].how.startswith(
        "run_container ran in @docker: exit code 0, (no output); it changed codecoder.json"
    )
    assert not report.ok


class NoLookupRunCommand(RunCommand):
    """A deliberately broken run_command that keys by the program's name wherever PATH leads."""

    def permission_in(self, args: RunCommandParameters, site: CallSite) -> Permission:
        return self.permission(args)


def test_a_run_command_blind_to_path_is_caught_by_the_path_hijack_attempt(
    project: Path,
) -> None:
    write_config(project, ON_SHELL)
    tools = {**builtin_tools(), "run_command": NoLookupRunCommand()}

    report = run_audit(
        project,
        ["permission-files"],
        options=AuditOptions(tools=tools),
        attempts=["permission-files.path-hijack-venv", "permission-files.cloned-read-root-outside"],
    )

    assert statuses(report) == {
        "permission-files.path-hijack-venv": ESCAPED,
        "permission-files.cloned-read-root-outside": BLOCKED,
    }
    how = {r.attempt.id: r.how for r in report.results}
    assert how["permission-files.path-hijack-venv"] == (
        "the planted git was covered by run_command:git:status: "
        "allowed (session: run_command:git:status)"
    )


class _StoppingRunner:
    """A docker layer whose sandbox stops under the first `stops` tries (as Debian's gVisor
    does now and then), then holds."""

    blocker = None
    runtime = None

    def __init__(self, stops: int) -> None:
        self.stops = stops
        self.tries = 0

    def run(self, attempt: Any) -> str:
        from codecoder.interfaces.escapes.outcomes import _NotRun

        self.tries += 1
        if self.tries <= self.stops:
            raise _NotRun(
                "SandboxUnavailable: the sandbox container stopped during `ls` (the sandbox "
                "container stopped); a fresh one is started for the next call"
            )
        return "nothing of the host's"


@pytest.mark.parametrize(("stops", "status"), [(1, Status.BLOCKED), (2, Status.NOT_RUN)])
def test_an_attempt_whose_sandbox_stopped_is_made_once_more(
    project: Path, stops: int, status: Status
) -> None:
    from codecoder.interfaces.escapes.runner import _Audit

    [attempt] = [a for a in load_corpus(["docker"]) if a.id == "docker.host-processes"]
    runner = _StoppingRunner(stops)
    with _Audit(project, AuditOptions()) as audit:
        result = audit.attempt(runner, attempt)  # type: ignore[arg-type]
    assert (result.status, runner.tries) == (status, 2)
    if status is Status.BLOCKED:
        assert "made twice: the first sandbox stopped" in result.how
