"""The `codecoder` command line.

Exit codes: 0 success, 1 the tool failed (or `check` found an error), 2 usage, 3 permission denied.
Every command that a script would read takes `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from runtime.commandkey import key_command
from runtime.decision import Answer
from runtime.dispatcher import CallOutcome, validate_arguments
from runtime.errors import (
    ConfigError,
    InvalidArguments,
    PermissionDenied,
    ToolError,
    UsageError,
)
from runtime.projectfile import Diagnostic, remove_allow_entry
from runtime.prompt import Asker, AskRequest, fixed, non_interactive, visible
from runtime.schemas import export
from runtime.session import Runtime, default_asker
from runtime.tools import CHILD_TOOLSET

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DENIED = 0, 1, 2, 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        print(f"codecoder: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        print(f"codecoder: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codecoder",
        description="A sandboxed tool-execution runtime for AI agents.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--project", type=Path, default=Path("."), help="project directory")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        return p

    p = command("tools", "list the tools, their category, environment and permission")
    p.set_defaults(handler=_tools)

    p = command("key", "show the permission key of a command or of any tool call")
    p.add_argument("--tool", default=None, help="the tool (default: run_command)")
    p.add_argument("input", help="the command line, or with --tool the arguments as JSON")
    p.set_defaults(handler=_key)

    p = command("check", "validate codecoder.json against the tools and the ceiling rule")
    p.set_defaults(handler=_check)

    p = command("call", "run one tool call through the whole permission chain")
    p.add_argument("tool")
    p.add_argument("arguments", nargs="?", default="{}", help="the arguments as a JSON object")
    p.add_argument(
        "--answer",
        choices=[a.value for a in Answer],
        help="answer any permission prompt with this (ceilings still apply)",
    )
    p.add_argument(
        "--non-interactive", action="store_true", help="never ask: anything not granted is denied"
    )
    p.set_defaults(handler=_call)

    p = command("replay", "replay a recorded run: one session, one call per JSON line")
    p.add_argument("file", type=Path, help='JSON lines {"tool", "args", "answer"?}; - for stdin')
    p.set_defaults(handler=_replay)

    p = command("allowlist", "list the project's grants and deny rules, or revoke a grant")
    p.add_argument("action", choices=["list", "revoke"])
    p.add_argument("key", nargs="?", help="the entry to revoke")
    p.set_defaults(handler=_allowlist)

    p = command("serve", "serve the tools over MCP (stdio), asking through elicitation")
    p.set_defaults(handler=_serve)

    p = command("schema", "export the tool definitions for an LLM API, ready to paste")
    p.add_argument(
        "--format", required=True, choices=["openai", "anthropic", "mcp"], help="the API"
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
    return parser


def _out(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _usage(message: str) -> NoReturn:
    raise UsageError(message)


def _runtime(args: argparse.Namespace, asker: Asker | None = None) -> Runtime:
    return Runtime(args.project, asker=asker or non_interactive)


def _tools(args: argparse.Namespace) -> int:
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
    if args.tool is None:
        keyed = key_command(args.input) if args.input.strip() else _usage("the command is blank")
        data: dict[str, Any] = {
            "tool": "run_command",
            "key": keyed.permission_key("run_command").raw,
            "compound": keyed.compound,
            "argv": list(keyed.argv) if keyed.argv is not None else None,
            "reason": keyed.reason,
            "protected": keyed.protected,
        }
    else:
        runtime = _runtime(args)
        tool = runtime.tools.get(args.tool) or _usage(f"unknown tool {args.tool!r}")
        params = validate_arguments(tool, _json_arg(args.input, "arguments"))
        key = tool.permission(params).key
        data = {
            "tool": tool.name,
            "permission": "ask" if key else "none",
            "key": key.raw if key else None,
            "compound": key.compound if key else False,
            "argv": list(key.argv) if key and key.argv is not None else None,
            "protected": key.protected if key else False,
            "environment": runtime.environment_of(tool.name).value,
        }
    if args.json:
        _out(data)
    else:
        print(data["key"] if data["key"] is not None else "(no permission needed)")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    runtime = _runtime(args)
    diagnostics = runtime.diagnostics
    ok = not any(d.severity == "error" for d in diagnostics)
    if args.json:
        _out(
            {
                "ok": ok,
                "file": str(runtime.project_file),
                "diagnostics": [d.to_json() for d in diagnostics],
            }
        )
    else:
        for d in diagnostics:
            print(format_diagnostic(runtime.project_file, d))
        print(f"{runtime.project_file}: " + ("ok" if ok else "errors found"))
    return EXIT_OK if ok else EXIT_FAILED


def format_diagnostic(path: Path, d: Diagnostic) -> str:
    where = f"{path}"
    if d.line is not None:
        where += f":{d.line}" + (f":{d.column}" if d.column is not None else "")
    return f"{where}: {d.severity}: [{d.code}] {visible(d.message)}"


def _asker_for(args: argparse.Namespace) -> Asker:
    if args.answer:
        return fixed(Answer(args.answer))
    if args.non_interactive:
        return non_interactive
    return default_asker()


def _call(args: argparse.Namespace) -> int:
    runtime = Runtime(args.project, asker=_asker_for(args))
    _report_config(runtime)
    payload = _json_arg(args.arguments, "arguments")
    try:
        with runtime.session() as session:
            outcome = session.call(args.tool, payload, progress=_progress_line())
    finally:
        runtime.close()
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")  # the progress line, if there was one
    _print_outcome(outcome, args.json)
    return exit_code(outcome)


def _progress_line() -> Callable[[float, float | None, str | None], None] | None:
    """A long call's progress, as one line on stderr rewritten in place (only on a terminal)."""
    if not sys.stderr.isatty():
        return None

    def show(done: float, total: float | None, message: str | None) -> None:
        text = message or (f"{done:g}/{total:g}" if total else f"{done:g}")
        sys.stderr.write(f"\r\x1b[K{visible(text)[:200]}")
        sys.stderr.flush()

    return show


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
    if as_json:
        print(json.dumps(outcome.to_json(), ensure_ascii=False))
        return
    decision = outcome.decision
    for violation in decision.violations if decision else ():
        if str(outcome.error).endswith(violation):
            continue
        print(f"codecoder: {visible(violation)}", file=sys.stderr)
    if outcome.result is not None:
        sys.stdout.write(outcome.result.output)
        if not outcome.result.output.endswith("\n"):
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


def _report_config(runtime: Runtime) -> None:
    for d in runtime.diagnostics:
        print(format_diagnostic(runtime.project_file, d), file=sys.stderr)
    if not runtime.config.file.usable:
        print(
            "codecoder: codecoder.json is not usable: no grants are taken from it", file=sys.stderr
        )


def _replay(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if str(args.file) == "-" else _read(args.file)
    current: list[Answer] = []

    def answer(request: AskRequest) -> Answer:
        return current[0] if current else Answer.DENY

    runtime = Runtime(args.project, asker=answer)
    _report_config(runtime)
    codes: list[int] = []
    try:
        with runtime.session() as session:
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
                    print(json.dumps({"line": number, **outcome.to_json()}, ensure_ascii=False))
                else:
                    print(f"--- line {number}: {tool}")
                    _print_outcome(outcome, False)
    finally:
        runtime.close()
    for code in (EXIT_USAGE, EXIT_DENIED, EXIT_FAILED):
        if code in codes:
            return code
    return EXIT_OK


def _replay_line(line: str, number: int) -> tuple[str, Any, Answer | None]:
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
        raise UsageError(f"line {number}: answer must be one of once, session, project, deny")
    return row["tool"], row.get("args", {}), Answer(answer) if answer else None


def _allowlist(args: argparse.Namespace) -> int:
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
    problems = {d.key: d for d in runtime.diagnostics if d.key and d.severity == "error"}
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
    from runtime.mcp_server import serve

    return serve(args.project)


def _schema(args: argparse.Namespace) -> int:
    _out(export(_runtime(args).definitions(), args.format))
    return EXIT_OK


def _session(args: argparse.Namespace) -> int:
    from runtime.interactive import run_session

    return run_session(args.project)


def _reload(args: argparse.Namespace) -> int:
    from runtime.mcp_server import signal_servers

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


def _audit(args: argparse.Namespace) -> int:
    # Imported when used, like the MCP server: the suite loads the Docker SDK and wasmtime.
    from runtime.audit_suite import LAYERS, run_audit, table_header, table_row

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
