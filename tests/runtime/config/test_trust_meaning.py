"""Trust follows meaning, not bytes: a trusted codecoder.json edited by hand stays trusted while
the edit widens nothing beyond what the human trusted, a binding to a sandbox is obeyed whatever
the trust, and `codecoder trust --show` says which entries can never take effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codecoder.config.trust import TrustState, read_record
from codecoder.config.writing import add_allow_entry, remove_allow_entry
from codecoder.environments.mock import MockEnvironment
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.decision import Source
from codecoder.foundation.errors import DeniedByUser
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, echo_handler, write_config

TRUSTED = {
    "environments": {"run_command": "@docker"},
    "allowlist": {"run_command:make": "AlwaysThisProject", "run_command:npm": "AlwaysThisProject"},
    "limits": {"timeout": 600},
    "web": {"allow_hosts": ["docs.python.org", "pypi.org"]},
    "docker": {"memory": "2g"},
    "deny": ["run_command:git:push"],
}


def codecoder(*args: str, project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "codecoder", *args, "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def trusted_by_the_human(project: Path, config: dict[str, Any]) -> Path:
    path = write_config(project, config, trusted=False)
    proc = codecoder("trust", "--yes", project=project)
    assert proc.returncode == 0, proc.stderr
    return path


def runtime(project: Path, asker: Any = None) -> Runtime:
    environments = {
        tag: MockEnvironment(echo_handler, tag)
        for tag in (EnvironmentTag.SHELL, EnvironmentTag.DOCKER)
    }
    return Runtime(project, asker=asker or RecordingAsker(), environments=environments)


def edited(path: Path, change: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=4) + "\n")  # reformatted too: other bytes
    return document


NARROWING_EDITS = {
    "a deny rule added": lambda d: d["deny"].append("run_command:rm"),
    "a grant removed": lambda d: d["allowlist"].pop("run_command:npm"),
    "a lower timeout": lambda d: d["limits"].update(timeout=300),
    "a host removed": lambda d: d["web"]["allow_hosts"].remove("pypi.org"),
    "the hosts reordered": lambda d: d["web"]["allow_hosts"].reverse(),
    "less memory": lambda d: d["docker"].update(memory="1g"),
    "a denied host": lambda d: d["web"].update(deny_hosts=["*.example.com"]),
    "the sections reordered": lambda d: d.update(dict(reversed(list(d.items())))),
}


@pytest.mark.parametrize("edit", sorted(NARROWING_EDITS))
def test_an_edit_that_widens_nothing_new_keeps_the_file_trusted(project: Path, edit: str) -> None:
    path = trusted_by_the_human(project, TRUSTED)
    edited(path, NARROWING_EDITS[edit])

    with runtime(project) as rt:
        config = rt.config
        outcome = rt.session().call("run_command", {"command": "make build"})

    assert config.trust.state is TrustState.TRUSTED
    assert config.bindings == {"run_command": EnvironmentTag.DOCKER}
    assert (outcome.decision.source, outcome.decision.environment) == (
        Source.PROJECT,
        EnvironmentTag.DOCKER,
    )


WIDENING_EDITS = {
    "a grant added": (lambda d: d["allowlist"].update({"run_command:curl": "AlwaysThisProject"})),
    "a grant's digest changed": (
        lambda d: d["allowlist"].update(
            {"run_command:make": {"scope": "AlwaysThisProject", "digest": "sha256:0"}}
        )
    ),
    "a higher timeout": lambda d: d["limits"].update(timeout=3600),
    "another host": lambda d: d["web"]["allow_hosts"].append("evil.example"),
    "more memory": lambda d: d["docker"].update(memory="64g"),
    "the network opened": lambda d: d["docker"].update(network="bridge"),
    "the binding moved to the host": lambda d: d["environments"].update(run_command="@shell"),
    "a read root outside": lambda d: d.update(read_roots={"up": ".."}),
}


@pytest.mark.parametrize("edit", sorted(WIDENING_EDITS))
def test_an_edit_that_widens_untrusts_it_and_trust_shows_what_is_new(
    project: Path, edit: str
) -> None:
    path = trusted_by_the_human(project, TRUSTED)
    edited(path, WIDENING_EDITS[edit])

    with runtime(project) as rt:
        config = rt.config

    assert config.trust.state is TrustState.UNTRUSTED
    shown = codecoder("trust", "--show", project=project).stdout.splitlines()
    new = [
        line for line in shown[1:] if line.startswith("  line") and "(trusted before)" not in line
    ]
    assert len(new) == 1, shown
    # The binding to the sandbox is obeyed all the same, unless the edit moved it to the host.
    moved = edit == "the binding moved to the host"
    assert config.bindings == ({} if moved else {"run_command": EnvironmentTag.DOCKER})


def test_a_record_that_kept_only_the_digest_trusts_those_bytes_only(project: Path) -> None:
    path = write_config(project, TRUSTED)  # recorded by digest, as before settings were kept
    assert read_record(project.resolve()).settings is None
    edited(path, NARROWING_EDITS["a deny rule added"])

    with runtime(project) as rt:
        assert rt.config.trust.state is TrustState.UNTRUSTED
        # Untrusted, the file still binds run_command to the sandbox (it narrows).
        assert rt.config.bindings == {"run_command": EnvironmentTag.DOCKER}


def test_the_issue_a_deny_added_by_hand_never_moves_commands_to_the_host(project: Path) -> None:
    for recorded in ("by digest", "by meaning"):
        path = (
            write_config(project, TRUSTED)
            if recorded == "by digest"
            else trusted_by_the_human(project, TRUSTED)
        )
        edited(path, NARROWING_EDITS["a deny rule added"])
        asker = RecordingAsker()
        with runtime(project, asker) as rt:
            outcome = rt.session().call("run_command", {"command": "ls"})
        assert isinstance(outcome.error, DeniedByUser)
        assert [r.environment for r in asker.requests] == [EnvironmentTag.DOCKER], recorded


def test_grants_the_runtime_writes_and_revokes_keep_the_meaning_in_step(project: Path) -> None:
    path = trusted_by_the_human(project, TRUSTED)
    edited(path, NARROWING_EDITS["a deny rule added"])  # trusted by meaning, not by digest
    add_allow_entry(path, "run_command:cargo")  # the human answered "always this project"
    assert runtime(project).config.trust.state is TrustState.TRUSTED
    edited(path, lambda d: d["deny"].append("run_command:curl"))
    assert runtime(project).config.trust.state is TrustState.TRUSTED

    assert remove_allow_entry(path, "run_command:make")
    assert runtime(project).config.trust.state is TrustState.TRUSTED
    # Put back by hand, the revoked grant is a widening again.
    edited(path, lambda d: d["allowlist"].update({"run_command:make": "AlwaysThisProject"}))
    assert runtime(project).config.trust.state is TrustState.UNTRUSTED


def test_trust_show_marks_what_can_never_take_effect_before_it_is_trusted(project: Path) -> None:
    write_config(
        project,
        {
            # On the host: @bwrap, the default, takes project grants (see the end).
            "environments": {"run_command": "@shell", "commit": "@shell"},
            "allowlist": {
                "run_command:git": "AlwaysThisProject",
                "commit": "AlwaysThisProject",
                "write_file:docs/**": "AlwaysThisProject",
                "no_such_tool:x": "AlwaysThisProject",
            },
            "read_roots": {"root": "/"},
        },
        trusted=False,
    )
    shown = codecoder("trust", "--show", project=project)
    listed = json.loads(codecoder("trust", "--show", "--json", project=project).stdout)

    never = {
        (w["section"], w["key"]): (w["never"] or "").split(":")[0] for w in listed["widenings"]
    }
    assert never == {
        ("environments", "run_command"): "",
        ("environments", "commit"): "",
        ("allowlist", "run_command:git"): "ceiling_violation",
        ("allowlist", "commit"): "ceiling_violation",
        ("allowlist", "write_file:docs/**"): "",
        ("allowlist", "no_such_tool:x"): "unknown_tool",
        ("read_roots", "root"): "read_root_forbidden",
    }
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "grants run_command:git" in line)
    assert lines[at + 1].startswith("      never takes effect, trusted or not: ceiling_violation")
    # Bound to a sandbox in the same file, or left in @bwrap, the default, the same grant could
    # take effect: not marked.
    for environments in ({"environments": {"run_command": "@docker"}}, {}):
        write_config(
            project,
            {**environments, "allowlist": {"run_command:git": "AlwaysThisProject"}},
            trusted=False,
        )
        listed = json.loads(codecoder("trust", "--show", "--json", project=project).stdout)
        assert [(w["key"], w["never"]) for w in listed["widenings"]] == [("run_command:git", None)]
