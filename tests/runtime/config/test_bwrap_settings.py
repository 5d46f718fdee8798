"""`"bwrap": {"home": [...], "env": [...]}`: what a trusted file adds to the @bwrap sandbox. Both
widen it, so an untrusted file's entries are reported and ignored; a home entry that would show
a credential is refused whatever the trust; the user's own file counts too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codecoder.config.trust import TrustState
from codecoder.environments.bwrap.settings import BwrapSettings
from codecoder.session import Runtime
from tests.conftest import RecordingAsker, write_config

SECTION = {"bwrap": {"home": ["~/.m2", ".cache/pip"], "env": ["MY_APP_*", "CARGO_HOME"]}}


def runtime(project: Path) -> Runtime:
    return Runtime(project, asker=RecordingAsker(), audit_log=None)


def test_a_trusted_file_adds_home_entries_and_variables(project: Path) -> None:
    write_config(project, SECTION)
    config = runtime(project).config
    assert config.bwrap == BwrapSettings(("~/.m2", ".cache/pip"), ("MY_APP_*", "CARGO_HOME"))
    assert [(r.kind, r.value) for r in config.rules] == [
        ("bwrap.home", "~/.m2"),
        ("bwrap.home", ".cache/pip"),
        ("bwrap.env", "MY_APP_*"),
        ("bwrap.env", "CARGO_HOME"),
    ]


def test_an_untrusted_file_widens_nothing_and_says_what_it_would(project: Path) -> None:
    write_config(project, SECTION, trusted=False)
    config = runtime(project).config
    assert config.trust.state is TrustState.UNTRUSTED
    assert config.bwrap == BwrapSettings()
    assert [(w.key, w.what) for w in config.trust.widenings] == [
        ("bwrap.home[0]", "shows ~/.m2 (read-only) to commands in the @bwrap sandbox"),
        ("bwrap.home[1]", "shows .cache/pip (read-only) to commands in the @bwrap sandbox"),
        (
            "bwrap.env[0]",
            "passes the environment variable MY_APP_* into the @bwrap sandbox, secret or not",
        ),
        (
            "bwrap.env[1]",
            "passes the environment variable CARGO_HOME into the @bwrap sandbox, secret or not",
        ),
    ]
    assert {d.code for d in config.diagnostics} == {"untrusted"}


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("~/.ssh", "would show ~/.ssh, which a sandbox never sees"),
        ("~/.ssh/id_rsa", "would show ~/.ssh, which a sandbox never sees"),
        ("~/.config/gh", "would show ~/.config/gh, which a sandbox never sees"),
        ("~", "would show the home directory itself, which a sandbox never sees"),
        ("~/../etc", "must not leave the home directory with .."),
        ("/etc", "is not under the home directory"),
    ],
)
def test_a_home_entry_that_would_show_a_credential_is_refused_even_trusted(
    project: Path, entry: str, why: str
) -> None:
    write_config(project, {"bwrap": {"home": [entry, "~/.m2"]}})
    config = runtime(project).config
    (problem,) = [d for d in config.diagnostics if d.code == "bwrap_home_forbidden"]
    assert (problem.severity, problem.key, problem.line) == ("error", "bwrap.home[0]", 4)
    assert why in problem.message
    assert config.bwrap.home == ("~/.m2",)


def test_an_env_entry_that_would_pass_everything_is_refused(project: Path) -> None:
    write_config(project, {"bwrap": {"env": ["*", "OK_NAME"]}})
    config = runtime(project).config
    (problem,) = [d for d in config.diagnostics if d.code == "invalid_bwrap_settings"]
    assert "would pass every variable" in problem.message
    assert config.bwrap.env == ("OK_NAME",)


def test_the_users_own_file_adds_to_the_projects(project: Path, tmp_path: Path) -> None:
    import os

    user = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder" / "config.json"
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({"bwrap": {"home": ["~/.gradle"], "env": ["JAVA_OPTS"]}}))
    write_config(project, SECTION)
    config = runtime(project).config
    assert config.bwrap.home == ("~/.gradle", "~/.m2", ".cache/pip")
    assert config.bwrap.env == ("JAVA_OPTS", "MY_APP_*", "CARGO_HOME")


def test_a_bad_shape_is_a_schema_error_with_its_position(project: Path) -> None:
    write_config(project, '{\n  "bwrap": {"home": "~/.m2"}\n}\n')
    config = runtime(project).config
    (problem,) = [d for d in config.diagnostics if d.severity == "error"]
    assert (problem.code, problem.line) == ("schema", 2)
