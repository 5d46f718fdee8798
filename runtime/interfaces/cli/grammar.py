"""The command line's grammar: every command, its options, and the handler that runs it (in the
module of the command's concern)."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import NoReturn

from codecoder.runtime.interfaces.cli import (
    audit,
    calling,
    catalogue,
    configuration,
    deciding,
    images,
    serving,
)
from codecoder.runtime.kernel.errors import UsageError

ANSWERS = ("once", "session", "project", "deny")  # runtime.kernel.decision.Answer's values


class _Parser(argparse.ArgumentParser):
    """Argument errors are UsageErrors, so that `--json` reports them as JSON too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


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
    p.set_defaults(handler=configuration.trust)

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
    p.set_defaults(handler=calling.call)

    p = command("replay", "replay a recorded run: one session, one call per JSON line")
    p.add_argument("file", type=Path, help='JSON lines {"tool", "args", "answer"?}; - for stdin')
    allow(p)
    p.set_defaults(handler=calling.replay)

    p = command(
        "decide",
        "show what the permission chain decides for a call, without running or recording it",
    )
    p.add_argument("tool")
    p.add_argument(
        "arguments", nargs="?", default="{}", help="the arguments as JSON; - for stdin, @FILE"
    )
    allow(p)
    p.set_defaults(handler=deciding.decide)

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
    p.set_defaults(handler=serving.hook)

    p = command("exec", "run a command in the @docker sandbox through the permission chain")
    allow(p)
    p.add_argument("--hook", metavar="HOST:SESSION", help="the host session a hook rewrote for")
    p.add_argument("--approved", metavar="TOKEN", help="the one-time token of the host's question")
    p.add_argument("command_line", metavar="COMMAND", help="the command line (after --)")
    p.set_defaults(handler=calling.exec_)

    p = command("allowlist", "list the project's grants and deny rules, or revoke a grant")
    p.add_argument("action", choices=["list", "revoke"])
    p.add_argument("key", nargs="?", help="the entry to revoke")
    p.set_defaults(handler=configuration.allowlist)

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

    p = command("audit", "run the sandbox escape-attempt suite against the project's configuration")
    p.add_argument(
        "--layer",
        action="extend",
        nargs="+",
        metavar="LAYER",
        help="only these layers: keying, permission-files, wasm, docker, pool (default: all)",
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
    return parser
