"""The `codecoder` command line.

Exit codes: 0 success, 1 the tool failed (or `check` found an error), 2 usage, 3 permission
denied (`decide`: 0 allow, 3 deny, 4 it would ask), 130 interrupted by Ctrl-C, 143 ended by
SIGTERM. Every command that a script would read takes `--json`, and with `--json` an error is
JSON too: `{"ok": false, "error": {"type", "message"}}`.

An interruption stops the call in progress where it is: SIGTERM is turned into `Terminated` (a
KeyboardInterrupt) in the main thread, so both unwind the same way; @shell kills the command's
whole process group, @docker removes the container the command ran in, the dispatcher writes
the call's audit record with outcome `interrupted`, and the command exits without a traceback.

Imports are made where they are used: `decide`, `hook` and `exec` run on every tool call of
another agent, and `--version` should not load the tool catalogue.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from codecoder.runtime.interfaces.interruption import Terminated, interruptible
from codecoder.runtime.kernel.errors import (
    CodecoderError,
    ConfigError,
    InvalidArguments,
    PermissionDenied,
    ToolError,
    UsageError,
)

if TYPE_CHECKING:
    from codecoder.runtime.config.project import ProjectConfig
    from codecoder.runtime.dispatcher import CallOutcome
    from codecoder.runtime.permissions.prompt import Asker
    from codecoder.runtime.session import Runtime, Session

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DENIED, EXIT_WOULD_ASK = 0, 1, 2, 3, 4
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT, 128 + SIGTERM
ANSWERS = ("once", "session", "project", "deny")  # runtime.kernel.decision.Answer's values


class _Parser(argparse.ArgumentParser):
    """Argument errors are UsageErrors, so that `--json` reports them as JSON too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]
    try:
        args = _parser().parse_args(argv)
        code: int = args.handler(args)
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"codecoder: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except (UsageError, FileNotFoundError) as exc:
        _error(exc, as_json)
        return EXIT_USAGE
    except PermissionDenied as exc:
        _error(exc, as_json)
        return EXIT_DENIED
    except CodecoderError as exc:
        _error(exc, as_json)
        return EXIT_FAILED
    return code


def _error(exc: BaseException, as_json: bool) -> None:
    if as_json:
        error = {"type": type(exc).__name__, "message": str(exc)}
        print(json.dumps({"ok": False, "error": error}, ensure_ascii=False))
    else:
        from codecoder.runtime.kernel.display import visible

        print(f"codecoder: {visible(str(exc))}", file=sys.stderr)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("codecoder-runtime")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The command line's grammar, built once a process (the decision server builds it before
    it forks; parsing never changes it)."""
    parser = _Parser(
        prog="codecoder",
        description="A sandboxed tool-execution runtime for AI agents.",
    )
    parser.add_argument("--version", action="version", version=f"codecoder {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--project", type=Path, default=Path("."), help="project directory")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    def allow(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--allow",
            action="append",
            default=[],
            metavar="KEY",
            help="grant KEY (as `codecoder key` prints it) for this run only, like an "
            "AlwaysThisSession answer; repeatable",
        )

    p = command("tools", "list the tools, their category, environment and permission")
    p.set_defaults(handler=_tools)

    p = command("key", "show the permission key of a command or of any tool call")
    p.add_argument("--tool", default=None, help="the tool (default: run_command)")
    p.add_argument("input", help="the command line, or with --tool the arguments as JSON")
    p.set_defaults(handler=_key)

    p = command(
        "check",
        "validate codecoder.json and the user's file against the tools and the ceiling rule; "
        "show what the project file widens, whether it is trusted, and where each rule is from",
    )
    p.set_defaults(handler=_check)

    p = command(
        "trust",
        "show what the project's codecoder.json widens and trust it as it is now (its digest "
        "is recorded in the runtime's state directory; a changed file is untrusted again)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--show", action="store_true", help="only show what it widens; trust nothing")
    p.add_argument("--revoke", action="store_true", help="withdraw the trust given before")
    p.set_defaults(handler=_trust)

    p = command("call", "run one tool call through the whole permission chain")
    p.add_argument("tool")
    p.add_argument(
        "arguments",
        nargs="?",
        default="{}",
        help="the arguments as a JSON object; - reads them from stdin, @FILE from FILE",
    )
    allow(p)
    p.add_argument(
        "--answer",
        choices=ANSWERS,
        help="answer any permission prompt with this (ceilings still apply)",
    )
    p.add_argument(
        "--non-interactive", action="store_true", help="never ask: anything not granted is denied"
    )
    p.set_defaults(handler=_call)

    p = command("replay", "replay a recorded run: one session, one call per JSON line")
    p.add_argument("file", type=Path, help='JSON lines {"tool", "args", "answer"?}; - for stdin')
    allow(p)
    p.set_defaults(handler=_replay)

    p = command(
        "decide",
        "show what the permission chain decides for a call, without running or recording it",
    )
    p.add_argument("tool")
    p.add_argument(
        "arguments", nargs="?", default="{}", help="the arguments as JSON; - for stdin, @FILE"
    )
    allow(p)
    p.set_defaults(handler=_decide)

    p = command("hook", "answer another agent's permission hook (JSON on stdin and stdout)")
    p.add_argument("host", choices=["claude-code", "gemini"], help="the agent calling the hook")
    allow(p)
    p.add_argument(
        "--sandbox",
        choices=["docker"],
        help="rewrite shell commands to run in codecoder's @docker sandbox (`codecoder exec`)",
    )
    p.add_argument(
        "--mcp-server",
        default="codecoder",
        metavar="NAME",
        help="the name codecoder's MCP server has in the host (its tools are allowed here)",
    )
    p.add_argument(
        "--non-interactive",
        action="store_true",
        help="nobody answers the host's prompt (claude -p, gemini -p): deny what would be "
        "asked (implied by CI=true)",
    )
    p.set_defaults(handler=_hook)

    p = command("exec", "run a command in the @docker sandbox through the permission chain")
    allow(p)
    p.add_argument("--hook", metavar="HOST:SESSION", help="the host session a hook rewrote for")
    p.add_argument("--approved", metavar="TOKEN", help="the one-time token of the host's question")
    p.add_argument("command_line", metavar="COMMAND", help="the command line (after --)")
    p.set_defaults(handler=_exec)

    p = command("allowlist", "list the project's grants and deny rules, or revoke a grant")
    p.add_argument("action", choices=["list", "revoke"])
    p.add_argument("key", nargs="?", help="the entry to revoke")
    p.set_defaults(handler=_allowlist)

    p = command("serve", "serve the tools over MCP (stdio), asking through elicitation")
    allow(p)
    p.set_defaults(handler=_serve)

    p = command("schema", "export the tool definitions for an LLM API, ready to paste")
    p.add_argument(
        "--format",
        required=True,
        choices=["openai", "openai-responses", "anthropic", "mcp"],
        help="the API",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="schemas for the providers' strict mode (optional fields become nullable)",
    )
    p.set_defaults(handler=_schema)

    p = command("session", "an interactive session: call tools, answer prompts, /reload")
    p.set_defaults(handler=_session)

    p = command("reload", "apply codecoder.json to the project's running servers (SIGHUP)")
    p.set_defaults(handler=_reload)

    p = command("audit", "run the sandbox escape-attempt suite against the project's configuration")
    p.add_argument(
        "--layer",
        action="extend",
        nargs="+",
        metavar="LAYER",
        help="only these layers: keying, permission-files, wasm, docker (default: all)",
    )
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML to FILE")
    p.set_defaults(handler=_audit)

    p = command(
        "image",
        "make any local image a @docker sandbox image (the agent, runas and the user added), "
        "or print the Dockerfile that does",
    )
    p.add_argument("action", choices=["build", "dockerfile"])
    p.add_argument("--from", dest="base", required=True, metavar="IMAGE", help="the base image")
    p.add_argument("--tag", help="the new image's name (default: codecoder-sandbox-<base>)")
    p.set_defaults(handler=_image)
    return parser


def _out(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _usage(message: str) -> NoReturn:
    raise UsageError(message)


def _runtime(args: argparse.Namespace, asker: Asker | None = None) -> Runtime:
    from codecoder.runtime.permissions.prompt import non_interactive
    from codecoder.runtime.session import Runtime

    return Runtime(args.project, asker=asker or non_interactive)


def _granted(session: Session, args: argparse.Namespace) -> Session:
    """The session with the run's `--allow` keys granted (each checked as a session grant)."""
    for key in args.allow:
        session.grant(key)
    return session


def _tools(args: argparse.Namespace) -> int:
    from codecoder.runtime.tools.catalogue import CHILD_TOOLSET

    runtime = _runtime(args)
    rows = [
        {
            "name": d.name,
            "category": d.category.value,
            "environment": d.environment.value,
            "permission": "ask" if d.needs_permission else "none",
            "description": d.description,
            "child": d.name in CHILD_TOOLSET,
        }
        for d in runtime.definitions()
    ]
    if args.json:
        _out(rows)
    else:
        for row in rows:
            print(
                f"{row['name']:<18} {row['category']:<8} {row['environment']:<9} "
                f"{row['permission']:<5} {row['description']}"
            )
    return EXIT_OK


def _key(args: argparse.Namespace) -> int:
    from codecoder.runtime.dispatcher import validate_arguments
    from codecoder.runtime.permissions.commandkey import key_command
    from codecoder.runtime.permissions.keys import CallSite

    if args.tool is None:
        keyed = key_command(args.input) if args.input.strip() else _usage("the command is blank")
        command_key = keyed.permission_key("run_command")
        data: dict[str, Any] = {
            "tool": "run_command",
            "key": command_key.raw,
            "compound": keyed.compound,
            "argv": list(keyed.argv) if keyed.argv is not None else None,
            "reason": keyed.reason,
            "protected": keyed.protected,
            "grants": [
                {"entry": level.entry, "covers": level.covers} for level in command_key.levels
            ],
        }
    else:
        runtime = _runtime(args)
        tool = runtime.tools.get(args.tool) or _usage(f"unknown tool {args.tool!r}")
        params = validate_arguments(tool, _json_arg(args.input, "arguments"))
        site = CallSite(runtime.project_dir, runtime.environment_of(tool.name))
        key = tool.permission_in(params, site).key
        data = {
            "tool": tool.name,
            "permission": "ask" if key else "none",
            "key": key.raw if key else None,
            "compound": key.compound if key else False,
            "argv": list(key.argv) if key and key.argv is not None else None,
            "protected": key.protected if key else False,
            "environment": runtime.environment_of(tool.name).value,
            "grants": [
                {"entry": level.entry, "covers": level.covers}
                for level in (key.grant_levels if key else ())
            ],
        }
    if args.json:
        _out(data)
    else:
        print(data["key"] if data["key"] is not None else "(no permission needed)")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from codecoder.environments.docker.image import sandbox_status
    from codecoder.runtime.config.projectfile import Diagnostic, Severity, format_diagnostic
    from codecoder.runtime.kernel.display import visible

    runtime = _runtime(args)
    config = runtime.config
    docker = sandbox_status(config.docker)
    diagnostics = list(runtime.diagnostics)
    # What stops @docker is an error where the project chose the image or the runtime (its own
    # configuration is wrong); otherwise a warning, since a project need not use @docker.
    chosen = any(name in ("image", "runtime") for name, _ in config.file.docker)
    for problem in docker.problems if docker.reachable else ():
        line, column = config.file.position_of("/docker")
        severity: Severity = "error" if chosen else "warning"
        diagnostics.append(
            Diagnostic(
                severity, "docker_unavailable", problem, key="docker", line=line, column=column
            )
        )
    ok = not any(d.severity == "error" for d in diagnostics)
    if args.json:
        _out(
            {
                "ok": ok,
                "file": str(runtime.project_file),
                "user_file": str(config.user_file.path) if config.user_file else None,
                "trust": config.trust.to_json(),
                "rules": [rule.to_json() for rule in config.rules],
                "diagnostics": [d.to_json() for d in diagnostics],
                "docker": docker.to_json(),
            }
        )
        return EXIT_OK if ok else EXIT_FAILED
    for d in diagnostics:
        print(format_diagnostic(runtime.project_file, d))
    if config.rules:
        print("rules in effect:")
        for rule in config.rules:
            where = f"{rule.file}:{rule.line}" if rule.line else rule.file
            print(f"  {rule.kind:<15} {visible(rule.value)}  ({where})")
    print(visible(docker.describe()))
    print(f"{runtime.project_file}: " + ("ok" if ok else "errors found") + _trust_note(config))
    return EXIT_OK if ok else EXIT_FAILED


def _trust_note(config: ProjectConfig) -> str:
    from codecoder.runtime.config.trust import TrustState

    trust = config.trust
    count = len(trust.widenings)
    if trust.state is TrustState.UNTRUSTED:
        return (
            f"; not trusted: {count} widening(s) ignored (see `codecoder trust --show`, then "
            "`codecoder trust`)"
        )
    if trust.state is TrustState.TRUSTED:
        return f"; trusted ({count} widening(s) obeyed)"
    return ""


def _trust(args: argparse.Namespace) -> int:
    from codecoder.runtime.config.projectfile import exclusive_lock_of
    from codecoder.runtime.config.trust import digest_of, forget, record_trust
    from codecoder.runtime.kernel.display import visible

    runtime = _runtime(args)
    project = runtime.project_dir
    if args.revoke:
        removed = forget(project)
        if args.json:
            _out({"revoked": removed})
        else:
            withdrawn = "trust withdrawn" if removed else "nothing was trusted"
            print(f"{runtime.project_file}: {withdrawn}")
        return EXIT_OK
    config = runtime.config
    widenings = config.trust.widenings
    if args.json and (args.show or not widenings):
        _out({"file": str(runtime.project_file), **config.trust.to_json(), "recorded": False})
        return EXIT_OK
    if not args.json:
        print(f"{runtime.project_file} ({config.trust.state.value}):")
        for w in widenings:
            where = f"line {w.line}: " if w.line else ""
            print(f"  {where}{visible(w.what)}")
        if not widenings:
            print("  it widens nothing: there is nothing to trust")
    if args.show or not widenings:
        return EXIT_OK
    if not config.file.usable:
        # What cannot be read cannot have been reviewed. (Entries that are wrong in a readable
        # file, a ceiling violation or a forbidden read root, grant nothing, trusted or not.)
        print(
            "codecoder: codecoder.json is not usable; fix it first (`codecoder check`)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not args.yes:
        if not sys.stdin.isatty():
            _usage("trust asks for confirmation on a terminal; pass --yes to trust without it")
        answer = input("trust these, for this exact file? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing trusted")
            return EXIT_FAILED
    data = config.file.data or b""
    try:
        with exclusive_lock_of(runtime.project_file):
            # Exactly the bytes shown: a file changed since was not what the human reviewed.
            current = runtime.project_file.read_bytes()
            if current != data:
                print("codecoder: codecoder.json changed while it was shown; run trust again")
                return EXIT_FAILED
            record_trust(project, data, [w.what for w in widenings])
    except (OSError, ConfigError) as exc:
        print(f"codecoder: cannot record trust: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _out({"file": str(runtime.project_file), **config.trust.to_json(), "recorded": True})
    else:
        print(
            f"trusted {runtime.project_file} ({digest_of(data)[:16]}…); running servers apply "
            "it at `codecoder reload`"
        )
    return EXIT_OK


def _asker_for(args: argparse.Namespace) -> Asker:
    from codecoder.runtime.kernel.decision import Answer
    from codecoder.runtime.permissions.prompt import fixed, non_interactive
    from codecoder.runtime.session import default_asker

    if args.answer:
        return fixed(Answer(args.answer))
    if args.non_interactive:
        return non_interactive
    return default_asker()


def _call(args: argparse.Namespace) -> int:
    from codecoder.runtime.session import Runtime

    payload = _arguments(args.arguments)
    runtime = Runtime(args.project, asker=_asker_for(args))
    _report_config(runtime)
    progress = ProgressLine() if sys.stderr.isatty() else None
    try:
        with interruptible(), runtime.session() as session:
            outcome = _granted(session, args).call(args.tool, payload, progress=progress)
    finally:
        runtime.close()
        if progress is not None:
            progress.clear()
    _print_outcome(outcome, args.json)
    return exit_code(outcome)


class ProgressLine:
    """A long call's progress, as one line on stderr (a terminal) rewritten in place, and
    cleared when the call ends; a call that reports nothing writes nothing at all."""

    def __init__(self) -> None:
        self._shown = False

    def __call__(self, done: float, total: float | None, message: str | None) -> None:
        from codecoder.runtime.kernel.display import visible

        text = message or (f"{done:g}/{total:g}" if total else f"{done:g}")
        sys.stderr.write(f"\r\x1b[K{visible(text)[:200]}")
        sys.stderr.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._shown = False


def _arguments(text: str) -> Any:
    """A call's JSON arguments: given inline, `-` for stdin, `@FILE` for a file (no limit of
    the command line's length either way)."""
    if text == "-":
        return _json_arg(sys.stdin.read(), "arguments (stdin)")
    if text.startswith("@"):
        return _json_arg(_read(Path(text[1:])), f"arguments ({text[1:]})")
    return _json_arg(text, "arguments")


def _decide(args: argparse.Namespace) -> int:
    from codecoder.runtime.evaluation import evaluate
    from codecoder.runtime.kernel.display import visible

    payload = _arguments(args.arguments)
    with _runtime(args) as runtime:
        session = _granted(runtime.session(), args)
        verdict = evaluate(session, args.tool, payload)
    if args.json:
        _out(verdict.to_json())
    else:
        key = visible(verdict.key) if verdict.key else "(no permission needed)"
        print(f"{verdict.decision}  {key}  {verdict.environment.value}")
        print(f"  {visible(verdict.reason)}")
        if verdict.matched:
            print(f"  matched: {visible(verdict.matched)}")
        for violation in verdict.violations:
            print(f"  {visible(violation)}")
    return {"allow": EXIT_OK, "deny": EXIT_DENIED, "ask": EXIT_WOULD_ASK}[verdict.decision]


def _hook(args: argparse.Namespace) -> int:
    """One hook event from the host. Whatever goes wrong blocks the call (exit 2 with the
    reason on stderr, which both hosts read as "blocked"): a hook that cannot decide must not
    let a call through."""
    from codecoder.runtime.interfaces.hooks import HookOptions, handle
    from codecoder.runtime.permissions.prompt import in_ci

    options = HookOptions(
        project=args.project,
        allow=tuple(args.allow),
        sandbox=args.sandbox,
        mcp_server=args.mcp_server,
        interactive=not (args.non_interactive or in_ci()),
    )
    try:
        event = json.loads(sys.stdin.read())
        if not isinstance(event, dict):
            raise UsageError("the hook input is not a JSON object")
        answer = handle(args.host, event, options)
    except Exception as exc:
        print(f"codecoder hook: blocked: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if answer:
        print(json.dumps(answer, ensure_ascii=False))
    return EXIT_OK


def _exec(args: argparse.Namespace) -> int:
    """Run a command in @docker through the chain, as `--sandbox docker` hooks rewrite it:
    the command's own output and exit code, or a refusal on stderr (exit 3)."""
    from codecoder.runtime.interfaces.hooks import HOSTS, HookSessions
    from codecoder.runtime.kernel.decision import Answer, Decision, Source
    from codecoder.runtime.kernel.errors import DeniedByUser
    from codecoder.runtime.permissions.prompt import AskRequest
    from codecoder.runtime.session import Runtime, default_asker

    host_session: tuple[HookSessions, str] | None = None
    if args.hook:
        host, _, session_id = args.hook.partition(":")
        if host not in HOSTS or not session_id:
            _usage(f"--hook must be HOST:SESSION with HOST one of {', '.join(HOSTS)}")
        host_session = (HookSessions(args.project.resolve(), host), session_id)

    def approved(request: AskRequest) -> Answer:
        """The host's question, answered by the human there, is this call's only answer."""
        assert host_session is not None
        sessions, session_id = host_session
        if args.approved and sessions.redeem(session_id, args.approved, request.key):
            return Answer.ONCE
        reason = (
            "the host's approval for this call was already used, or was for another key"
            if args.approved
            else "nothing granted this key, and the host asked no question for it"
        )
        decision = Decision(
            False, Source.DENIED, request.tool, request.environment, request.key, reason=reason
        )
        raise DeniedByUser(f"{request.key} was not allowed ({reason})", decision)

    asker = approved if host_session is not None else default_asker()
    with Runtime(args.project, asker=asker) as runtime:
        session = _granted(runtime.session(), args)
        if host_session is not None:
            host_session[0].load_into(session, host_session[1])
        outcome = session.call("run_container", {"command": args.command_line})
    if args.json:
        _print_outcome(outcome, True)
        return exit_code(outcome)
    if outcome.result is not None:
        data = outcome.result.data
        sys.stdout.write(str(data.get("stdout", outcome.result.output)))
        sys.stderr.write(str(data.get("stderr", "")))
        code = data.get("exit_code")
        return code if isinstance(code, int) else exit_code(outcome)
    _print_outcome(outcome, False)
    return exit_code(outcome)


def exit_code(outcome: CallOutcome) -> int:
    error = outcome.error
    if error is None:
        return EXIT_OK if outcome.ok else EXIT_FAILED
    if isinstance(error, PermissionDenied):
        return EXIT_DENIED
    if isinstance(error, UsageError):
        return EXIT_USAGE
    return EXIT_FAILED


def _print_outcome(outcome: CallOutcome, as_json: bool) -> None:
    """One call's outcome on stdout (errors on stderr). On a terminal, tool output goes through
    `for_terminal()` and JSON is ASCII-escaped, so no escape sequence in it reaches the terminal."""
    from codecoder.runtime.kernel.display import for_terminal, visible

    if as_json:
        print(json.dumps(outcome.to_json(), ensure_ascii=not _is_terminal()))
        return
    decision = outcome.decision
    for violation in decision.violations if decision else ():
        if str(outcome.error).endswith(violation):
            continue
        print(f"codecoder: {visible(violation)}", file=sys.stderr)
    if outcome.result is not None:
        output = outcome.result.output
        if _is_terminal():
            output = for_terminal(output)
        sys.stdout.write(output)
        if not output.endswith("\n"):
            sys.stdout.write("\n")
    if outcome.error is not None:
        kind = (
            "permission denied"
            if isinstance(outcome.error, PermissionDenied)
            else "tool error"
            if isinstance(outcome.error, ToolError)
            else "error"
        )
        print(f"codecoder: {kind}: {visible(str(outcome.error))}", file=sys.stderr)


def _is_terminal() -> bool:
    return sys.stdout.isatty()


def _report_config(runtime: Runtime) -> None:
    from codecoder.runtime.config.projectfile import format_diagnostic
    from codecoder.runtime.config.trust import TrustState

    for d in runtime.diagnostics:
        print(format_diagnostic(runtime.project_file, d), file=sys.stderr)
    if not runtime.config.file.usable:
        print(
            "codecoder: codecoder.json is not usable: no grants are taken from it", file=sys.stderr
        )
    elif runtime.config.trust.state is TrustState.UNTRUSTED:
        print(f"codecoder: {runtime.project_file}{_trust_note(runtime.config)}", file=sys.stderr)


def _replay(args: argparse.Namespace) -> int:
    from codecoder.runtime.kernel.decision import Answer
    from codecoder.runtime.permissions.prompt import AskRequest
    from codecoder.runtime.session import Runtime

    text = sys.stdin.read() if str(args.file) == "-" else _read(args.file)
    current: list[Answer] = []

    def answer(request: AskRequest) -> Answer:
        return current[0] if current else Answer.DENY

    runtime = Runtime(args.project, asker=answer)
    _report_config(runtime)
    codes: list[int] = []
    try:
        with interruptible(), runtime.session() as session:
            _granted(session, args)
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                current.clear()
                try:
                    tool, call_args, given = _replay_line(line, number)
                except UsageError as exc:
                    codes.append(EXIT_USAGE)
                    row = {
                        "line": number,
                        "ok": False,
                        "error": {"type": type(exc).__name__, "message": str(exc)},
                    }
                    print(json.dumps(row) if args.json else f"line {number}: {exc}")
                    continue
                if given is not None:
                    current.append(given)
                outcome = session.call(tool, call_args)
                codes.append(exit_code(outcome))
                if args.json:
                    row = {"line": number, **outcome.to_json()}
                    print(json.dumps(row, ensure_ascii=not _is_terminal()))
                else:
                    print(f"--- line {number}: {tool}")
                    _print_outcome(outcome, False)
    finally:
        runtime.close()
    for code in (EXIT_USAGE, EXIT_DENIED, EXIT_FAILED):
        if code in codes:
            return code
    return EXIT_OK


def _replay_line(line: str, number: int) -> tuple[str, Any, Any]:
    from codecoder.runtime.kernel.decision import Answer

    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"line {number}: not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(row, dict) or not isinstance(row.get("tool"), str):
        raise UsageError(f'line {number}: expected {{"tool": NAME, "args": {{...}}}}')
    unknown = set(row) - {"tool", "args", "answer"}
    if unknown:
        raise UsageError(f"line {number}: unknown fields {sorted(unknown)}")
    answer = row.get("answer")
    if answer is not None and answer not in {a.value for a in Answer}:
        choices = ", ".join(a.value for a in Answer)
        raise UsageError(f"line {number}: answer must be one of {choices}")
    return row["tool"], row.get("args", {}), Answer(answer) if answer else None


def _allowlist(args: argparse.Namespace) -> int:
    from codecoder.runtime.config.projectfile import remove_allow_entry
    from codecoder.runtime.kernel.display import visible

    runtime = _runtime(args)
    if args.action == "revoke":
        if not args.key:
            _usage("allowlist revoke needs the KEY to revoke")
        try:
            removed = remove_allow_entry(runtime.project_file, args.key)
        except ConfigError as exc:
            print(f"codecoder: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if args.json:
            _out({"revoked": removed, "key": args.key})
        else:
            print(f"revoked {args.key}" if removed else f"{args.key} is not in the allowlist")
        return EXIT_OK if removed else EXIT_FAILED
    problems = {
        d.key: d
        for d in runtime.diagnostics
        if d.key and (d.severity == "error" or d.code == "untrusted") and d.file is None
    }
    entries = [
        {
            "key": e.pattern,
            "scope": e.scope,
            "line": e.line,
            "grants": e.grants and e.pattern not in problems,
            "problem": problems[e.pattern].code if e.pattern in problems else None,
        }
        for e in runtime.config.file.allowlist
    ]
    denies = [{"key": d.pattern, "line": d.line} for d in runtime.config.file.deny]
    if args.json:
        _out({"file": str(runtime.project_file), "allowlist": entries, "deny": denies})
    else:
        for e in entries:
            state = "grants" if e["grants"] else f"grants nothing ({e['problem'] or 'scope'})"
            print(f"allow  {visible(str(e['key']))}  {e['scope']}  [{state}]")
        for d in denies:
            print(f"deny   {visible(str(d['key']))}")
        if not entries and not denies:
            print("(no entries)")
    return EXIT_OK


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArguments(
            "(cli)", [(what, f"not valid JSON: {exc.msg} at column {exc.colno}")]
        ) from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


# The MCP server and the interactive session are imported when used: the `mcp` SDK takes
# about a second to import, which every other command would pay for nothing.


def _serve(args: argparse.Namespace) -> int:
    from codecoder.runtime.interfaces.mcp_server import serve

    return serve(args.project, allow=tuple(args.allow))


def _schema(args: argparse.Namespace) -> int:
    from codecoder.runtime.interfaces.schemas import export

    _out(export(_runtime(args).definitions(), args.format, strict=args.strict))
    return EXIT_OK


def _session(args: argparse.Namespace) -> int:
    from codecoder.runtime.interfaces.interactive import run_session

    with interruptible():
        return run_session(args.project)


def _reload(args: argparse.Namespace) -> int:
    from codecoder.runtime.config.projectfile import format_diagnostic
    from codecoder.runtime.interfaces.mcp_server import signal_servers

    runtime = _runtime(args)
    signalled = signal_servers(runtime.project_dir)
    diagnostics = runtime.diagnostics
    ok = not any(d.severity == "error" for d in diagnostics)
    if args.json:
        _out(
            {
                "ok": ok,
                "file": str(runtime.project_file),
                "signalled": signalled,
                "diagnostics": [d.to_json() for d in diagnostics],
            }
        )
    else:
        for d in diagnostics:
            print(format_diagnostic(runtime.project_file, d))
        if not runtime.config.file.usable:
            print("codecoder.json is not usable: no grants are taken from it")
        pids = ", ".join(str(pid) for pid in signalled)
        print(
            f"reloaded {len(signalled)} server(s) of {runtime.project_dir}: {pids}"
            if signalled
            else f"no running server of {runtime.project_dir} to reload"
        )
        print(f"{runtime.project_file}: " + ("ok" if ok else "errors found"))
    return EXIT_OK if ok else EXIT_FAILED


def _image(args: argparse.Namespace) -> int:
    # Imported when used: it loads the Docker SDK.
    from codecoder.environments.docker.image import build_sandbox_image, default_tag, dockerfile

    try:
        text = dockerfile(args.base)
    except ValueError as exc:
        _usage(str(exc))
    if args.action == "dockerfile":
        if args.json:
            _out({"base": args.base, "dockerfile": text})
        else:
            print(text, end="")
        return EXIT_OK
    tag = args.tag or default_tag(args.base)
    if not args.json:
        print(f"building {tag} from {args.base} (the agent from codecoder-sandbox)", flush=True)
    built = build_sandbox_image(args.base, tag)
    if args.json:
        _out({"ok": True, **built.to_json()})
    else:
        print(f"{built.tag}: {built.id}")
        if built.ready:
            print(built.ready)
        print(f'use it with "docker": {{"image": "{built.tag}"}} in codecoder.json (then trust it)')
    return EXIT_OK


def _audit(args: argparse.Namespace) -> int:
    # Imported when used, like the MCP server: the suite loads the Docker SDK and wasmtime.
    from codecoder.sandboxes.escapes.corpus import LAYERS
    from codecoder.sandboxes.escapes.report import table_header, table_row
    from codecoder.sandboxes.escapes.runner import run_audit

    unknown = sorted(set(args.layer or ()) - set(LAYERS))
    if unknown:
        _usage(f"unknown layer {', '.join(unknown)}; the layers are {', '.join(LAYERS)}")
    if not args.json:
        print(table_header(), flush=True)
    report = run_audit(
        args.project,
        args.layer,
        on_result=None if args.json else lambda result: print(table_row(result), flush=True),
    )
    if args.junit is not None:
        args.junit.write_text(report.to_junit(), encoding="utf-8")
    if args.json:
        _out(report.to_json())
    else:
        for line in report.summary():
            print(line)
    return EXIT_OK if report.ok else EXIT_FAILED
