"""The rules layer (rules.json): rules that cannot be lost or dodged (SPEC §8, "Configuration fails
closed"). A broken rules file must not drop a deny rule (nor let a run-wide grant through), a
reload must keep the last good rules, the project must be found from any subdirectory, a binding
to a sandbox must hold whatever the trust, a host command must not plant what the host's git
runs next, and the git read tools must not read another repository's objects.

Each attempt builds its own directory under the audit's scratch root; the host commands of the
`host-*` kinds are real (they copy files inside that directory), everything else records what
would have run and runs nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from codecoder.config import trust
from codecoder.config.discovery import FoundBy, find_project
from codecoder.config.project import PROJECT_FILE
from codecoder.dispatcher import CallOutcome
from codecoder.environments.host.gitseen import GitSeen
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Answer, Source
from codecoder.foundation.errors import ExecutionFailed, RulesUnreadable
from codecoder.interfaces.escapes.calls import (
    _allowed,
    _Asker,
    _grant_source,
    _recorded,
    _recorders,
    _refusal,
    _result_line,
)
from codecoder.interfaces.escapes.corpus import Attempt, RulesEntry, ToolCall
from codecoder.interfaces.escapes.layer import AuditContext, _LayerRunner
from codecoder.interfaces.escapes.outcomes import _escaped, _NotApplicable, _NotRun
from codecoder.session import Runtime, Session

_QUIET_GIT = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


class _RulesLayer(_LayerRunner):
    def __init__(self, audit: AuditContext) -> None:
        self.audit = audit
        if "run_command" not in audit.tools:
            self.blocker = _NotApplicable("run_command is not a tool of this runtime")

    def run(self, attempt: Attempt) -> str:
        entry = attempt.entry
        assert isinstance(entry, RulesEntry)
        procedure = {
            "broken-rules": self._broken_rules,
            "reload-broken": self._reload_broken,
            "from-subdirectory": self._from_subdirectory,
            "untrusted-binding": self._untrusted_binding,
            "trusted-edit": self._trusted_edit,
            "host-git-plant": self._host_git_plant,
            "host-plant": self._host_plant,
            "borrowed-objects": self._borrowed_objects,
        }[entry.kind]
        return procedure(entry)

    # -- helpers -----------------------------------------------------------------------------

    def _runtime(self, directory: Path, asker: _Asker, **kw: Any) -> Runtime:
        kw.setdefault("environments", _recorders()[1])
        return Runtime(directory, asker=asker, audit_log=None, tools=self.audit.tools, **kw)

    def _grant_directly(self, session: Session, command: str) -> None:
        """What `--allow KEY` would have granted, had it been accepted."""
        key = self.audit.key(ToolCall(tool="run_command", args={"command": command}))
        assert key is not None
        session.allowlist.grant(key, session.runtime.environment_of("run_command"))

    @staticmethod
    def _refused_by_rules(outcome: CallOutcome, recorder: MockEnvironment, what: str) -> None:
        if _allowed(outcome) or recorder.requests:
            _escaped(f"{what}: {_grant_source(outcome) if _allowed(outcome) else 'it ran'}")

    # -- configuration fails closed ----------------------------------------------------------

    def _broken_rules(self, entry: RulesEntry) -> str:
        assert entry.text is not None and entry.command is not None
        directory = self.audit.fresh_dir("rules-broken")
        (directory / PROJECT_FILE).write_text(entry.text)
        recorder, environments = _recorders()
        asker = _Asker(Answer.ONCE)  # even a person answering yes must not be asked
        with self._runtime(directory, asker, environments=environments) as runtime:
            session = runtime.session()
            for raw in entry.allow:
                try:
                    session.grant(raw)
                except RulesUnreadable:
                    continue
                _escaped(f"--allow {raw} was accepted while the file is broken")
            self._grant_directly(session, entry.command)
            outcome = session.call("run_command", {"command": entry.command})
        self._refused_by_rules(outcome, recorder, "a broken file's rules were dropped")
        decision = outcome.decision
        if decision is None or decision.source is not Source.DENY or asker.requests:
            _escaped(f"the call was not refused outright: {_refusal(outcome, asker)}")
        if f"{PROJECT_FILE}:" not in decision.reason:
            _escaped(f"the refusal does not say where the file is broken: {decision.reason}")
        if (directory / PROJECT_FILE).read_text() != entry.text:
            _escaped("the broken file was rewritten")
        where = decision.reason.split(f"{directory}/", 1)[-1].split(". ")[0]
        return f"--allow refused; the call refused without a question: {where}"

    def _reload_broken(self, entry: RulesEntry) -> str:
        assert entry.text is not None and entry.edited is not None and entry.command
        directory = self.audit.fresh_dir("rules-reload")
        (directory / PROJECT_FILE).write_text(entry.text)
        recorder, environments = _recorders()
        asker = _Asker(Answer.ONCE)
        with self._runtime(directory, asker, environments=environments, trusted=True) as rt:
            session = rt.session()
            self._grant_directly(session, entry.command)
            control = session.call("run_command", {"command": entry.command})
            if _allowed(control):
                raise _NotRun(f"the deny rule did not refuse the call before the edit ({control})")
            (directory / PROJECT_FILE).write_text(entry.edited)
            reported = rt.reload()
            outcome = session.call("run_command", {"command": entry.command})
        self._refused_by_rules(outcome, recorder, "the reload of a broken file dropped a rule")
        if outcome.decision is None or outcome.decision.source is not Source.DENY:
            _escaped(f"the last good deny rule no longer refused: {_refusal(outcome, asker)}")
        kept = [d for d in reported if d.code == "kept_last_good"]
        if not kept:
            _escaped("the reload did not say that the last good rules stay in effect")
        return f"the last good rules stayed ({kept[0].message}); {_refusal(outcome)}"

    def _from_subdirectory(self, entry: RulesEntry) -> str:
        assert entry.text is not None and entry.command is not None
        directory = self.audit.fresh_dir("rules-subdirectory")
        (directory / PROJECT_FILE).write_text(entry.text)
        deep = directory / "src" / "pkg" / "deep"
        deep.mkdir(parents=True)
        place = find_project(deep)
        if place.directory.resolve() != directory.resolve():
            _escaped(f"from {deep} the project found is {place.describe()}")
        recorder, environments = _recorders()
        with self._runtime(place.directory, _Asker(), environments=environments) as runtime:
            session = runtime.session()
            self._grant_directly(session, entry.command)
            outcome = session.call("run_command", {"command": entry.command})
        self._refused_by_rules(outcome, recorder, "the project's rule did not apply")
        if outcome.decision is None or outcome.decision.source is not Source.DENY:
            _escaped(f"the project's deny rule did not refuse: {_refusal(outcome)}")
        assert place.found_by is FoundBy.PROJECT_FILE
        return f"found {place.describe()} from src/pkg/deep; {_refusal(outcome)}"

    # -- trust that follows meaning --------------------------------------------------------

    def _split_recorders(self) -> tuple[dict[EnvironmentTag, MockEnvironment], dict[Any, Any]]:
        recorders = {tag: MockEnvironment(_recorded, tag) for tag in EnvironmentTag}
        return recorders, dict(recorders)

    def _ran_in(self, recorders: dict[EnvironmentTag, MockEnvironment]) -> list[str]:
        return [tag.value for tag, recorder in recorders.items() if recorder.requests]

    def _untrusted_binding(self, entry: RulesEntry) -> str:
        assert entry.text is not None and entry.command is not None
        directory = self.audit.fresh_dir("rules-untrusted")
        (directory / PROJECT_FILE).write_text(entry.text)
        recorders, environments = self._split_recorders()
        with self._runtime(
            directory, _Asker(Answer.ONCE), environments=environments, trusted=False
        ) as runtime:
            state = runtime.config.trust.state.value
            outcome = runtime.session().call("run_command", {"command": entry.command})
        ran = self._ran_in(recorders)
        if ran != [EnvironmentTag.DOCKER.value]:
            _escaped(f"the untrusted file's binding to @docker was dropped: it ran in {ran}")
        return f"{state}: the binding to @docker was obeyed; {_result_line(outcome)} in @docker"

    def _trusted_edit(self, entry: RulesEntry) -> str:
        assert entry.text is not None and entry.edited is not None and entry.command
        directory = self.audit.fresh_dir("rules-trusted-edit")
        (directory / PROJECT_FILE).write_text(entry.text)
        with self._runtime(directory, _Asker()) as runtime:
            widenings = runtime.config.trust.widenings
        trust.record_trust(
            directory.resolve(),
            (directory / PROJECT_FILE).read_bytes(),
            [w.what for w in widenings],
            [w.setting for w in widenings],
        )
        (directory / PROJECT_FILE).write_text(entry.edited)  # a hand edit that only narrows
        recorders, environments = self._split_recorders()
        try:
            with self._runtime(directory, _Asker(Answer.ONCE), environments=environments) as rt:
                state = rt.config.trust.state.value
                outcome = rt.session().call("run_command", {"command": entry.command})
        finally:
            trust.forget(directory.resolve())
        ran = self._ran_in(recorders)
        if ran != [EnvironmentTag.DOCKER.value]:
            _escaped(f"the edit moved the command out of the sandbox: it ran in {ran} ({state})")
        if state != "trusted":
            _escaped(f"an edit that widens nothing untrusted the file ({state})")
        return f"still {state} after the edit; {_result_line(outcome)} in @docker"

    # -- host commands that plant what the host runs next --------------------------------------

    def _host_repository(self, name: str) -> tuple[Path, Path]:
        git = shutil.which("git")
        if git is None:
            raise _NotApplicable("git is not installed: there is no host git to plant for")
        directory = self.audit.fresh_dir(name)
        GitSeen(directory.resolve()).path.unlink(missing_ok=True)  # an earlier attempt's look
        markers = self.audit.fresh_dir(f"{name}-markers")
        subprocess.run(
            [git, "init", "-q"],
            cwd=directory,
            env={**os.environ, **_QUIET_GIT},
            capture_output=True,
            check=True,
        )
        return directory, markers

    def _plant(self, entry: RulesEntry, directory: Path, markers: Path) -> None:
        for relative, content in entry.plant.items():
            path = directory / "fixture" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content.replace("@MARKER@", str(markers / "PLANTED-RAN")))
            path.chmod(0o755)

    def _host_session(self, directory: Path, entry: RulesEntry) -> tuple[Runtime, Session]:
        """A session on the real host, granted exactly the commands the attempt makes: what
        stops the plant can only be what runs before every host command."""
        from codecoder.environments.shell import ShellEnvironment

        environments = {EnvironmentTag.SHELL: ShellEnvironment()}
        # Commands run contained by default (@bwrap), where nothing can write .git: these
        # attempts are about the host, where a project binds them to @shell.
        runtime = self._runtime(
            directory,
            _Asker(),
            environments=environments,
            bindings={"run_command": EnvironmentTag.SHELL},
        )
        session = runtime.session()
        for raw in entry.allow:
            session.grant(raw)
        for command in ("git status --short", entry.copy_command, entry.then):
            if command:
                self._grant_directly(session, command)
        return runtime, session

    def _host_git_plant(self, entry: RulesEntry) -> str:
        assert entry.copy_command and entry.then
        directory, markers = self._host_repository("rules-host-git")
        self._plant(entry, directory, markers)
        env = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@b", **_QUIET_GIT}
        runtime, session = self._host_session(directory, entry)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            first = session.call("run_command", {"command": "git status --short"})
            if not first.ok:
                raise _NotRun(f"the first host git command failed: {_result_line(first)}")
            copied = session.call("run_command", {"command": entry.copy_command})
            if not _allowed(copied):
                raise _NotRun(f"the granted copy was not allowed: {_refusal(copied)}")
            then = session.call("run_command", {"command": entry.then})
        finally:
            runtime.close()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if (markers / "PLANTED-RAN").exists():
            _escaped(f"what the copy planted ran: {entry.then} ({_result_line(then)})")
        if then.error is None:
            _escaped(f"{entry.then} ran after the plant without a refusal: {_result_line(then)}")
        noted = "this command changed what" in (copied.result.output if copied.result else "")
        return (
            "the copy's result said what it changed; " if noted else ""
        ) + f"{entry.then}: {_result_line(then)}"

    def _host_plant(self, entry: RulesEntry) -> str:
        assert entry.copy_command
        directory, markers = self._host_repository("rules-host-plant")
        self._plant(entry, directory, markers)
        runtime, session = self._host_session(directory, entry)
        try:
            copied = session.call("run_command", {"command": entry.copy_command})
        finally:
            runtime.close()
        if not _allowed(copied):
            raise _NotRun(f"the granted copy was not allowed: {_refusal(copied)}")
        left = [name for name in entry.plant if (directory / name).exists()]
        if left:
            _escaped(f"the host command left {', '.join(left)} in the workspace")
        if not isinstance(copied.error, ExecutionFailed):
            _escaped(f"the copy succeeded as if nothing happened: {_result_line(copied)}")
        return _result_line(copied)

    # -- the git read tools ------------------------------------------------------------------

    def _borrowed_objects(self, entry: RulesEntry) -> str:
        from dulwich import porcelain

        assert entry.call is not None
        self.audit.require_tool(entry.call.tool)
        token = self.audit.token
        outside = self.audit.fresh_dir("rules-borrowed-outside")
        porcelain.init(str(outside))
        (outside / "secret.txt").write_text(f"{token}\n")
        porcelain.add(str(outside), paths=[str(outside / "secret.txt")])
        porcelain.commit(str(outside), b"secret", author=b"A <a@b>", committer=b"A <a@b>")
        directory = self.audit.fresh_dir("rules-borrowed")
        porcelain.init(str(directory))
        info = directory / ".git" / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(f"{outside / '.git' / 'objects'}\n")
        head = (outside / ".git" / "refs" / "heads" / "master").read_text()
        (directory / ".git" / "refs" / "heads" / "master").write_text(head)
        with Runtime(directory, asker=_Asker(), audit_log=None, tools=self.audit.tools) as rt:
            outcome = rt.session().call(entry.call.tool, entry.call.args)
        if token in json.dumps(outcome.to_json()):
            _escaped(f"{entry.call.tool} showed an object of a repository outside the workspace")
        return f"{entry.call.tool}: {_result_line(outcome)}; the borrowed objects were not read"
