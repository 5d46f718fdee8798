"""Command lines of simple commands (SPEC §5): read-only as a whole, output-filter pipelines keyed
as their first command, and the forms that need the host."""

from __future__ import annotations

import pytest

from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import DenyView
from codecoder.permissions.programs.host import needs_host, uses_network

READ_ONLY_LINES = [
    ("cat README.md | head -5", "cat, head"),
    ("grep -rn x . | wc -l", "grep, wc"),
    ("git log --oneline | head -20", "git, head"),
    ("git status && git diff --stat", "git"),
    ("ls -la; pwd", "ls, pwd"),
    ("ls missing || true", "ls, true"),
    ("cd src && ls -la", "cd, ls"),
    ("ls 2>/dev/null", "ls"),
    ("ls >/dev/null 2>&1", "ls"),
    ("ls &>/dev/null", "ls"),
    ("ls 2> /dev/null | wc -l", "ls, wc"),
    ("grep x f 2>&1 | sort | uniq -c | sort -rn | head", "grep, sort, uniq, head"),
    ("cat f >&2", "cat"),
    ("cat f 3>&1 1>&2 2>&3 3>&-", "cat"),
    ("ls |& head", "ls, head"),
    ("find . -name '*.py' | xargs -0 echo 2>/dev/null | wc -l", None),
]


@pytest.mark.parametrize(("command", "programs"), READ_ONLY_LINES)
def test_a_command_line_of_read_only_commands_is_read_only_as_a_whole(
    command: str, programs: str | None
) -> None:
    keyed = key_command(command)
    assert keyed.compound  # still keyed by the whole string: no grant is read from it
    assert keyed.read_only == (programs or "")


NOT_READ_ONLY_LINES = [
    "ls > out",
    "ls >> out",
    "ls 2> err",
    "ls 2>err | wc",
    "ls >&out",
    "ls >| out",
    "ls > '/dev/null'",
    "ls > /dev/null2",
    "ls > /dev/null/x",
    "ls > /dev/stdout",
    "cat < f",
    "cat </dev/tty",
    "cat <<EOF\nx\nEOF",
    "cat <<< x",
    "ls &",
    "ls & wc",
    "ls; rm -rf x",
    "ls && rm x",
    "ls | tee out",
    "ls | xargs rm",
    "ls | sh",
    "ls | 'sh'",
    "cat f | head > out",
    "cat $(echo f)",
    "cat `echo f`",
    "cat <(ls)",
    "X=1 ls",
    "ls $HOME",
    "ls ~",
    "ls *.py > out",  # a glob alone no longer stops a read-only line (test_readonly.py)
    "echo {a,b}",
    "(ls)",
    "{ ls; }",
    "ls\nrm x",
    "ls ;; ls",
    "| ls",
    "ls |",
    "ls &&",
    "a2>f ls",
    "ls 1>/dev/null 2>out",
    "ls 2>&1>out",
    "! ls",
    "time ls",
    "sort -o out f && head f",
    "git branch x && git status",
]


@pytest.mark.parametrize("command", NOT_READ_ONLY_LINES)
def test_a_redirection_substitution_background_job_or_writer_makes_it_not_read_only(
    command: str,
) -> None:
    keyed = key_command(command)
    assert (keyed.compound, keyed.read_only, keyed.filters) == (True, "", "")


def test_an_output_filter_pipeline_is_keyed_as_its_first_command() -> None:
    keyed = key_command("npm test 2>&1 | tail -20")
    key = keyed.permission_key()
    assert (key.raw, key.compound, key.argv, key.filters, key.subject) == (
        "run_command:npm:test",
        False,
        ("npm", "test"),
        "2>&1 | tail -20",
        "npm test 2>&1 | tail -20",
    )
    assert [level.entry for level in key.grant_levels] == [
        "run_command:npm:test",
        "run_command:npm",
    ]
    assert keyed.read_only == ""


@pytest.mark.parametrize(
    ("command", "raw", "filters"),
    [
        ("npm test | grep x | wc -l", "run_command:npm:test", "| grep x | wc -l"),
        (
            "python -m pytest -q tests/test_x.py 2>&1 | tail -30",
            "run_command:python:-m:pytest",
            "2>&1 | tail -30",
        ),
        ("cargo clippy 2>&1 | head -50", "run_command:cargo:clippy", "2>&1 | head -50"),
        ("make 2>&1 | grep -i 'error'", "run_command:make", "2>&1 | grep -i error"),
        ("npm run build |& tail", "run_command:npm:run:build", "|& tail"),
        ("git push 2>&1 | tail -3", "run_command:git:push", "2>&1 | tail -3"),
        ("npm test 2>/dev/null", "run_command:npm:test", "2>/dev/null"),
        ("npm test | sed -n '1,5p'", "run_command:npm:test", "| sed -n 1,5p"),
        ("npm test | awk '{print $1}'", "run_command:npm:test", "| awk '{print $1}'"),
    ],
)
def test_filters_are_re_quoted_from_the_words_read(command: str, raw: str, filters: str) -> None:
    keyed = key_command(command)
    assert (keyed.permission_key().raw, keyed.compound, keyed.filters) == (raw, False, filters)


NOT_FILTER_PIPELINES = [
    "npm test | cat ~/.ssh/id_rsa",
    "npm test | cat /etc/passwd",
    "npm test | head -5 .env",
    "npm test | grep -f ~/.netrc",
    "npm test | grep -r token",
    "npm test | tee log",
    "npm test | sh",
    "npm test | bash -c 'rm x'",
    "npm test | xargs rm",
    "npm test && tail -5 f",
    "npm test; ls",
    "npm test || true",
    "npm test > out | tail",
    "npm test 2>err | tail",
    "npm test | tail > out",
    "npm test | awk '{print ENVIRON[\"TOKEN\"]}'",
    "npm test | awk 'BEGIN{getline l < \"/etc/shadow\"; print l}'",
    "npm test | jq -n env",
    "npm test | sed 'r /etc/passwd'",
    "npm test | sed -n 'w out'",
    "npm test | rg x",
    "npm test | tail -f",
    "env X=1 npm test | tail",
    "python -c 'import os' | tail",
    "npm test $(x) | tail",
    "ls | npm test",
    "npm test & tail",
]


@pytest.mark.parametrize("command", NOT_FILTER_PIPELINES)
def test_a_filter_that_reads_writes_or_runs_anything_else_keeps_the_whole_string_key(
    command: str,
) -> None:
    keyed = key_command(command)
    assert (keyed.compound, keyed.filters) == (True, "")
    assert keyed.permission_key().raw == f"run_command:{__import__('json').dumps(command)}"


def test_deny_rules_see_every_command_of_a_filter_pipeline() -> None:
    views = key_command("npm test 2>&1 | tail -20").permission_key().views
    programs = {view.program for view in views}
    assert {"npm", "tail"} <= programs
    assert DenyView("tail", ("tail", "-20"), 1) in views


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("git", "push"), "git push talks to a remote repository"),
        (("git", "push", "origin", "main"), "git push talks to a remote repository"),
        (("git", "-C", "x", "fetch"), "git fetch talks to a remote repository"),
        (("git", "pull", "--rebase"), "git pull talks to a remote repository"),
        (("git", "clone", "https://x/y.git"), "git clone talks to a remote repository"),
        (("git", "ls-remote", "origin"), "git ls-remote talks to a remote repository"),
        (("git", "remote", "update"), "git remote update talks to a remote repository"),
        (("/usr/lib/git-core/git-push",), "git push talks to a remote repository"),
        (("npm", "publish"), "npm publish talks to a package registry"),
        (("npm", "install"), None),
        (("yarn", "add", "left-pad"), None),
        (("cargo", "publish"), "cargo publish talks to a package registry"),
        (("pip", "install", "-r", "requirements.txt"), None),
        (("twine", "upload", "dist/*"), "twine upload talks to a package registry"),
        (("gh", "pr", "create"), "gh talks to a code host with your token"),
        (("ssh", "host", "ls"), "ssh connects to another machine with your keys"),
        (("curl", "https://example.com"), None),
        (("aws", "s3", "ls"), "aws talks to a cloud service"),
        (("git", "status"), None),
        (("git", "clone", "../local"), "git clone creates a repository, whose .git/config"),
        (("git", "init"), "git init creates a repository, whose .git/config and hooks only"),
        (("git", "-C", "sub", "init", "-q"), "git init creates a repository"),
        (("git", "init", "--bare", "x.git"), None),
        (("git", "clone", "--mirror", "../local", "x"), None),
        (("git", "remote", "show", "-n", "origin"), None),
        (("npm", "test"), None),
        (("cargo", "build"), None),
        (("ls",), None),
    ],
)
def test_the_table_says_which_forms_need_the_host(argv: tuple[str, ...], why: str | None) -> None:
    found = needs_host(argv)
    assert (found is None) == (why is None)
    assert why is None or (found is not None and found.startswith(why))


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("npm", "install"), "npm install fetches packages from the network"),
        (("yarn", "add", "left-pad"), "yarn add fetches packages from the network"),
        (("pip", "install", "-r", "requirements.txt"), "pip install fetches packages"),
        (("python3", "-m", "pip", "install", "-e", "."), "pip install fetches packages"),
        (("pip", "download", "six"), "pip download fetches packages"),
        (("curl", "https://example.com"), "curl fetches from the network"),
        (("npx", "eslint", "."), "npx fetches from the network"),
        (("cargo", "fetch"), "cargo fetch fetches packages"),
        (("go", "mod", "download"), "go mod fetches packages"),
        (("npm", "test"), None),
        (("npm", "publish"), None),
        (("git", "fetch"), None),
        (("ls",), None),
    ],
)
def test_the_table_says_which_forms_use_the_network_and_may_run_contained(
    argv: tuple[str, ...], why: str | None
) -> None:
    found = uses_network(argv)
    assert (found is None) == (why is None)
    assert why is None or (found is not None and found.startswith(why))


def test_a_compound_command_that_holds_a_host_form_needs_the_host() -> None:
    assert key_command("cd app && git push origin main").needs_host.startswith("git push")
    assert key_command("gh pr create --fill").needs_host.startswith("gh talks")
    assert key_command("git add -A && git commit -m x").needs_host == ""
