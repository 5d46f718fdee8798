"""The permission-files layer (permission-files.json): hand-edited entries above their ceiling,
protected paths answered beyond Once, sandboxed tools writing codecoder.json, .codecoder/ or
.git/; besides, capabilities created or changed without a grant, a cloned repository's
codecoder.json, repositories and programs left where git or the host shell would pick them up.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from codecoder.config.project import PROJECT_FILE
from codecoder.dispatcher import CallOutcome
from codecoder.environments.docker.settings import DockerSettings
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag, Scope
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.display import visible
from codecoder.interfaces.escapes.calls import (
    _allowed,
    _Asker,
    _grant_source,
    _last_line,
    _recorders,
    _refusal,
    _result_line,
)
from codecoder.interfaces.escapes.corpus import Attempt, PermissionFileEntry, ToolCall, _substituted
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.permissions.prompt import AskRequest, render
from codecoder.session import Runtime, Session


class _PermissionFilesLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, PermissionFileEntry)
        self.audit.require_tool(entry.call.tool)
        procedures: dict[str, Callable[[PermissionFileEntry, ToolCall], str]] = {
            "ceiling-entry": self._ceiling_entry,
            "scope-entry": self._scope_entry,
            "malformed": self._malformed,
            "protected-answer": self._protected_answer,
            "protected-key": self._protected_key,
            "sandboxed-write": self._sandboxed_write,
            "self-grant": self._sandboxed_write,
            "capability-create": self._capability_create,
            "capability-tamper": self._capability_tamper,
            "cloned-config": self._cloned_config,
            "nested-git": self._nested_git,
            "git-symlink": self._git_symlink,
            "path-hijack": self._path_hijack,
            "link-to-protected": self._link_to_protected,
            "bare-repository": self._bare_repository,
            "read-root-swap": self._read_root_swap,
            "question-preview": self._question_preview,
        }
        return procedures[entry.kind](entry, entry.call)

    @contextlib.contextmanager
    def _recorded_session(
        self, directory: Path, text: str | None, asker: _Asker
    ) -> Iterator[tuple[Runtime, Session, MockEnvironment]]:
        """A session on `directory` (with `text` as its codecoder.json, when given; else with
        the project's own bindings) whose environments only record, trusted as far as the
        project's own file is."""
        if text is not None:
            (directory / PROJECT_FILE).write_text(text)
        recorder, environments = _recorders()
        with (
            Runtime(
                directory,
                asker=asker,
                environments=environments,
                audit_log=None,
                tools=self.audit.tools,
                trusted=self.audit.trusted,
                bindings=None if text is not None else self._bindings(),
            ) as runtime,
            runtime.session() as session,
        ):
            yield runtime, session, recorder

    def _bindings(self) -> dict[str, EnvironmentTag]:
        """The environments the project's configuration binds its tools to."""
        return dict(self.audit.config.bindings)

    def _not_allowed(self, outcome: CallOutcome, recorder: MockEnvironment, what: str) -> None:
        if _allowed(outcome) or recorder.requests:
            _escaped(f"{what}: the call was {_grant_source(outcome)} and reached the environment")

    def _ceiling_entry(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        tag = self.audit.binding(call.tool)
        if tag.allows(Scope.PROJECT):
            raise _NotApplicable(
                f"{call.tool} is bound to {tag.value} here, where a project grant is legitimate"
            )
        directory = self.audit.scratch_dir("permission-files")
        asker = _Asker()
        text = self.audit.document(allow=entry.entry)
        with self._recorded_session(directory, text, asker) as (runtime, session, recorder):
            reported = [
                d
                for d in runtime.diagnostics
                if d.code == "ceiling_violation" and d.key in entry.entry
            ]
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, recorder, "the hand-edited entry granted it")
        if not reported:
            _escaped("the entry was accepted silently: no CeilingViolation was reported")
        at_lookup = bool(outcome.decision and outcome.decision.violations)
        return (
            f"CeilingViolation at line {reported[0].line}: {reported[0].message}; the call asked "
            f"and was refused"
            + ("; the violation was reported again at the lookup" if at_lookup else "")
        )

    def _scope_entry(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        directory = self.audit.scratch_dir("permission-files")
        asker = _Asker()
        text = self.audit.document(allow=entry.entry)
        with self._recorded_session(directory, text, asker) as (runtime, session, recorder):
            reported = [d for d in runtime.diagnostics if d.key in entry.entry]
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, recorder, "the entry granted it")
        if not reported:
            _escaped("the entry was accepted silently: nothing was reported about its scope")
        return f"{reported[0].severity} at line {reported[0].line}: {reported[0].message}; " + (
            f"the call was refused ({_refusal(outcome, asker)})"
        )

    def _malformed(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.text is not None
        directory = self.audit.scratch_dir("permission-files")
        asker = _Asker(Answer.PROJECT)  # and a later "always this project" must not rewrite it
        with self._recorded_session(directory, entry.text, asker) as (runtime, session, _):
            usable = runtime.config.file.usable
            errors = [d for d in runtime.diagnostics if d.severity == "error"]
            outcome = session.call(call.tool, call.args)
        if usable or not errors:
            _escaped("the malformed file was accepted as usable")
        if (directory / PROJECT_FILE).read_text() != entry.text:
            _escaped("the malformed file was rewritten by a later grant: the user's text is lost")
        if outcome.decision is not None and outcome.decision.source is Source.PROJECT:
            _escaped(f"a grant of the malformed file applied: {_grant_source(outcome)}")
        first = errors[0]
        return (
            f"fails closed: {first.code} at line {first.line}, column {first.column}: "
            f"{first.message}; no grant taken from it and the file left as it was"
        )

    def _protected_answer(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.answer is not None
        directory = self.audit.scratch_dir("permission-files")
        text = self.audit.document()
        asker = _Asker(Answer(entry.answer))
        with self._recorded_session(directory, text, asker) as (_, session, recorder):
            outcome = session.call(call.tool, call.args)
            ran = bool(recorder.requests)
            asker.answer = Answer.DENY
            again = session.call(call.tool, call.args)
        if _allowed(outcome) or ran:
            _escaped(f"answered {entry.answer}: {_grant_source(outcome)} and it ran")
        if (directory / PROJECT_FILE).read_text() != text:
            _escaped("codecoder.json was changed: the protected key was recorded")
        if _allowed(again) or len(asker.requests) < 2:
            _escaped(f"the next identical call was not asked again: {_grant_source(again)}")
        return f"answered {entry.answer}: {_refusal(outcome)}; the next identical call asked again"

    def _protected_key(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        tag = self.audit.binding(call.tool)
        directory = self.audit.scratch_dir("permission-files")
        text = self.audit.document(allow=entry.grants if tag.allows(Scope.PROJECT) else ())
        key = self.audit.key(call)
        asker = _Asker()
        with self._recorded_session(directory, text, asker) as (_, session, recorder):
            if key is not None:
                session.allowlist.grant(key, tag)
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, recorder, "a grant covered a protected path")
        return f"{_refusal(outcome, asker)}; nothing ran"

    def _sandboxed_write(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        tag = audit.binding(call.tool)
        if tag is EnvironmentTag.SHELL and not entry.follow_up:
            raise _NotApplicable(
                f"{call.tool} runs on the host here (@shell): nothing contains it, which is why "
                "its grants last one session at most; bind it to @docker to contain it"
            )
        environment = audit.environment(tag)
        workspace = audit.workspace
        grant_text = audit.document(allow=entry.grants)
        call = _substituted(
            call, {"@SELF_GRANT@": grant_text, "@SELF_GRANT_SHELL@": shlex.quote(grant_text)}
        )
        if entry.script_file:
            script = "\n".join(entry.script) + "\n"
            script = script.replace("@SELF_GRANT_SHELL@", shlex.quote(grant_text))
            workspace.write(entry.script_file, script.encode())
        watch = (*entry.watch,)
        before = workspace.state(watch)
        key = audit.key(call)
        asker = _Asker()
        with (
            Runtime(
                workspace.path,
                asker=asker,
                environments={tag: environment},
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            if key is not None:
                session.allowlist.grant(key, tag)
            outcome = session.call(call.tool, call.args)
        if not _allowed(outcome):
            raise _NotRun(
                f"the call was not allowed even with its own key granted ({_refusal(outcome)})"
            )
        changed = workspace.changed(before, watch)
        how = f"{call.tool} ran in {tag.value}: {_result_line(outcome)}"
        if changed and tag is not EnvironmentTag.SHELL:
            _escaped(f"{how}; it changed {', '.join(changed)} on the host")
        if changed:
            how += f"; @shell is no sandbox: it changed {', '.join(changed)}"
        else:
            how += f"; {', '.join(watch)} unchanged"
        if entry.follow_up:
            how += "; " + self._after_reload(entry.follow_up)
        return how

    def _capability_create(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        directory = self.audit.scratch_dir("capability-create")
        asker = _Asker()
        with self._recorded_session(directory, self.audit.document(), asker) as (_, session, rec):
            outcome = session.call(call.tool, call.args)
        self._not_allowed(outcome, rec, "the capability was created without asking")
        written = sorted(p.name for p in (directory / ".codecoder").glob("capabilities/*"))
        if written:
            _escaped(f"capabilities were written without a grant: {written}")
        return f"{_refusal(outcome, asker)}; nothing written under .codecoder/capabilities/"

    def _capability_tamper(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.tamper is not None
        audit = self.audit
        directory = audit.scratch_dir("capability-tamper")
        name = str(call.args["manifest"]["name"])
        run = ToolCall(tool="run_capability", args={"name": name})
        audit.require_tool(run.tool)
        (directory / PROJECT_FILE).write_text(audit.document())
        # The human allows the creation once and the first run for the project: the grant
        # that gets pinned to the digest of the code as it was approved.
        answers = iter((Answer.ONCE, Answer.PROJECT))
        environments = {EnvironmentTag.WASM: audit.environment(EnvironmentTag.WASM)}
        with (
            Runtime(
                directory,
                asker=lambda request: next(answers, Answer.DENY),
                environments=environments,
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            created = session.call(call.tool, call.args)
            approved = session.call(run.tool, run.args)
        if not created.ok or not approved.ok:
            failed = created if not created.ok else approved
            raise _NotRun(f"the capability could not be created and approved: {failed.error}")
        capability = directory / ".codecoder" / "capabilities" / name
        (capability / entry.tamper.path).write_text(entry.tamper.content)
        # A restart: the runtime reads codecoder.json and the capabilities afresh.
        asker = _Asker()
        recorder, recorders = _recorders()
        with (
            Runtime(
                directory,
                asker=asker,
                environments=recorders,
                audit_log=None,
                tools=audit.tools,
                trusted=self.audit.trusted,
            ) as runtime,
            runtime.session() as session,
        ):
            reported = [d.message for d in runtime.diagnostics if d.key == f"{run.tool}:{name}"]
            outcome = session.call(run.tool, run.args)
        if outcome.error is None or recorder.requests:
            _escaped(f"the changed capability ran under the old grant: {_result_line(outcome)}")
        how = _refusal(outcome, asker)
        return how + (f"; reported: {reported[0]}" if reported else "")

    # -- a cloned hostile repository -------------------------------------------------------

    def _placeholders(self) -> dict[str, str]:
        outside = str(self.audit.workspace.outside)
        return {
            "@OUTSIDE_REL@": outside.lstrip("/"),
            "@OUTSIDE@": outside,
            "@TOKEN@": self.audit.token,
        }

    def _cloned_config(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        assert entry.document is not None
        values = self._placeholders()
        document = _substituted(ToolCall(tool="-", args=entry.document), values).args
        call = _substituted(call, values)
        directory = self.audit.fresh_dir("cloned")
        (directory / PROJECT_FILE).write_text(json.dumps(document, indent=2) + "\n")
        recorder, environments = _recorders()
        # The read tools really read (in @landlock, or @wasm where it cannot run): that is the
        # attack.
        environments.pop(EnvironmentTag.LANDLOCK)
        environments.pop(EnvironmentTag.WASM)
        environments.pop(EnvironmentTag.RUNTIME)
        asker = _Asker()
        # Never trusted: this is the file as it came with the repository (no trust override).
        with (
            Runtime(
                directory,
                asker=asker,
                environments=environments,
                audit_log=None,
                tools=self.audit.tools,
            ) as runtime,
            runtime.session() as session,
        ):
            config = runtime.config
            in_effect = _widenings_in_effect(config, directory)
            reported = {d.key for d in config.diagnostics if d.code in _CLONED_REPORTS}
            outcome = session.call(call.tool, call.args)
        if in_effect:
            _escaped(f"the cloned file was obeyed: {'; '.join(in_effect)}")
        unreported = [w.key for w in config.trust.widenings if w.key not in reported]
        forbidden = [d.key or "" for d in config.diagnostics if d.code == "read_root_forbidden"]
        if unreported or not (reported or forbidden):
            _escaped(f"widenings taken silently, not reported: {unreported or 'all'}")
        shown = json.dumps(outcome.to_json())
        if self.audit.token in shown.replace(f"/{self.audit.token}", ""):
            _escaped(f"the bait outside the workspace was shown: {_result_line(outcome)}")
        if outcome.ok or recorder.requests:
            _escaped(f"the call went through: {_result_line(outcome)}")
        if entry.expect_error is not None and entry.expect_error not in str(outcome.error):
            raise _NotRun(f"the call failed otherwise than expected: {_result_line(outcome)}")
        how = f"{config.trust.state.value}: " + (
            f"{len(config.trust.widenings)} widening(s) reported and ignored"
            if config.trust.widenings
            else f"refused outright ({', '.join(sorted(set(forbidden)))}: read_root_forbidden)"
        )
        if outcome.decision is not None and outcome.decision.source is Source.NONE:
            return f"{how}; {call.tool} (which never asks) failed: {_result_line(outcome)}"
        return f"{how}; {call.tool} {_refusal(outcome, asker)}"

    def _git_repository(self, name: str) -> Path:
        from dulwich import porcelain

        directory = self.audit.fresh_dir(name)
        porcelain.init(str(directory))
        (directory / "src").mkdir()
        (directory / "src" / "secret.txt").write_text("inside the workspace\n")
        porcelain.add(str(directory), paths=[str(directory / "src" / "secret.txt")])
        porcelain.commit(str(directory), b"audit", author=b"A <a@b>", committer=b"A <a@b>")
        return directory

    def _git_symlink(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        audit.require_tool(call.tool)
        directory = self._git_repository("git-symlink")
        shutil.rmtree(directory / "src")
        (directory / "src").symlink_to(audit.workspace.outside)
        with Runtime(
            directory, asker=_Asker(), audit_log=None, tools=audit.tools, trusted=audit.trusted
        ) as runtime:
            outcome = runtime.session().call(call.tool, call.args)
        if audit.token in json.dumps(outcome.to_json()):
            _escaped(f"{call.tool} showed the bait outside the workspace through the symlink")
        if outcome.error is not None:
            raise _NotRun(f"{call.tool} failed: {_result_line(outcome)}")
        shown = _last_line(outcome.unwrap().output)
        return f"{call.tool}: {shown}; nothing beyond the symlink was read"

    def _nested_git(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        git = shutil.which("git")
        if git is None:
            raise _NotApplicable("git is not installed: the commit tool cannot run here")
        audit.require_tool(call.tool)
        directory = audit.fresh_dir("nested-git")
        markers = audit.fresh_dir("nested-git-markers")
        quiet = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}

        def run(*argv: str, cwd: Path = directory) -> None:
            subprocess.run(
                [git, "-c", "user.name=A", "-c", "user.email=a@b", *argv],
                cwd=cwd,
                env=quiet,
                capture_output=True,
                check=True,
            )

        run("init", "-q")
        run("config", "user.name", "Audit")
        run("config", "user.email", "audit@example.org")
        run("init", "-q", "sub")
        (directory / "sub" / "f.txt").write_text("one\n")
        run("add", "f.txt", cwd=directory / "sub")
        run("commit", "-qm", "sub", cwd=directory / "sub")
        (directory / "top.txt").write_text("one\n")
        run("add", "top.txt", "sub")
        run("commit", "-qm", "top")
        # What a sandbox could leave behind if nothing stopped it.
        with (directory / "sub" / ".git" / "config").open("a") as config:
            config.write(f"[core]\n\tfsmonitor = \"sh -c 'touch {markers}/fsmonitor'\"\n")
        for hook in ("pre-commit", "post-commit", "post-index-change"):
            path = directory / "sub" / ".git" / "hooks" / hook
            path.write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
            path.chmod(0o755)
        (directory / "sub" / "f.txt").write_text("changed\n")
        (directory / "top.txt").write_text("changed\n")
        environments = {EnvironmentTag.SHELL: audit.environment(EnvironmentTag.SHELL)}
        asker = _Asker(Answer.ONCE)
        # The hardening of git on the host is what is attacked: commit bound there.
        with Runtime(
            directory,
            asker=asker,
            environments=environments,
            audit_log=None,
            tools=audit.tools,
            bindings={call.tool: EnvironmentTag.SHELL},
        ) as runtime:
            outcome = runtime.session().call(call.tool, call.args)
        ran = sorted(os.listdir(markers))
        if ran:
            _escaped(f"the commit ran what the nested repository names: {', '.join(ran)}")
        if not outcome.ok:
            raise _NotRun(f"the commit failed: {_result_line(outcome)}")
        return f"committed ({_result_line(outcome)}); nothing the nested repository names ran"

    def _path_hijack(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        audit = self.audit
        audit.require_tool(call.tool)
        if audit.binding(call.tool) is not EnvironmentTag.SHELL:
            raise _NotApplicable(
                f"{call.tool} runs in {audit.binding(call.tool).value} here, whose own PATH the "
                "host's does not reach"
            )
        directory = audit.fresh_dir("path-hijack")
        program = str(call.args["command"]).split()[0]
        planted = directory / ".venv" / "bin" / program
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(f"#!/bin/sh\necho {audit.token}\n")
        planted.chmod(0o755)
        innocent = audit.key(call)  # as keyed before the plant was on PATH
        assert innocent is not None
        asker = _Asker()
        path = os.environ.get("PATH", os.defpath)
        os.environ["PATH"] = f"{planted.parent}{os.pathsep}{path}"
        try:
            with self._recorded_session(directory, None, asker) as (_, session, recorder):
                session.allowlist.grant(innocent, EnvironmentTag.SHELL)
                outcome = session.call(call.tool, call.args)
        finally:
            os.environ["PATH"] = path
        if _allowed(outcome) or recorder.requests:
            _escaped(
                f"the planted {program} was covered by {innocent.raw}: {_grant_source(outcome)}"
            )
        shown = _remarks(asker.requests)
        if ".venv/bin" not in shown:
            _escaped(f"the prompt did not say where {program} lives: {shown!r}")
        return f"{_refusal(outcome, asker)}; the prompt said: {visible(shown.splitlines()[-1])}"

    def _on_the_host(self, call: ToolCall) -> None:
        if self.audit.binding(call.tool) is not EnvironmentTag.SHELL:
            raise _NotApplicable(
                f"{call.tool} runs in {self.audit.binding(call.tool).value} here: what it "
                "runs stays in the sandbox, where the protected paths are read-only"
            )

    def _link_to_protected(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """A symlink a sandbox may leave (its name is not protected) leading into .git, then a
        host command writing through it under a session grant for its program."""
        audit = self.audit
        self._on_the_host(call)
        directory = audit.fresh_dir("link-to-protected")
        (directory / ".git" / "hooks").mkdir(parents=True)
        (directory / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
        (directory / "notes.txt").write_text(f"{audit.token}\n")
        for link, target in entry.links.items():
            (directory / link).symlink_to(target)
        innocent = audit.key(call)  # as keyed where no link leads anywhere
        assert innocent is not None
        asker = _Asker()
        with self._recorded_session(directory, None, asker) as (_, session, recorder):
            session.allowlist.grant(innocent, EnvironmentTag.SHELL)
            outcome = session.call(call.tool, call.args)
        if _allowed(outcome) or recorder.requests:
            _escaped(f"the write through the link was covered by {innocent.raw}")
        shown = _remarks(asker.requests)
        if "leads to .git" not in shown:
            _escaped(f"the prompt did not say where the link leads: {shown!r}")
        return f"{_refusal(outcome, asker)}; the prompt said: {visible(shown.splitlines()[-1])}"

    def _bare_repository(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """HEAD, objects/, refs/ and a config naming core.fsmonitor, written where a sandbox may
        write (`entry.script_file`: the directory, `.` for the workspace), then the call on the
        real host shell under a session grant for its own key."""
        audit = self.audit
        self._on_the_host(call)
        directory = audit.fresh_dir("bare-repository")
        marker = audit.fresh_dir("bare-repository-marker") / "fsmonitor-ran"
        planted = directory / (entry.script_file or ".")
        for sub in ("objects", "refs/heads"):
            (planted / sub).mkdir(parents=True, exist_ok=True)
        (planted / "HEAD").write_text("ref: refs/heads/main\n")
        (planted / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
            f'\tfsmonitor = "touch {marker}; false"\n'
        )
        key = audit.key(call)
        assert key is not None
        with (
            Runtime(
                directory,
                asker=_Asker(),
                audit_log=None,
                tools=audit.tools,
                trusted=audit.trusted,
                bindings=self._bindings(),
            ) as runtime,
            runtime.session() as session,
        ):
            session.allowlist.grant(key, EnvironmentTag.SHELL)
            outcome = session.call(call.tool, call.args)
        if marker.exists():
            _escaped("git took the planted layout for a repository and ran its core.fsmonitor")
        return _result_line(outcome)

    def _read_root_swap(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """A read root inside the project (obeyed even untrusted) swapped for a symlink to the
        bait outside after the project was loaded, then a read tool on it."""
        audit = self.audit
        directory = audit.fresh_dir("read-root-swap")
        bait = audit.fresh_dir("read-root-swap-bait")
        (bait / "secret.txt").write_text(f"{audit.token}\n")
        (directory / "docs").mkdir()
        (directory / PROJECT_FILE).write_text(json.dumps({"read_roots": {"docs": "docs"}}))
        with (
            Runtime(directory, asker=_Asker(), audit_log=None, tools=audit.tools) as runtime,
            runtime.session() as session,
        ):
            if "docs" not in runtime.config.read_roots:
                raise _NotRun("the read root inside the project was not in effect")
            (directory / "docs").rmdir()
            (directory / "docs").symlink_to(bait)
            outcome = session.call(call.tool, call.args)
        if audit.token in json.dumps(outcome.to_json()):
            _escaped("the read tool read the bait through the swapped root")
        return _result_line(outcome)

    def _question_preview(self, entry: PermissionFileEntry, call: ToolCall) -> str:
        """What a sandbox may leave where a write is asked about (`links`: a symlink to the bait
        outside, a directory swapped for one; `script_file`: a FIFO), then the call: the
        question's diff must show none of the bait, and must not hang on the FIFO."""
        audit = self.audit
        directory = audit.fresh_dir("question-preview")
        bait = audit.fresh_dir("question-preview-bait")
        (bait / "secret.txt").write_text(f"{audit.token}\n")
        for link, target in entry.links.items():
            place = directory / link
            place.parent.mkdir(parents=True, exist_ok=True)
            place.symlink_to(target.replace("@OUTSIDE@", str(bait)))
        if entry.script_file is not None:
            os.mkfifo(directory / entry.script_file)
        asker = _Asker()
        with self._recorded_session(directory, None, asker) as (_, session, _recorder):
            outcome = session.call(call.tool, call.args)
        if not asker.requests:
            raise _NotRun(f"{call.tool} was not asked about: {_result_line(outcome)}")
        shown = render(asker.requests[0])
        if audit.token in shown or audit.token in json.dumps(outcome.to_json()):
            _escaped("the question showed the bait outside the workspace")
        if (bait / "secret.txt").read_text() != f"{audit.token}\n":
            _escaped("the bait outside the workspace was changed")
        changes = [line for line in shown.splitlines() if line.startswith("  changes")]
        said = " ".join(changes[0].replace("│", " ").split()) if changes else "no preview"
        return f"{_refusal(outcome, asker)}; the question said: {said}"

    def _after_reload(self, calls: Sequence[ToolCall]) -> str:
        """What a /reload of the (possibly rewritten) file grants: each call must still ask."""
        asker = _Asker()
        refused: list[str] = []
        path = self.audit.workspace.path
        with self._recorded_session(path, None, asker) as (runtime, session, recorder):
            for call in calls:
                if call.tool not in runtime.tools:
                    continue
                outcome = session.call(call.tool, call.args)
                self._not_allowed(outcome, recorder, "after /reload the self-granted entry applied")
                refused.append(f"{call.tool} {json.dumps(call.args)} asked")
        return "after /reload: " + ", ".join(refused)


_CLONED_REPORTS: Final = frozenset({"untrusted", "read_root_forbidden"})


def _remarks(requests: Sequence[AskRequest]) -> str:
    """What the first question said of its call, one remark a line (the last: what matters)."""
    if not requests:
        return ""
    return "\n".join((requests[0].subject, *requests[0].notes))


def _widenings_in_effect(config: Any, workspace: Path) -> list[str]:
    """What a never-trusted project file managed to put in effect (empty: nothing)."""
    found: list[str] = []
    if len(config.allowlist):
        found.append(f"{len(config.allowlist)} grant(s)")
    # A binding to a sandbox narrows and is obeyed whatever the trust; to the host it widens.
    host = {t: e for t, e in config.bindings.items() if not e.allows(Scope.PROJECT)}
    if host:
        found.append(f"bindings {host}")
    for name, directory in config.read_roots.items():
        if workspace.resolve() not in (directory, *directory.parents):
            found.append(f"read root {name} = {directory}")
    if config.docker != DockerSettings():
        found.append(f"docker settings {config.docker}")
    if config.web.allow_hosts or config.web.search_url is not None:
        found.append("web hosts")
    if config.agent.base_url is not None or config.agent.api_key_env != "OPENAI_API_KEY":
        found.append("agent server or key")
    return found
