"""What a contained command's environment keeps of the caller's: no secret, in any spelling a
name or a value can carry one, and what a trusted file passes through."""

from __future__ import annotations

import pytest

from codecoder.environments.bwrap.environ import contained_environ, is_secret_variable


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
    ],
)
def test_a_secret_never_reaches_the_command(name: str, value: str) -> None:
    assert is_secret_variable(name, value)
    assert name not in contained_environ({name: value}, home="/home/u")


@pytest.mark.parametrize(
    "name",
    ["PATH", "LANG", "TERM", "PWD", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "SSL_CERT_FILE",
     "NODE_EXTRA_CA_CERTS", "PYTHONPATH", "VIRTUAL_ENV", "DO_NOT_TRACK", "GITHUB_ACTIONS",
     "RUST_BACKTRACE", "MONKEY_BUSINESS", "KEYBOARD_LAYOUT", "PASSED_TESTS"],
)  # fmt: skip
def test_ordinary_variables_stay(name: str) -> None:
    assert contained_environ({name: "value"}, home="/home/u")[name] == "value"


def test_home_and_tmpdir_are_the_sandboxes_and_a_trusted_pass_list_wins() -> None:
    environ = {"HOME": "/root", "TMPDIR": "/var/x", "MY_TOKEN": "t", "OTHER_TOKEN": "o"}
    kept = contained_environ(environ, home="/home/u", passed=("MY_*",), extra={"A": "b"})
    assert kept == {"HOME": "/home/u", "TMPDIR": "/tmp", "MY_TOKEN": "t", "A": "b"}
