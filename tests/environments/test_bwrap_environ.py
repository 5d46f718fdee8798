"""What a contained command's environment keeps of the caller's: what commands need (an
allow-list), never a secret in any spelling a name or a value can carry one, git's numbered
configuration whole or not at all, and what a trusted file passes through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environ import contained_environ
from codecoder.environments.bwrap.environment import BwrapEnvironment
from tests.environments.bwrap_support import git, need_bwrap


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_SECRET_ACCESS_KEY", "x"),
        ("AWS_PROFILE", "prod"),
        ("aws_session_token", "x"),
        ("GITHUB_TOKEN", "x"),
        ("GH_ENTERPRISE_TOKEN", "x"),
        ("GITHUB_AUTHTOKEN", "x"),
        ("NPM_TOKEN", "x"),
        ("NODE_AUTH_TOKEN", "x"),
        ("NPM_CONFIG__AUTH", "x"),
        ("CARGO_REGISTRY_TOKEN", "x"),
        ("OPENAI_API_KEY", "x"),
        ("ANTHROPIC_APIKEY", "x"),
        ("MY.API-KEY", "x"),
        ("DB_PASSWORD", "x"),
        ("MYSQL_PWD", "x"),
        ("PGPASSWORD", "x"),
        ("SMTP_PASSWD", "x"),
        ("CLIENT_SECRET", "x"),
        ("MYSECRETVALUE", "x"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
        ("AZURE_CLIENT_ID", "x"),
        ("CI_JOB_JWT", "x"),
        ("VAULT_ADDR", "x"),
        ("DOCKER_HOST", "unix:///run/docker.sock"),
        ("KUBECONFIG", "/k"),
        ("SSH_AUTH_SOCK", "/run/agent"),
        ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/bus"),
        ("XDG_RUNTIME_DIR", "/run/user/0"),
        ("XDG_CONFIG_HOME", "/home/u/.config"),
        ("LD_PRELOAD", "/x.so"),
        ("BASH_ENV", "/x"),
        ("SESSION_COOKIE", "x"),
        ("SENTRY_DSN", "https://k@sentry.io/1"),
        ("CODECODER_DAEMON", "0"),
        ("DATABASE_URL", "postgres://app:hunter2@db/app"),
        ("UPSTREAM", "https://user:pw@example.com/repo.git"),
        ("DEPLOY", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc"),
        # Names no heuristic knew (issue 33): the allow-list keeps every unknown name out.
        ("GITHUB_PAT", "ghp_x"),
        ("SSHPASS", "x"),
        ("BORG_PASSPHRASE", "x"),
        ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/x"),
        ("SONAR_LOGIN", "x"),
        ("RESTIC_PASSWORD_COMMAND", "pass show x"),
        ("TWILIO_SID", "x"),
        ("STRIPE_SK", "sk_live_x"),
        # Allowed families that carry their own secrets.
        ("PIP_INDEX_URL", "https://user:pw@pypi.example/simple"),
        ("npm_config_//registry.npmjs.org/:_authToken", "x"),
        ("POETRY_HTTP_BASIC_CORP_PASSWORD", "x"),
        ("UV_PUBLISH_TOKEN", "x"),
        ("CARGO_REGISTRIES_CORP_TOKEN", "x"),
        ("MAVEN_OPTS", "-Xmx1g -Dsigning.password=hunter2"),
        ("BUNDLE_GEMS__EXAMPLE__COM", "user:pass"),
        ("GIT_ASKPASS", "/x"),
        ("GIT_SSH_COMMAND", "ssh -i /k"),
    ],
)
def test_a_secret_never_reaches_the_command(name: str, value: str) -> None:
    assert name not in contained_environ({name: value}, home="/home/u")


@pytest.mark.parametrize(
    "name",
    ["PATH", "LANG", "LC_ALL", "TERM", "COLUMNS", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
     "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "NODE_OPTIONS", "PYTHONPATH", "VIRTUAL_ENV",
     "DO_NOT_TRACK", "GITHUB_ACTIONS", "CI", "RUST_BACKTRACE", "CARGO_HOME", "RUSTUP_HOME",
     "GOPATH", "GOFLAGS", "JAVA_HOME", "GRADLE_USER_HOME", "npm_config_cache", "PIP_CACHE_DIR",
     "MAKEFLAGS", "CFLAGS"],
)  # fmt: skip
def test_what_commands_need_stays(name: str) -> None:
    assert contained_environ({name: "value"}, home="/home/u")[name] == "value"


@pytest.mark.parametrize(
    "name",
    ["MONKEY_BUSINESS", "KEYBOARD_LAYOUT", "PASSED_TESTS", "PWD", "OLDPWD", "SHLVL",
     "GOOGLE_CLOUD_PROJECT", "GITHUB_REPOSITORY", "DOCKER_HOST", "KUBECONFIG",
     "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "LD_PRELOAD", "BASH_ENV", "GIT_DIR",
     "GIT_CONFIG_PARAMETERS", "HTTPS_PROXY"],
)  # fmt: skip
def test_an_unknown_variable_stays_out_whatever_it_is_called(name: str) -> None:
    assert name not in contained_environ({name: "value"}, home="/home/u")


GEMINI_GIT_CONFIG = {
    "GIT_CONFIG_COUNT": "3",
    "GIT_CONFIG_KEY_0": "core.pager",
    "GIT_CONFIG_VALUE_0": "cat",
    "GIT_CONFIG_KEY_1": "color.ui",
    "GIT_CONFIG_VALUE_1": "never",
    "GIT_CONFIG_KEY_2": "core.editor",
    "GIT_CONFIG_VALUE_2": "true",
}


def test_gits_numbered_configuration_is_kept_whole() -> None:
    """Issue 32 item 2: dropping the `*_KEY_*` names (they say KEY) but keeping the count made
    every git command die `missing config key GIT_CONFIG_KEY_0`."""
    kept = contained_environ(GEMINI_GIT_CONFIG, home="/home/u")
    assert {k: v for k, v in kept.items() if k.startswith("GIT_CONFIG")} == GEMINI_GIT_CONFIG


@pytest.mark.parametrize(
    "change",
    [
        {"GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": "store"},
        {"GIT_CONFIG_KEY_1": "http.https://x.example/.extraheader"},
        {"GIT_CONFIG_VALUE_1": "https://user:pw@git.example/"},
        {"GIT_CONFIG_COUNT": "4"},  # a key and value missing: git would refuse to start
        {"GIT_CONFIG_COUNT": "two"},
    ],
)
def test_gits_numbered_configuration_is_dropped_whole(change: dict[str, str]) -> None:
    kept = contained_environ({**GEMINI_GIT_CONFIG, **change}, home="/home/u")
    assert not [k for k in kept if k.startswith("GIT_CONFIG")]


def test_home_and_tmpdir_are_the_sandboxes_a_trusted_pass_list_wins_and_injected_last() -> None:
    environ = {
        "HOME": "/root",
        "TMPDIR": "/var/x",
        "MY_TOKEN": "t",
        "OTHER_TOKEN": "o",
        "HTTP_PROXY": "http://corp:3128",
    }
    kept = contained_environ(
        environ,
        home="/home/u",
        passed=("MY_*",),
        injected={"A": "b", "HTTP_PROXY": "http://127.0.0.1:3128"},
    )
    assert kept == {
        "HOME": "/home/u",
        "TMPDIR": "/tmp",
        "MY_TOKEN": "t",
        "A": "b",
        "HTTP_PROXY": "http://127.0.0.1:3128",
    }


def test_in_a_real_sandbox_git_works_with_gemini_clis_configuration_and_no_secret_is_seen(
    tmp_path: Path,
) -> None:
    need_bwrap()
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    secrets = {
        "GITHUB_PAT": "pat-canary",
        "SSHPASS": "sshpass-canary",
        "BORG_PASSPHRASE": "borg-canary",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/slack-canary",
        "SONAR_LOGIN": "sonar-canary",
    }
    environ = {**os.environ, **GEMINI_GIT_CONFIG, **secrets}
    env = BwrapEnvironment(root, environ=environ, warm=False)
    try:
        result = env.run(
            CommandRequest(
                cwd=root,
                script="git status --short && git config core.pager && env",
                writable=True,
                timeout=30,
            )
        )
    finally:
        env.close()
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("cat\n")
    assert not [value for value in secrets.values() if value in result.stdout]
