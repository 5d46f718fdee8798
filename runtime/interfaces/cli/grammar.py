"""The command line's grammar: every command, its options, and the handler that runs it (in the
module of the command's concern), and how a command line is read against it (`parse`).

Options may stand anywhere before `--`, between the tool and its arguments as well
(`call read_file --json README.md`); every word after the first `--` is an argument, as
written (`call run_command -- ls --json -- x`). argparse alone matches positional arguments
greedily, before the options that follow them, and drops a `--` found among the arguments; so
`parse` reads the options first and then hands the rest to the positional arguments in order.
Completion (argcomplete) reads the same grammar."""

from __future__ import annotations

import argparse
import difflib
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from codecoder.foundation.errors import UsageError
from codecoder.interfaces.cli import (
    audit,
    bench,
    calling,
    catalogue,
    configuration,
    deciding,
    grants,
    images,
    log,
    serving,
    starting,
)

if TYPE_CHECKING:
    from codecoder.foundation.decision import Answer

# foundation.decision.Answer's values (tests/runtime/interfaces/test_cli.py checks them);
# `--answer` also takes codecoder.json's names for them (`_answer`).
ANSWERS = (
    *("once", "session", "session-program", "project", "project-program", "project-any"),
    *("every-project", "host-once", "host-session", "host-session-program", "deny"),
)
# foundation.decision.Source's values, what `codecoder log --source` filters by
# (tests/runtime/interfaces/test_cli_log.py checks them).
SOURCES = ("none", "deny", "project", "session", "once", "denied", "read-only")


def _answer(text: str) -> Answer:
    """`--answer` takes either vocabulary (`session`, `AlwaysThisSession`): Answer.parse."""
    from codecoder.foundation.decision import Answer

    try:
        return Answer.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """Argument errors are UsageErrors, so that `--json` reports them as JSON too.

    `lazy_epilog`, when set, makes the epilog when help is shown (a list of the tools needs
    the catalogue, which `decide` and `hook` must not import to parse their arguments)."""

    lazy_epilog: Callable[[], str] | None = None

    def error(self, message: str) -> NoReturn:
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:
            given, offered = choice.group(1), _CHOICES.findall(choice.group(2))
            close = difflib.get_close_matches(given, offered, n=1, cutoff=0.7)
            meant = f" (did you mean {close[0]}?)" if close else ""
            if self.prog == "codecoder":  # the command itself: the argument has no name
                message, what = "", "a command"
            else:
                message, what = message[: choice.start()], "a choice"
            message += f"{given!r} is not {what}{meant}; the choices are {', '.join(offered)}"
        raise UsageError(f"{self.prog}: {message}")

    def format_help(self) -> str:
        if self.lazy_epilog is not None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_CHOICES = re.compile(r"'([^']*)'")


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

    def command(name: str, help: str, **more: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, **more)
        p.add_argument(
            "--project",
            type=Path,
            default=None,
            help="project directory (default: the nearest directory upward holding "
            "codecoder.json, else the git repository's top level, else the current directory)",
        )
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
    p.set_defaults(handler=catalogue.tools)

    p = command("key", "show the permission key of a command or of any tool call")
    p.add_argument("--tool", default=None, help="the tool (default: run_command)")
    p.add_argument("input", help="the command line, or with --tool the arguments as JSON")
    p.set_defaults(handler=deciding.key)

    p = command(
        "check",
        "validate codecoder.json and the user's file against the tools and the ceiling rule; "
        "show what the project file widens, whether it is trusted, and where each rule is from",
    )
    p.set_defaults(handler=configuration.check)

    p = command(
        "trust",
        "show what the project's codecoder.json widens and trust it as it is now (its digest "
        "is recorded in the runtime's state directory; a changed file is untrusted again)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--show", action="store_true", help="only show what it widens; trust nothing")
    p.add_argument("--revoke", action="store_true", help="withdraw the trust given before")
    p.add_argument(
        "--git",
        action="store_true",
        help="instead: show what the workspace's git would run (hooks, configuration) that "
        "you have not seen, and accept it (host commands are refused until then)",
    )
    p.set_defaults(handler=configuration.trust)

    p = command(
        "call",
        "run one tool call through the whole permission chain",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    assert isinstance(p, _Parser)
    p.lazy_epilog = _call_epilog
    _tool_names(p.add_argument("tool", help="the tool to call (listed below)"))
    p.add_argument(
        "arguments",
        nargs="*",
        metavar="ARGUMENTS",
        help="the arguments as a JSON object; - reads them from stdin, @FILE from FILE; or, "
        "for a tool with one text argument, its text (`call read_file README.md`, "
        "`call run_command -- ls -la`)",
    )
    allow(p)
    answer = p.add_argument(
        "--answer",
        type=_answer,
        metavar="ANSWER",
        help="answer any permission prompt with this (ceilings still apply): once, session, "
        "project or deny, or codecoder.json's names Once, AlwaysThisSession, "
        "AlwaysThisProject",
    )
    # Completed with the short names only (the long ones are accepted, not offered).
    answer.completer = lambda **_: ["once", "session", "project", "deny"]  # type: ignore[attr-defined]
    p.add_argument(
        "--non-interactive", action="store_true", help="never ask: anything not granted is denied"
    )
    p.set_defaults(handler=calling.call)

    p = command("replay", "replay a recorded run: one session, one call per JSON line")
    p.add_argument("file", type=Path, help='JSON lines {"tool", "args", "answer"?}; - for stdin')
    allow(p)
    p.set_defaults(handler=calling.replay)

    p = command(
        "decide",
        "show what the permission chain decides for a call, without running or recording it",
    )
    _tool_names(p.add_argument("tool"))
    p.add_argument(
        "arguments",
        nargs="*",
        metavar="ARGUMENTS",
        help="the arguments as JSON; - for stdin, @FILE; or a tool's one text argument",
    )
    allow(p)
    p.set_defaults(handler=deciding.decide)

    p = command(
        "hook",
        "answer another agent's permission hook (JSON on stdin and stdout), or install it "
        "(`hook install claude-code|gemini|codex`)",
        conflict_handler="resolve",
    )
    p.add_argument(
        "host",
        choices=["claude-code", "gemini", "install"],
        help="the agent calling the hook, or `install`",
    )
    p.add_argument(
        "agent",
        nargs="?",
        choices=["claude-code", "gemini", "codex"],
        help="with install: the agent whose settings file gets codecoder's hook",
    )
    p.add_argument(
        "--project",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="the project (default: found from the cwd the host sends); with install: write "
        "the project's own settings file (of DIR, or the project found from here)",
    )
    p.add_argument(
        "--user",
        action="store_true",
        help="with install: write the user's own settings file (the default)",
    )
    p.add_argument(
        "--yes", action="store_true", help="with install: write without asking (the diff is shown)"
    )
    p.add_argument(
        "--print",
        action="store_true",
        help="with install: print the settings file as it would be written; write nothing",
    )
    allow(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--sandbox",
        choices=["bwrap", "docker"],
        default="bwrap",
        help="the sandbox the host's shell commands are rewritten to run in (`codecoder "
        "exec`): @bwrap (the default) or @docker",
    )
    where.add_argument(
        "--host-shell",
        action="store_true",
        help="leave the host's shell commands on the host, unconfined: judged as run_command "
        "on @shell (asked, never granted for the project)",
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
    p.set_defaults(handler=serving.hook)

    p = command("exec", "run a command in a sandbox (@docker, @bwrap) through the permission chain")
    allow(p)
    p.add_argument(
        "--sandbox",
        choices=["bwrap", "docker"],
        default="docker",
        help="where the command runs: run_container in @docker (the default) or run_command "
        "in @bwrap",
    )
    p.add_argument("--hook", metavar="HOST:SESSION", help="the host session a hook rewrote for")
    p.add_argument("--approved", metavar="TOKEN", help="the one-time token of the host's question")
    p.add_argument("command_line", metavar="COMMAND", help="the command line (after --)")
    p.set_defaults(handler=calling.exec_)

    p = command(
        "allowlist",
        "list every grant in force (codecoder.json, running servers and sessions, hooks) and "
        "the deny rules, or revoke a grant wherever it is kept",
    )
    p.add_argument("action", choices=["list", "revoke"])
    p.add_argument("key", nargs="?", help="the entry to revoke")
    p.set_defaults(handler=grants.allowlist)

    p = command("serve", "serve the tools over MCP (stdio), asking through elicitation")
    allow(p)
    p.set_defaults(handler=serving.serve)

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
    p.set_defaults(handler=catalogue.schema)

    p = command("session", "an interactive session: call tools, answer prompts, /reload")
    p.set_defaults(handler=serving.session)

    p = command("reload", "apply codecoder.json to the project's running servers (SIGHUP)")
    p.set_defaults(handler=serving.reload)

    p = command("log", "read the project's audit log: every call, its decision and how it ended")
    p.add_argument("--tool", action="append", metavar="TOOL", help="only this tool (repeatable)")
    p.add_argument("--decision", choices=["allow", "deny"], help="only allowed or refused calls")
    p.add_argument(
        "--source",
        choices=SOURCES,
        help="only calls decided so (a deny rule, a project or session grant, an answer, a"
        " read-only command …)",
    )
    p.add_argument(
        "--outcome",
        choices=[
            *("ok", "failed", "error", "denied", "invalid", "interrupted", "cancelled"),
            *("handed-over", "asked", "ran"),
        ],
        help="only calls that ended so",
    )
    p.add_argument("--since", metavar="WHEN", help="30s, 10m, 2h, 3d ago; 14:05; 2026-12-03T14:05")
    p.add_argument("--until", metavar="WHEN", help="the same forms as --since")
    p.add_argument(
        "--last",
        "-n",
        type=int,
        metavar="N",
        help=f"the last N records that match (default {log.DEFAULT_LAST}; with --json, all)",
    )
    p.add_argument(
        "--follow", "-f", action="store_true", help="then show new records as they come (Ctrl-C)"
    )
    p.set_defaults(handler=log.log)

    p = sub.add_parser(
        "bench",
        help="run the benchmarks (every area against its baseline; --help for their options)",
        add_help=False,
    )
    p.set_defaults(handler=bench.bench)

    p = command("audit", "run the sandbox escape-attempt suite against the project's configuration")
    p.add_argument(
        "--layer",
        action="extend",
        nargs="+",
        metavar="LAYER",
        help="only these layers: keying, contained, permission-files, rules, hooks, wasm, "
        "bwrap, docker, pool (default: all)",
    )
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML to FILE")
    p.set_defaults(handler=audit.audit)

    p = command(
        "image",
        "make any local image a @docker sandbox image (the agent, runas and the user added), "
        "or print the Dockerfile that does",
    )
    p.add_argument("action", choices=["build", "dockerfile"])
    p.add_argument("--from", dest="base", required=True, metavar="IMAGE", help="the base image")
    p.add_argument("--tag", help="the new image's name (default: codecoder-sandbox-<base>)")
    p.set_defaults(handler=images.image)

    p = command(
        "init",
        "write a commented starter codecoder.json for this project: its language and test "
        "command, and which environment runs commands here and why (never overwrites a file)",
    )
    p.add_argument("--print", action="store_true", help="print the file instead of writing it")
    p.set_defaults(handler=starting.init)

    p = command(
        "doctor",
        "check everything codecoder needs here (bubblewrap, Landlock, a contained command, the "
        "decision server, Docker and its image, gVisor, each agent's hook, PATH, the state "
        "directory), one line each with the fix; exit 1 when something used is broken",
    )
    p.set_defaults(handler=starting.doctor)

    p = command(
        "completion",
        "print the shell code that completes codecoder's commands, options and tool names",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=starting.completion_epilog(),
    )
    p.add_argument("shell", choices=starting.SHELLS)
    p.set_defaults(handler=starting.completion)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """`argv` read against the grammar: options anywhere before `--`, then the positional
    arguments in order (those before `--`, then every word after it). Errors are UsageErrors
    naming the command (`_Parser.error`); `--help` and `--version` print and exit."""
    parser = _parser()
    commands = _commands(parser)
    if not argv or argv[0] not in commands:
        return parser.parse_args(argv)  # help, the version, or the error naming the commands
    name, words = argv[0], argv[1:]
    command = commands[name]
    if name == "bench":
        # `bench` takes the benchmarks' options (their own parser reads them, --help included).
        args, rest = command.parse_known_args(words)
        args.command, args.passed_on = name, rest
        return args
    cut = words.index("--") if "--" in words else len(words)
    args, positional = _options(command, words[:cut])
    _positionals(command, args, [*positional, *words[cut + 1 :]])
    args.command, args.passed_on = name, []
    return args


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(
    command: argparse.ArgumentParser, words: list[str]
) -> tuple[argparse.Namespace, list[str]]:
    """The options among `words` (which hold no `--`) and the other words, in order; an
    option the command does not have is an error. argparse's own first pass of
    `parse_intermixed_args`: the positional arguments take nothing while the options are
    read (restored at once: the grammar is shared)."""
    positionals = [action for action in command._actions if not action.option_strings]
    saved = [(action, action.nargs, action.default) for action in positionals]
    try:
        for action in positionals:
            action.nargs = argparse.SUPPRESS
            action.default = argparse.SUPPRESS
        args, rest = command.parse_known_args(words)
    finally:
        for action, nargs, default in saved:
            action.nargs, action.default = nargs, default
    unknown = [word for word in rest if command._parse_optional(word) is not None]
    if unknown:
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args, rest


def _positionals(
    command: argparse.ArgumentParser, args: argparse.Namespace, words: list[str]
) -> None:
    """Hand `words` to the command's positional arguments in order, each checked and
    converted as argparse would (its choices, its type)."""
    left = list(words)
    missing: list[str] = []
    for action in command._actions:
        if action.option_strings:
            continue
        if action.nargs in (argparse.ZERO_OR_MORE, argparse.ONE_OR_MORE):
            if action.nargs == argparse.ONE_OR_MORE and not left:
                missing.append(_shown(action))
            value: Any = [_value(command, action, word) for word in left]
            left = []
        elif left:
            value = _value(command, action, left.pop(0))
        elif action.nargs == argparse.OPTIONAL:
            value = action.default
        else:
            missing.append(_shown(action))
            continue
        setattr(args, action.dest, value)
    if missing:
        command.error(f"the following arguments are required: {', '.join(missing)}")
    if left:
        command.error(f"unrecognized arguments: {' '.join(left)}")


def _value(command: argparse.ArgumentParser, action: argparse.Action, word: str) -> Any:
    try:
        value = command._get_value(action, word)
        command._check_value(action, value)
    except argparse.ArgumentError as exc:
        command.error(str(exc))  # as argparse reports it: `argument host: invalid choice: …`
    return value


def _shown(action: argparse.Action) -> str:
    return str(action.metavar or action.dest)


def complete() -> int:
    """Answer a completing shell (`_ARGCOMPLETE` is set: `codecoder completion`) from the
    grammar, and exit."""
    import argcomplete

    argcomplete.autocomplete(_parser(), always_complete_options=False)
    return 2  # autocomplete exits when it answered; reaching here means it did not


def _tool_names(argument: argparse.Action) -> None:
    """Complete a tool argument with the built-in tools' names (argcomplete reads
    `completer`)."""
    from codecoder.tools.names import BUILTIN_TOOL_NAMES

    argument.completer = lambda **_: sorted(BUILTIN_TOOL_NAMES)  # type: ignore[attr-defined]


def _call_epilog() -> str:
    """`call --help`'s examples and the built-in tools (the project's capabilities come on top:
    `codecoder tools`)."""
    from codecoder.tools.catalogue import builtin_tools

    # Each example's comment is a claim tests/test_docs_examples.py checks by running it, as
    # the docs' examples are (docs/writing-docs.md): in @bwrap, `git status` asks nothing.
    lines = [
        "examples (in a git repository holding a README.md; commands in @bwrap):",
        '  codecoder call read_file \'{"path": "README.md"}\'              # never asks',
        "  codecoder call run_command -- git status                      # never asks: read-only",
        '  codecoder call run_command \'{"command": "touch notes.txt"}\'   # asks in the terminal',
        "  codecoder call run_command --allow run_command:touch -- touch notes.txt",
        "  codecoder call run_command --non-interactive -- touch x       # exit 3: denied",
        "  codecoder call write_file @args.json --allow write_file:notes.txt  # JSON from a file",
        "  codecoder decide run_command -- git push                      # exit 4: it would ask",
        "",
        "a command's output is shown as it comes on a terminal; Ctrl-C stops it and keeps it.",
        "exit codes: 0 ok, 1 the tool failed, 2 usage, 3 denied, 130 interrupted.",
        "",
        "tools (environment, whether a call asks; `codecoder tools` for this project's):",
    ]
    for tool in builtin_tools().values():
        summary = tool.description.split(". ")[0].rstrip(".")
        if len(summary) > 46:
            summary = summary[:45] + "…"
        ask = "asks" if tool.asks else "never asks"
        lines.append(f"  {tool.name:<18} {tool.environment.value:<9} {ask:<10} {summary}")
    return "\n".join(lines)
