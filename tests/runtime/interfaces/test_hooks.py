"""`codecoder hook claude-code|gemini` with the hosts' documented JSON, as real processes.

Claude Code: PreToolUse / PostToolUse / SessionEnd input, `hookSpecificOutput` answers.
Gemini CLI: BeforeTool / AfterTool / SessionEnd input, `decision` answers.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.interfaces.hooks import HookSessions, map_call
from codecoder.interfaces.installation import codecoder_command
from tests.conftest import write_config

REPO = Path(__file__).resolve().parents[3]
# The codecoder a hook names in the commands it rewrites: the one it runs as, by its path.
CODECODER = codecoder_command()[0]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(directory))
    return directory


def hook(
    host: str,
    event: dict[str, Any] | str,
    project: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> Any:
    env = {**{k: v for k, v in os.environ.items() if k != "CI"}, **(env or {})}
    # Most of these tests judge the host's own shell, on the host (`--host-shell`); the default,
    # contained in @bwrap, is what the `--sandbox` tests and test_hooks_contained.py judge.
    where = () if "--sandbox" in args else ("--host-shell",)
    proc = subprocess.run(
        [sys.executable, "-m", "codecoder", "hook", host, "--project", str(project), *where, *args],
        input=event if isinstance(event, str) else json.dumps(event),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    return proc


def answer(
    host: str, event: dict[str, Any], project: Path, *args: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    proc = hook(host, event, project, *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def claude(tool: str, tool_input: dict[str, Any], call: str = "t1", **kw: Any) -> dict[str, Any]:
    return {
        "session_id": kw.get("session", "s1"),
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/",
        "permission_mode": "default",
        "hook_event_name": kw.get("event", "PreToolUse"),
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": call,
    }


def gemini(tool: str, tool_input: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {
        "session_id": kw.get("session", "g1"),
        "transcript_path": "/tmp/t.json",
        "cwd": "/",
        "hook_event_name": kw.get("event", "BeforeTool"),
        "timestamp": "2026-12-03T00:00:00Z",
        "tool_name": tool,
        "tool_input": tool_input,
    }


def decision(out: dict[str, Any]) -> tuple[str, str]:
    specific = out["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    return specific["permissionDecision"], specific["permissionDecisionReason"]


def test_claude_code_a_command_is_asked_then_its_approval_holds_for_the_session(
    project: Path, state: Path
) -> None:
    first = answer("claude-code", claude("Bash", {"command": "git status"}), project)
    assert decision(first) == (
        "ask",
        "codecoder: run_command:git:status on @shell needs your approval; approving allows "
        "run_command:git:status (only `git status …` commands) for the rest of this Claude Code "
        "session, kept in codecoder's state directory (`codecoder allowlist revoke "
        "run_command:git:status` takes it back)",
    )
    # The host ran it: the human approved at the host's prompt.
    ran = claude("Bash", {"command": "git status"}, event="PostToolUse")
    assert answer("claude-code", ran, project) == {}
    again = answer(
        "claude-code", claude("Bash", {"command": "git status --short"}, call="t2"), project
    )
    assert decision(again)[0] == "allow"
    narrow = answer("claude-code", claude("Bash", {"command": "git log"}, call="t4"), project)
    assert decision(narrow)[0] == "ask"  # the grant names `git status`, as the question did
    other = answer(
        "claude-code", claude("Bash", {"command": "git status --short"}, session="s2"), project
    )
    assert decision(other)[0] == "ask"  # another host session has its own grants
    answer("claude-code", claude("Bash", {}, event="SessionEnd"), project)
    after = answer(
        "claude-code", claude("Bash", {"command": "git status --short"}, call="t3"), project
    )
    assert decision(after)[0] == "ask"  # dropped at the session's end


def test_a_call_the_host_did_not_run_grants_nothing(project: Path, state: Path) -> None:
    answer("claude-code", claude("Bash", {"command": "git status"}), project)
    # PostToolUse for another call id (or none at all): nothing was approved.
    answer(
        "claude-code", claude("Bash", {"command": "git status"}, "t9", event="PostToolUse"), project
    )
    again = answer("claude-code", claude("Bash", {"command": "git status"}, call="t2"), project)
    assert decision(again)[0] == "ask"


def test_deny_rules_refuse_even_inside_a_compound_command(project: Path, state: Path) -> None:
    write_config(project, {"deny": ["run_command:git:push"]})
    out = answer("claude-code", claude("Bash", {"command": "ls && git push origin"}), project)
    verdict, reason = decision(out)
    assert verdict == "deny"
    assert "deny rule 'run_command:git:push'" in reason


def test_reads_outside_the_workspace_are_never_allowed(
    project: Path, state: Path, tmp_path: Path
) -> None:
    (project / "notes.txt").write_text("hi\n")
    outside = tmp_path / "secret"
    outside.write_text("key\n")
    (project / "link").symlink_to(outside)
    inside = answer(
        "claude-code", claude("Read", {"file_path": str(project / "notes.txt")}), project
    )
    assert decision(inside)[0] == "allow"
    for path in (
        "/etc/passwd",
        str(project / "link"),
        str(project / ".." / "secret"),
        "~/.ssh/id_rsa",
    ):
        out = answer("claude-code", claude("Read", {"file_path": path}), project)
        # Refused, as codecoder refuses it (issue 32.6: it was asked).
        assert decision(out)[0] == "deny", path
    glob = answer("claude-code", claude("Glob", {"pattern": "../**/*"}), project)
    assert decision(glob)[0] == "deny"


def test_a_write_to_a_protected_path_is_asked_every_time(project: Path, state: Path) -> None:
    event = claude(
        "Write", {"file_path": str(project / ".git" / "hooks" / "pre-commit"), "content": "x"}
    )
    verdict, reason = decision(answer("claude-code", event, project))
    assert verdict == "ask" and "this call only" in reason
    answer("claude-code", {**event, "hook_event_name": "PostToolUse"}, project)
    assert decision(answer("claude-code", {**event, "tool_use_id": "t2"}, project))[0] == "ask"


def test_a_project_grant_for_a_sandboxed_tool_allows_without_asking(
    project: Path, state: Path
) -> None:
    write_config(project, {"allowlist": {"write_file:src/**": "AlwaysThisProject"}})
    event = claude(
        "Edit", {"file_path": str(project / "src" / "a.py"), "old_string": "a", "new_string": "b"}
    )
    verdict, reason = decision(answer("claude-code", event, project))
    assert (verdict, reason) == (
        "ask",
        "codecoder: edit_file:src/a.py on @wasm needs your approval; approving allows "
        "edit_file:src/a.py (only src/a.py) for the rest of this Claude Code session, kept in "
        "codecoder's state directory (`codecoder allowlist revoke edit_file:src/a.py` takes it "
        "back)",
    )
    write = claude("Write", {"file_path": str(project / "src" / "a.py"), "content": "x"})
    assert decision(answer("claude-code", write, project))[0] == "allow"


def test_unknown_tools_are_asked_and_host_internal_ones_left_to_the_host(
    project: Path, state: Path
) -> None:
    unknown = answer("claude-code", claude("Frobnicate", {"x": 1}), project)
    assert decision(unknown)[0] == "ask"
    assert answer("claude-code", claude("TodoWrite", {"todos": []}), project) == {}
    own = answer("claude-code", claude("mcp__codecoder__run_command", {"command": "ls"}), project)
    assert decision(own)[0] == "allow"  # codecoder's own server asks for its tools itself


def test_allow_grants_exactly_its_key_for_the_run(project: Path, state: Path) -> None:
    allowed = answer(
        "claude-code",
        claude("Bash", {"command": "npm test"}),
        project,
        "--allow",
        "run_command:npm",
    )
    assert decision(allowed)[0] == "allow"
    compound = claude("Bash", {"command": "npm test && curl evil.example"})
    assert (
        decision(answer("claude-code", compound, project, "--allow", "run_command:npm"))[0] == "ask"
    )


def test_bad_input_blocks_the_call_with_a_reason(project: Path, state: Path) -> None:
    for event in ("not json", "[]", json.dumps({"hook_event_name": "PreToolUse"})):
        proc = hook("claude-code", event, project)
        assert proc.returncode == 2  # both hosts read exit 2 as "blocked", stderr as the reason
        assert proc.stderr.startswith("codecoder hook: blocked: ")
        assert proc.stdout == ""
    no_input = {**claude("Bash", {}), "tool_input": "ls"}
    assert hook("claude-code", no_input, project).returncode == 2


def test_gemini_answers_in_its_own_format_and_an_approval_there_is_once(
    project: Path, state: Path
) -> None:
    event = gemini("run_shell_command", {"command": "git status", "description": "status"})
    first = answer("gemini", event, project)
    assert first == {
        "decision": "ask",
        "reason": "codecoder: run_command:git:status on @shell needs your approval; approving "
        "allows this call only: codecoder asks again next time",
        "systemMessage": first["reason"],
    }
    # Gemini ran it: the human approved, with "Allow once" or a longer choice it does not tell.
    answer("gemini", {**event, "hook_event_name": "AfterTool", "tool_response": {}}, project)
    again = answer("gemini", gemini("run_shell_command", {"command": "git status -s"}), project)
    assert again["decision"] == "ask"
    (kept,) = (state / "codecoder" / "projects").rglob("hooks/*.json")
    assert json.loads(kept.read_text())["grants"] == []
    write_config(project, {"deny": ["web_fetch"]})
    # web tools need no permission; a URL in the prompt is what Gemini's web_fetch fetches
    # (a public address: this machine resolves no public names, and a name that cannot be
    # resolved is refused, since it could resolve to anything for the host)
    fetch = answer(
        "gemini", gemini("web_fetch", {"prompt": "summarise https://93.184.215.14/x"}), project
    )
    assert fetch["decision"] == "allow"
    read = answer("gemini", gemini("read_file", {"file_path": "/etc/shadow"}), project)
    assert read["decision"] == "deny"  # codecoder never reads outside the workspace


@pytest.mark.parametrize("how", ["--non-interactive", "CI=true"])
def test_non_interactive_denies_what_it_would_ask_and_says_how_to_allow_it(
    project: Path, state: Path, how: str
) -> None:
    """Nobody answers a headless host's prompt (Gemini CLI would wait for ever on an ask)."""
    args = ("--non-interactive",) if how == "--non-interactive" else ()
    env = {"CI": "true"} if how == "CI=true" else {}
    out = answer(
        "gemini",
        gemini("run_shell_command", {"command": "npm run test:unit"}),
        project,
        *args,
        env=env,
    )
    assert out == {
        "decision": "deny",
        "reason": "codecoder: run_command:npm:run:test[:]unit on @shell needs approval, and nobody "
        "can answer here; to allow it for a run: codecoder hook --allow "
        "'run_command:npm:run:test[:]unit'",  # quoted: as a shell would take it
        "systemMessage": out["reason"],  # the person sees why, in Gemini's transcript
    }
    allowed = answer(
        "gemini",
        gemini("run_shell_command", {"command": "npm run test:unit"}),
        project,
        *args,
        "--allow",
        "run_command:npm:run:test[:]unit",
        env=env,
    )
    assert allowed["decision"] == "allow"
    outside = answer(
        "claude-code", claude("Read", {"file_path": "/etc/passwd"}), project, *args, env=env
    )
    assert decision(outside)[0] == "deny"
    protected = answer(
        "claude-code",
        claude("Write", {"file_path": ".git/config", "content": ""}),
        project,
        *args,
        env=env,
    )
    assert decision(protected) == (
        "deny",
        "codecoder: write_file:.git/config on @wasm needs approval, and nobody can answer here "
        "(a protected path: only a person can allow it, once)",
    )
    # Nothing was asked, so nothing can be granted when the host reports a run.
    assert not list((state / "codecoder").rglob("hooks/*.json"))


def test_sandbox_docker_rewrites_the_command_into_codecoder_exec(
    project: Path, state: Path
) -> None:
    write_config(project, {"allowlist": {"run_container:make": "AlwaysThisProject"}})
    out = answer(
        "claude-code",
        claude("Bash", {"command": "make test", "timeout": 5}),
        project,
        "--sandbox",
        "docker",
    )
    verdict, reason = decision(out)
    assert verdict == "allow" and "run_container:make:test (@docker)" in reason
    assert out["hookSpecificOutput"]["updatedInput"] == {
        "command": f"{CODECODER} exec --project={project} --hook=claude-code:s1 -- 'make test'",
        "timeout": 5,
    }
    asked = answer(
        "gemini",
        gemini("run_shell_command", {"command": "rm -rf build"}),
        project,
        "--sandbox",
        "docker",
    )
    assert asked["decision"] == "ask"
    rewritten = asked["hookSpecificOutput"]["tool_input"]["command"]
    assert rewritten.startswith(
        f"{CODECODER} exec --project={project} --hook=gemini:g1 --approved="
    )
    assert rewritten.endswith(" -- 'rm -rf build'")


def test_an_approval_token_is_good_once_and_only_for_its_key(project: Path, state: Path) -> None:
    sessions = HookSessions(project.resolve(), "gemini")
    token = sessions.ask(
        "g1", "c1", {"tool": "run_container", "key": "run_container:rm", "environment": "@docker"}
    )
    assert not sessions.redeem("g1", token, "run_container:curl")
    assert not sessions.redeem("g2", token, "run_container:rm")
    assert sessions.redeem("g1", token, "run_container:rm")
    assert not sessions.redeem("g1", token, "run_container:rm")


def test_a_session_grant_is_bound_to_the_environment_it_was_approved_in(
    project: Path, state: Path
) -> None:
    answer("claude-code", claude("Bash", {"command": "make"}), project)
    answer("claude-code", claude("Bash", {"command": "make"}, event="PostToolUse"), project)
    again = answer("claude-code", claude("Bash", {"command": "make"}, call="t2"), project)
    assert decision(again)[0] == "allow"  # on the host, where it was approved
    # The same command in the sandbox (run_container in @docker) was never approved.
    boxed = claude("Bash", {"command": "make"}, call="t3")
    out = answer("claude-code", boxed, project, "--sandbox", "docker")
    assert decision(out)[0] == "ask"


def test_map_call_resolves_paths_and_refuses_nul_and_escapes(project: Path) -> None:
    assert map_call("Read", {"file_path": "a/../b.txt"}, project).args == {"path": "b.txt"}
    assert map_call("Read", {"file_path": "a\x00b"}, project).tool is None
    assert map_call("Read", {"file_path": "../x"}, project).tool is None
    assert map_call("Bash", {"command": "ls", "dir_path": "/"}, project).tool is None
    assert map_call("Bash", {"command": 5}, project).tool is None


# --- --sandbox bwrap ------------------------------------------------------------------------------


def exec_rewritten(command: str, project: Path) -> subprocess.CompletedProcess[str]:
    """Run the `codecoder exec …` a hook rewrote a shell command into, as the host would."""
    words = shlex.split(command)
    assert words[:2] == [CODECODER, "exec"]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *words[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=project,
    )


def test_sandbox_bwrap_allows_a_read_only_command_and_rewrites_it_to_run_contained(
    project: Path, state: Path
) -> None:
    for command in ("git status", "ls -la", "cat README.md | head -5", "grep -rn x . | wc -l"):
        out = answer(
            "claude-code", claude("Bash", {"command": command}), project, "--sandbox", "bwrap"
        )
        verdict, reason = decision(out)
        assert verdict == "allow"
        assert "(@bwrap) is allowed: a read-only command" in reason
        assert out["hookSpecificOutput"]["updatedInput"] == {
            "command": f"{CODECODER} exec --project={project} --hook=claude-code:s1 "
            f"--sandbox=bwrap -- {shlex.quote(command)}"
        }


def test_hook_input_after_harmless_assignments_is_keyed_as_the_command_alone(
    project: Path, state: Path
) -> None:
    write_config(project, {"allowlist": {"run_command:npm:test": "AlwaysThisProject"}})
    for command, why in (
        ("LANG=C ls -la", "a read-only command"),
        ("TZ=UTC npm test", "run_command:npm:test"),
    ):
        out = answer(
            "claude-code", claude("Bash", {"command": command}), project, "--sandbox", "bwrap"
        )
        verdict, reason = decision(out)
        assert verdict == "allow" and why in reason, reason
    asked = answer(
        "gemini",
        gemini("run_shell_command", {"command": "NODE_OPTIONS=--require=./x.js npm test"}),
        project,
        "--sandbox",
        "bwrap",
    )
    assert asked["decision"] == "ask"
    assert 'run_command:"NODE_OPTIONS=--require=./x.js npm test"' in asked["reason"]


def test_sandbox_bwrap_asks_for_a_contained_command_and_a_grant_for_the_project_holds(
    project: Path, state: Path
) -> None:
    asked = answer(
        "gemini",
        gemini("run_shell_command", {"command": "npm test"}),
        project,
        "--sandbox",
        "bwrap",
    )
    assert asked["decision"] == "ask"
    assert asked["reason"] == (
        "codecoder: `npm test` — run_command:npm:test on @bwrap needs your approval; approving "
        "allows this call only: codecoder asks again next time"
    )
    assert " --sandbox=bwrap --approved=" in asked["hookSpecificOutput"]["tool_input"]["command"]
    write_config(project, {"allowlist": {"run_command:*": "AlwaysThisProject"}})
    granted = answer(
        "gemini",
        gemini("run_shell_command", {"command": "npm test"}),
        project,
        "--sandbox",
        "bwrap",
    )
    assert granted["decision"] == "allow"
    without = answer("gemini", gemini("run_shell_command", {"command": "npm test"}), project)
    assert without["decision"] == "ask"  # run_command:* is for @bwrap, not for the host


def test_sandbox_bwrap_escalates_only_through_the_hosts_question(
    project: Path, state: Path, tmp_path: Path
) -> None:
    """`git ls-remote` needs the host (it talks to a remote): the host's question says that
    approving runs it unconfined; the approval's token runs it once on @shell, audited as an
    escalation, and the host's report of the run makes it a session grant bound to @shell."""
    remote = tmp_path / "remote"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    command = f"git ls-remote {remote}"
    out = answer("claude-code", claude("Bash", {"command": command}), project, "--sandbox", "bwrap")
    verdict, reason = decision(out)
    assert verdict == "ask"
    assert reason.startswith(
        f"codecoder: `{command}` — run_command:git:ls-remote would run contained in @bwrap and "
        "would likely fail (git ls-remote talks to a remote repository, with your network and "
        "credentials"
    )
    assert reason.endswith(
        "approving runs it on the host instead, unconfined (@shell), for the rest of this session"
    )
    rewritten = out["hookSpecificOutput"]["updatedInput"]["command"]
    assert " --sandbox=bwrap --approved=" in rewritten
    # Without the token (as the model would write it), nothing runs on the host.
    plain = rewritten.split(" --approved=")[0] + f" -- {shlex.quote(command)}"
    refused = exec_rewritten(plain, project)
    assert refused.returncode == 3, refused.stderr
    ran = exec_rewritten(rewritten, project)
    assert ran.returncode == 0, ran.stderr
    again = exec_rewritten(rewritten, project)  # a token is good once
    assert again.returncode == 3
    audit = [
        json.loads(line)
        for path in (state / "codecoder").rglob("audit.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert [(r["decision"], r["environment"], r.get("escalated_from")) for r in audit] == [
        ("deny", "@bwrap", None),
        ("allow", "@shell", "@bwrap"),
        ("deny", "@bwrap", None),
    ]
    # The host ran it: from now on in this host session, on the host without a question.
    answer("claude-code", claude("Bash", {"command": command}, event="PostToolUse"), project)
    later = answer(
        "claude-code",
        claude("Bash", {"command": command}, call="t2"),
        project,
        "--sandbox",
        "bwrap",
    )
    verdict, reason = decision(later)
    assert (
        verdict == "allow" and "(@shell) is allowed: session grant to run it on the host" in reason
    )
    assert (
        exec_rewritten(later["hookSpecificOutput"]["updatedInput"]["command"], project).returncode
        == 0
    )
    other = answer(
        "claude-code",
        claude("Bash", {"command": command}, session="s2"),
        project,
        "--sandbox",
        "bwrap",
    )
    assert decision(other)[0] == "ask"


def test_sandbox_bwrap_without_anyone_to_answer_denies_the_escalation(
    project: Path, state: Path
) -> None:
    out = answer(
        "claude-code",
        claude("Bash", {"command": "git push"}),
        project,
        "--sandbox",
        "bwrap",
        "--non-interactive",
    )
    verdict, reason = decision(out)
    assert verdict == "deny"
    assert reason.startswith("codecoder: run_command:git:push on @bwrap needs approval")


def test_the_users_own_claude_settings_grant_where_codecoder_would_ask(
    project: Path, state: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {
                    "allow": ["Bash(ls:*)", "Bash(npm test)", "Bash(git:*)", "Read", "Write"]
                }
            }
        )
    )
    # A project's own settings are not the user's word: its rule grants nothing.
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(touch:*)"]}})
    )
    write_config(project, {"deny": ["run_command:git:push"]})
    env = {"HOME": str(home)}

    def verdict(command: str) -> tuple[str, str]:
        return decision(
            answer("claude-code", claude("Bash", {"command": command}), project, env=env)
        )

    assert verdict("ls -la src") == (
        "allow",
        "codecoder: run_command:ls (@shell) is allowed by your own ~/.claude/settings.json "
        "(Bash(ls:*))",
    )
    assert verdict("npm test")[0] == "allow"
    for asked in ("npm test --watch", "ls && rm -rf src", "ls $(rm -rf src)", "touch x"):
        assert verdict(asked)[0] == "ask", asked
    assert verdict("git push origin main")[0] == "deny"  # codecoder's deny rule still holds
    # `git -c` runs what it names (it could be a push): refused, whatever Bash(git:*) says.
    assert verdict("git -c core.pager=sh log")[0] == "deny"
    assert verdict("find . -exec rm {} +")[0] == "ask"  # not simple, and not the user's rule
    planted = claude("Write", {"file_path": ".git/hooks/pre-commit", "content": "x"})
    assert decision(answer("claude-code", planted, project, env=env))[0] == "ask"
    notes = claude("Write", {"file_path": "notes.md", "content": "x"})
    assert decision(answer("claude-code", notes, project, env=env))[0] == "allow"
    # What the user's rule allowed is not remembered as codecoder's grant.
    (kept,) = (state / "codecoder" / "projects").rglob("hooks/*.json")
    assert json.loads(kept.read_text())["grants"] == []


def test_the_users_own_gemini_settings_and_policies_grant_where_codecoder_would_ask(
    project: Path, state: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".gemini" / "policies").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"tools": {"allowed": ["run_shell_command(git log)"]}})
    )
    (home / ".gemini" / "policies" / "auto-saved.toml").write_text(
        '[[rule]]\ntoolName = "run_shell_command"\ncommandPrefix = "touch"\n'
        'decision = "allow"\npriority = 100\n\n'
        '[[rule]]\ntoolName = "run_shell_command"\nargsPattern = "rm"\ndecision = "allow"\n'
    )
    env = {"HOME": str(home)}

    def verdict(command: str) -> dict[str, Any]:
        return answer("gemini", gemini("run_shell_command", {"command": command}), project, env=env)

    assert verdict("git log -3") == {
        "decision": "allow",
        "reason": "codecoder: run_command:git:log (@shell) is allowed by your own "
        "~/.gemini/settings.json (run_shell_command(git log))",
    }
    assert verdict("touch made")["reason"].endswith(
        "allowed by your own ~/.gemini/policies/auto-saved.toml (auto-saved.toml: "
        "run_shell_command 'touch')"
    )
    for asked in ("git status", "rm -rf src", "touch a; rm -rf src"):
        assert verdict(asked)["decision"] == "ask", asked


def test_with_sandbox_docker_a_users_rule_lets_codecoder_exec_run_it_once(
    project: Path, state: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"permissions": {"allow": ["Bash(ls:*)"]}}')
    out = answer(
        "claude-code",
        claude("Bash", {"command": "ls -la"}),
        project,
        "--sandbox",
        "docker",
        env={"HOME": str(home)},
    )
    specific = out["hookSpecificOutput"]
    assert specific["permissionDecision"] == "allow"
    words = specific["updatedInput"]["command"].split()
    assert words[1] == "exec" and words[2].startswith("--project=")
    assert any(word.startswith("--approved=") for word in words)
    (kept,) = (state / "codecoder" / "projects").rglob("hooks/*.json")
    (question,) = json.loads(kept.read_text())["pending"].values()
    assert question["scope"] == "once"


@pytest.mark.parametrize(
    "command",
    [
        "ls; rm -rf src",
        "ls\nrm -rf src",
        "ls | sh",
        "ls `rm -rf src`",
        "ls > .git/config",
        "ls & rm -rf src",
        "LS_COLORS=x ls",
        "env ls",
        "command ls",
    ],
)
def test_a_users_rule_for_a_program_never_covers_what_else_a_command_line_runs(
    project: Path, state: Path, tmp_path: Path, command: str
) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"permissions": {"allow": ["Bash(ls:*)"]}}')
    out = answer(
        "claude-code", claude("Bash", {"command": command}), project, env={"HOME": str(home)}
    )
    assert decision(out)[0] == "ask", command


def test_settings_that_lie_in_the_workspace_are_not_the_users_own(
    project: Path, state: Path, tmp_path: Path
) -> None:
    """A home inside the workspace, or a settings file linked into it: a sandboxed tool could
    have written it, so it grants nothing."""
    inside = project / "home"
    (inside / ".claude").mkdir(parents=True)
    (inside / ".claude" / "settings.json").write_text('{"permissions": {"allow": ["Bash"]}}')
    event = claude("Bash", {"command": "touch x"})
    assert decision(answer("claude-code", event, project, env={"HOME": str(inside)}))[0] == "ask"
    home = tmp_path / "home"
    (home / ".gemini" / "policies").mkdir(parents=True)
    planted = project / "planted.toml"
    planted.write_text('[[rule]]\ntoolName = "run_shell_command"\ndecision = "allow"\n')
    (home / ".gemini" / "policies" / "linked.toml").symlink_to(planted)
    shell = gemini("run_shell_command", {"command": "touch x"})
    assert answer("gemini", shell, project, env={"HOME": str(home)})["decision"] == "ask"
