"""The hooks layer (hooks.json): another agent's tool calls, as its host sends them to
`codecoder hook` (SPEC §8, "Hooks judge as strictly as calls"). Each attempt is a call the hook
must not allow in a headless host (nobody at the prompt): a fetch of a local or metadata
address or of a host the web policy denies, a write to the agent's own settings under a write
grant, another MCP server's tool taken for codecoder's, a command under rules that cannot be
read or from a subdirectory whose project denies it, a command after the host's git was given a
hook nobody saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codecoder.config import trust
from codecoder.config.project import PROJECT_FILE
from codecoder.environments.host.gitseen import GitGuard, GitSeen
from codecoder.interfaces.escapes.corpus import Attempt, HooksEntry
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped
from codecoder.interfaces.hooks import HookOptions, handle


class _HooksLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, HooksEntry)
        project = self.audit.fresh_dir("hooks").resolve()
        self._stage(entry, project)
        tool_input = json.loads(json.dumps(entry.input).replace("@PROJECT@", str(project)))
        event: dict[str, Any] = {
            "session_id": "audit",
            "cwd": str(project / entry.cwd),
            "hook_event_name": "PreToolUse" if entry.host == "claude-code" else "BeforeTool",
            "tool_name": entry.tool,
            "tool_input": tool_input,
            "tool_use_id": "audit-1",
        }
        if entry.mcp_context is not None:
            event["mcp_context"] = entry.mcp_context
        # Judged where the host's shell is least contained: on the host (`--host-shell`); the
        # default, contained in @bwrap, only narrows what these attempts can do.
        options = HookOptions(project=None, allow=entry.allow, sandbox=None, interactive=False)
        try:
            answer = handle(entry.host, event, options)
        finally:
            trust.forget(project)
        if entry.host == "claude-code":
            specific = answer.get("hookSpecificOutput", {})
            verdict, reason = (
                specific.get("permissionDecision"),
                specific.get("permissionDecisionReason"),
            )
        else:
            verdict, reason = answer.get("decision"), answer.get("reason")
        if verdict != "deny":
            _escaped(f"the hook answered {verdict!r}: {reason}")
        return f"denied: {reason}"

    def _stage(self, entry: HooksEntry, project: Path) -> None:
        GitSeen(project).path.unlink(missing_ok=True)  # an earlier attempt's look
        for relative, content in entry.files.items():
            path = project / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        for relative, target in entry.links.items():
            (project / relative).parent.mkdir(parents=True, exist_ok=True)
            (project / relative).symlink_to(target)
        (project / entry.cwd).mkdir(parents=True, exist_ok=True)
        if entry.config is not None or entry.text is not None:
            text = entry.text if entry.text is not None else json.dumps(entry.config)
            (project / PROJECT_FILE).write_text(text)
            if entry.config is not None:
                trust.record_trust(project, (project / PROJECT_FILE).read_bytes(), ())
        if entry.plant_hook:
            hooks = project / ".git" / "hooks"
            hooks.mkdir(parents=True, exist_ok=True)
            GitGuard(project).unseen()  # the first look: what the human had
            (hooks / "pre-commit").write_text("#!/bin/sh\ntouch PLANTED-RAN\n")
