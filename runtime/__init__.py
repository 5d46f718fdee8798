"""codecoder: a sandboxed tool-execution runtime for AI agents.

    import codecoder

    with codecoder.Runtime("path/to/project") as runtime, runtime.session() as session:
        outcome = session.call("run_command", {"command": "git status"})
        print(outcome.unwrap().output)

The names in `__all__` are the public API, stable across minor versions (semantic versioning;
docs/integrations/python.md documents them); the adapters for agent frameworks are
`codecoder.integrations.pydantic_ai`, `.openai_agents` and `.claude_agent_sdk`. Every other
module and name is private, whatever its spelling, and may change in any release.

The names are loaded when first used (PEP 562): `import codecoder` imports only the standard
library, because every `codecoder` command imports this package before it chooses whether the
warm decision server answers it (`codecoder.__main__`), and that choice must cost nothing.

This package (the folder runtime/) is the core: what decides whether a tool call may run, and
runs it where it is bound. Its packages, from the bottom layer up (each imports only from those
below it; pyproject.toml's import-linter contracts hold it so): `foundation` (errors, environment
tags and their ceilings, the decision value, protected paths, confined reads, state
directories), `auditlog`, `permissions` (keys, the program table, patterns, allowlists, the
lookup chain, the question), `config` (codecoder.json, the user's file, trust, capabilities),
`tools` (the 26 built-in tools), `telemetry` and `eventloop` (spans of calls; calls from an event
loop), `dispatcher` and `session` (a `Runtime` and its sessions), `evaluation` (deciding without
running), `interfaces` (the command line, the MCP server, the interactive session, the hooks of
other agents, the decision server) and `integrations` (the agent frameworks' adapters). The
environments the tools run in are `codecoder.environments`.
"""

TYPE_CHECKING = False  # not typing's: this module imports nothing it does not need
if TYPE_CHECKING:
    from codecoder.dispatcher import CallOutcome
    from codecoder.evaluation import Evaluation, aevaluate, evaluate
    from codecoder.eventloop import AsyncAsker
    from codecoder.foundation.ceiling import EnvironmentTag
    from codecoder.foundation.decision import Answer, Decision, Source
    from codecoder.foundation.errors import (
        AuditUnavailable,
        Cancelled,
        CeilingViolation,
        CodecoderError,
        ConfigError,
        DeniedByRule,
        DeniedByUser,
        ExecutionFailed,
        ExecutionTimeout,
        InvalidArguments,
        OutOfFuel,
        OutOfMemory,
        PermissionDenied,
        RulesUnreadable,
        SandboxUnavailable,
        ToolError,
        Unanswered,
        UnknownTool,
        UsageError,
    )
    from codecoder.permissions.prompt import Asker, AskRequest, Choice, fixed, non_interactive
    from codecoder.session import Runtime, Session
    from codecoder.tools.base import ToolDefinition, ToolResult

# Each public name, and the module that defines it.
_PUBLIC = {
    "Runtime": "codecoder.session",
    "Session": "codecoder.session",
    "CallOutcome": "codecoder.dispatcher",
    "ToolResult": "codecoder.tools.base",
    "ToolDefinition": "codecoder.tools.base",
    "Decision": "codecoder.foundation.decision",
    "Source": "codecoder.foundation.decision",
    "Answer": "codecoder.foundation.decision",
    "EnvironmentTag": "codecoder.foundation.ceiling",
    "AskRequest": "codecoder.permissions.prompt",
    "Choice": "codecoder.permissions.prompt",
    "Asker": "codecoder.permissions.prompt",
    "AsyncAsker": "codecoder.eventloop",
    "non_interactive": "codecoder.permissions.prompt",
    "fixed": "codecoder.permissions.prompt",
    "Evaluation": "codecoder.evaluation",
    "evaluate": "codecoder.evaluation",
    "aevaluate": "codecoder.evaluation",
    **{
        error: "codecoder.foundation.errors"
        for error in (
            "CodecoderError",
            "UsageError",
            "UnknownTool",
            "InvalidArguments",
            "PermissionDenied",
            "DeniedByRule",
            "RulesUnreadable",
            "DeniedByUser",
            "Unanswered",
            "CeilingViolation",
            "ConfigError",
            "ToolError",
            "ExecutionFailed",
            "ExecutionTimeout",
            "OutOfMemory",
            "OutOfFuel",
            "SandboxUnavailable",
            "AuditUnavailable",
            "Cancelled",
        )
    },
}

__all__ = [
    "Answer",
    "AskRequest",
    "Asker",
    "AsyncAsker",
    "AuditUnavailable",
    "CallOutcome",
    "Cancelled",
    "CeilingViolation",
    "Choice",
    "CodecoderError",
    "ConfigError",
    "Decision",
    "DeniedByRule",
    "DeniedByUser",
    "EnvironmentTag",
    "Evaluation",
    "ExecutionFailed",
    "ExecutionTimeout",
    "InvalidArguments",
    "OutOfFuel",
    "OutOfMemory",
    "PermissionDenied",
    "RulesUnreadable",
    "Runtime",
    "SandboxUnavailable",
    "Session",
    "Source",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "Unanswered",
    "UnknownTool",
    "UsageError",
    "aevaluate",
    "evaluate",
    "fixed",
    "non_interactive",
]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'codecoder' has no attribute {name!r}")
    import sys

    __import__(module)  # as an import statement does (-X importtime reports it)
    value = getattr(sys.modules[module], name)
    globals()[name] = value  # found once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
