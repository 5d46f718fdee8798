"""@bwrap with real bubblewrap: commands run, git works, the workspace's protected paths stay
read-only, the home is empty but for toolchains, secrets stay out, nothing outlives a call.

The attacks (network, sockets, privileges, host processes, escapes) are in test_bwrap_attacks.py;
the fallbacks where bubblewrap cannot run, in test_bwrap_fallback.py.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.settings import BwrapSettings
from codecoder.environments.egress import Egress
from codecoder.environments.placeholders import PLACEHOLDERS
from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import (
    Cancelled,
    ExecutionFailed,
    ExecutionTimeout,
    SandboxUnavailable,
)
from tests.environments.bwrap_support import (
    bwrap,
    git,
    need_bwrap,
    repo,
    run,
    survivors,
    tree,
)

__all__ = ["bwrap", "repo"]  # fixtures


def test_a_command_runs_in_the_workspace_and_reports_output_and_exit_code(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    result = run(bwrap, "pwd; cat README.md; echo oops >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, f"{repo}\nhello\n", "oops\n")


def test_argv_runs_without_a_shell_and_a_missing_program_is_127(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    echoed = bwrap.run(CommandRequest(cwd=repo, argv=("echo", "$HOME", "*"), writable=True))
    missing = bwrap.run(CommandRequest(cwd=repo, argv=("no-such-program-xyz",)))
    assert (echoed.exit_code, echoed.stdout) == (0, "$HOME *\n")
    assert (missing.exit_code, missing.stderr) == (127, "no-such-program-xyz: command not found\n")


def test_stdin_is_passed_to_the_command(bwrap: BwrapEnvironment, repo: Path) -> None:
    result = bwrap.run(CommandRequest(cwd=repo, argv=("cat",), stdin=b"data"))
    assert result.stdout == "data"


def test_git_add_commit_stash_and_checkout_b_work_contained(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    script = """
        set -e
        echo change >> README.md
        echo new > new.txt
        git add README.md new.txt
        git commit -q -m contained
        echo wip >> README.md
        git stash -q
        git checkout -q -b feature
        git stash pop -q
        git add -A && git commit -q -m 'on feature'
        git log --format=%s
    """
    result = run(bwrap, script)
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        "on feature\ncontained\nfirst\n",
        "",
    )
    assert git(repo, "log", "--format=%s", "feature").splitlines() == [
        "on feature",
        "contained",
        "first",
    ]
    assert git(repo, "branch", "--show-current").strip() == "feature"
    assert (repo / ".git" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


def test_the_sandbox_git_has_an_identity_and_nothing_else_of_the_users_git_config(
    bwrap: BwrapEnvironment,
) -> None:
    result = run(bwrap, "git config --global --list --show-origin | cut -f2-")
    lines = result.stdout.splitlines()
    assert [line.split("=")[0] for line in lines if not line.startswith("user.")] == [
        "safe.directory",
        "safe.barerepository",
    ]


@pytest.mark.parametrize(
    "target",
    [
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        ".git/info/exclude",
        ".gitmodules",
        "codecoder.json",
        ".codecoder/note",
        ".codecoder/granted.json",
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".mcp.json",
    ],
)
@pytest.mark.parametrize(
    "how",
    [
        "echo planted > {t}",
        "echo planted >> {t}",
        "cp /etc/hostname {t}",
        "mv -f $(mktemp -p .) {t}",
        "rm -f {t} && echo planted > {t}",
        "ln -sf /etc/hostname {t}",
        'python3 -c \'open("{t}", "w").write("planted")\'',
        "truncate -s 0 {t}",
        "ln -sfn $PWD/$(dirname {t}) lnk && cp /etc/hostname lnk/$(basename {t})",
    ],
)
def test_a_protected_path_cannot_be_written_in_any_spelling(
    bwrap: BwrapEnvironment, repo: Path, target: str, how: str
) -> None:
    before = tree(repo)
    result = run(bwrap, how.format(t=target) + "; true")
    after = tree(repo)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # mktemp's file and the link may stay behind in the workspace; nothing else changes.
    assert {c for c in changed if not c.startswith(("tmp.", "lnk"))} == set(), result.stderr


def test_a_nested_repository_and_a_gitdir_files_target_are_protected_too(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    target = repo / "elsewhere.git"
    git(repo, "init", "-q", "--separate-git-dir", str(target), str(repo / "linked"))
    before = tree(repo)
    script = """
        for d in vendor/lib/.git elsewhere.git; do
            echo '[core] fsmonitor = touch /tmp/x' >> $d/config
            echo 'touch pwned' > $d/hooks/post-checkout
            echo '*' >> $d/info/exclude
        done
        echo 'gitdir: /tmp' > linked/.git
        true
    """
    run(bwrap, script)
    assert tree(repo) == before


def test_git_still_writes_its_own_files_in_a_nested_repository(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q", "-b", "main")
    result = run(bwrap, "cd vendor/lib && echo x > f && git add f && git commit -q -m n && echo ok")
    assert (result.stdout, result.stderr) == ("ok\n", "")
    assert git(nested, "log", "--format=%s").strip() == "n"


@pytest.mark.parametrize(
    "plant",
    [
        ".claude/settings.json",
        ".gemini/settings.json",
        ".codex/config.toml",
        ".vscode/tasks.json",
        ".mcp.json",
        "sub/.git/hooks/post-checkout",
        "sub/.gitmodules",
        ".git/commondir",
        ".git/config.worktree",
    ],
)
def test_a_protected_path_a_call_creates_is_quarantined_and_the_call_fails(
    bwrap: BwrapEnvironment, repo: Path, plant: str
) -> None:
    for existing in (".claude", ".mcp.json"):
        path = repo / existing
        if path.is_dir():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        elif path.exists():
            path.unlink()
    try:
        said = run(bwrap, f"mkdir -p $(dirname {plant}) && echo planted > {plant}")
    except ExecutionFailed as exc:
        assert "sandboxed tools may never create" in str(exc)
    else:
        # A missing agent setting at the top is an inert placeholder, bound read-only
        # (environments.placeholders): it could not even be created. A placeholder is an
        # empty directory, so writing `.mcp.json` itself fails on what it is.
        assert plant.split("/")[0] in PLACEHOLDERS
        assert "Read-only file system" in said.stderr or (
            plant == ".mcp.json" and "Is a directory" in said.stderr
        )
    assert not (repo / plant).is_file() or "planted" not in (repo / plant).read_text()
    assert "planted" not in "".join(
        p.read_text(errors="replace")
        for p in repo.rglob("*")
        if p.is_file() and ".git/" not in str(p)
    )


def test_a_missing_hooks_directory_cannot_be_planted(bwrap: BwrapEnvironment, repo: Path) -> None:
    hooks = repo / ".git" / "hooks"
    for hook in hooks.iterdir():
        hook.unlink()
    hooks.rmdir()
    with pytest.raises(ExecutionFailed, match=r"\.git/hooks"):
        run(
            bwrap, "mkdir .git/hooks && printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit"
        )
    assert not hooks.exists()


def test_writes_outside_the_workspace_never_reach_the_host(
    bwrap: BwrapEnvironment, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host\n")
    home = Path.home()
    script = f"""
        for f in /etc/codecoder-test /usr/codecoder-test /var/tmp/codecoder-test \\
                 /tmp/codecoder-test ~/.bashrc ~/codecoder-test {outside}; do
            echo planted > $f 2>/dev/null && echo "wrote $f"
        done
        true
    """
    result = run(bwrap, script)
    assert outside.read_text() == "host\n"
    for path in ("/etc/codecoder-test", "/usr/codecoder-test", "/var/tmp/codecoder-test"):
        assert not os.path.exists(path)
    assert not (home / "codecoder-test").exists()
    # What it may write (its private /tmp and home) is gone with the call.
    assert "wrote /tmp/codecoder-test" in result.stdout


def test_a_read_only_call_writes_nothing_but_its_private_tmp_and_home(
    bwrap: BwrapEnvironment, repo: Path
) -> None:
    before = tree(repo)
    script = """
        for f in README.md new.txt .git/index .git/refs/heads/x /tmp/ok ~/ok; do
            echo x > $f 2>/dev/null && echo "wrote $f"
        done
        git commit -q --allow-empty -m nope 2>/dev/null || echo "no commit"
    """
    result = run(bwrap, script, writable=False)
    assert result.stdout == "wrote /tmp/ok\nwrote ~/ok\nno commit\n".replace("~", str(Path.home()))
    assert tree(repo) == before


def test_the_home_is_empty_but_for_the_toolchains_the_command_needs(
    repo: Path, tmp_path: Path
) -> None:
    need_bwrap()
    home = tmp_path / "home"
    tool = home / ".tool" / "bin"
    tool.mkdir(parents=True)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\n")
    (home / ".netrc").write_text("machine x password y\n")
    (home / ".other").mkdir()
    (home / ".cargo").mkdir()
    (home / ".cargo" / "credentials.toml").write_text("token = 'x'\n")
    (home / ".cargo" / "config.toml").write_text("[build]\n")
    script = tool / "listhome"
    script.write_text('#!/bin/sh\nls -A "$HOME"; cat ~/.ssh/id_rsa ~/.cargo/credentials.toml\n')
    script.chmod(0o755)
    cargo = home / ".cargo" / "bin"
    cargo.mkdir()
    (cargo / "cargo-like").write_text("#!/bin/sh\nls -A ~/.cargo; cat ~/.cargo/credentials.toml\n")
    (cargo / "cargo-like").chmod(0o755)
    environ = {"HOME": str(home), "PATH": f"{tool}:{cargo}:/usr/bin:/bin"}
    env = BwrapEnvironment(repo, environ=environ)
    try:
        listed = env.run(CommandRequest(cwd=repo, argv=("listhome",)))
        cargo_run = env.run(CommandRequest(cwd=repo, argv=("cargo-like",)))
        plain = env.run(CommandRequest(cwd=repo, script="ls -A ~; echo $HOME"))
    finally:
        env.close()
    # The toolchains of the PATH are there for every command (it may run them by name);
    # nothing else of the home, and no credential.
    assert listed.stdout.split() == [".cargo", ".gitconfig", ".tool"]
    assert "No such file" in listed.stderr
    assert cargo_run.stdout.split() == ["bin", "config.toml", "credentials.toml"]
    assert "token" not in cargo_run.stdout
    assert plain.stdout == f".cargo\n.gitconfig\n.tool\n{home}\n"


def test_a_program_the_command_runs_by_name_finds_its_home_toolchain(
    repo: Path, tmp_path: Path
) -> None:
    """`make test` running `python` from ~/.pyenv (issue 34): no word of the command names it."""
    need_bwrap()
    home = tmp_path / "home"
    shims = home / ".pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / "greet").write_text("#!/bin/sh\necho greeted\n")
    (shims / "greet").chmod(0o755)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (repo / "Makefile").write_text("test:\n\tgreet\n")
    environ = {"HOME": str(home), "PATH": f"{shims}:{home / '.ssh'}:/usr/bin:/bin"}
    env = BwrapEnvironment(repo, environ=environ)
    try:
        made = env.run(CommandRequest(cwd=repo, argv=("make", "-s", "test"), writable=True))
        keys = env.run(CommandRequest(cwd=repo, script="cat ~/.ssh/id_rsa; ls -A ~"))
    finally:
        env.close()
    assert (made.exit_code, made.stdout) == (0, "greeted\n"), made.stderr
    assert made.extra["sandbox"]["toolchains"] == [str(home / ".pyenv")]
    # A PATH entry that is a credential directory is never shown.
    assert "PRIVATE KEY" not in keys.stdout
    assert keys.stdout.split() == [".gitconfig", ".pyenv"]


def test_a_trusted_home_entry_is_shown_read_only_and_a_credential_never(
    repo: Path, tmp_path: Path
) -> None:
    need_bwrap()
    home = tmp_path / "home"
    (home / ".m2").mkdir(parents=True)
    (home / ".m2" / "settings.xml").write_text("<settings/>\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    # The file named itself: a shown directory's own configuration is covered otherwise
    # (tests/environments/test_bwrap_home_credentials.py).
    settings = BwrapSettings(home=("~/.m2", "~/.m2/settings.xml", "~/.ssh", ".ssh/id_rsa"))
    env = BwrapEnvironment(repo, settings, environ={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    try:
        result = run(env, "ls -A ~; cat ~/.m2/settings.xml; echo x > ~/.m2/settings.xml || echo ro")
    finally:
        env.close()
    assert result.stdout.split("\n")[:3] == [".gitconfig", ".m2", "<settings/>"]
    assert result.stdout.endswith("ro\n")
    assert (home / ".m2" / "settings.xml").read_text() == "<settings/>\n"


def test_the_state_and_configuration_directories_are_hidden_wherever_xdg_puts_them(
    bwrap: BwrapEnvironment, tmp_path: Path
) -> None:
    state = Path(os.environ["XDG_STATE_HOME"]) / "codecoder"
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "codecoder"
    for directory in (state, config):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "secret").write_text("trust records\n")
    env = BwrapEnvironment(bwrap.workspace)
    try:
        result = run(env, f"ls -A {state} {config}; cat {state}/secret {config}/secret; true")
    finally:
        env.close()
    assert "trust records" not in result.stdout
    assert "secret" not in result.stdout


def test_secrets_in_the_environment_never_reach_the_command(repo: Path) -> None:
    need_bwrap()
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "AWS_SECRET_ACCESS_KEY": "s1",
        "AWS_PROFILE": "prod",
        "GITHUB_TOKEN": "s2",
        "GH_TOKEN": "s3",
        "NPM_TOKEN": "s4",
        "MY_API_KEY": "s5",
        "DB_PASSWORD": "s6",
        "SSH_AUTH_SOCK": "/run/user/0/agent.sock",
        "DATABASE_URL": "postgres://app:s7@db/app",
        "CI_JOB_JWT": "s8",
        "GOOGLE_APPLICATION_CREDENTIALS": "/home/x/key.json",
        "XDG_STATE_HOME": "/somewhere",
        "KEEP_ME": "kept",
        "GIT_AUTHOR_NAME": "A",
        "PASSED_THROUGH_TOKEN": "trusted",
    }
    settings = BwrapSettings(env=("PASSED_*",))
    env = BwrapEnvironment(repo, settings, environ=environ)
    try:
        result = env.run(CommandRequest(cwd=repo, argv=("env",)))
    finally:
        env.close()
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert {k: v for k, v in seen.items() if k in environ} == {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "GIT_AUTHOR_NAME": "A",
        "PASSED_THROUGH_TOKEN": "trusted",
    }
    assert not any(secret in result.stdout for secret in ("s1", "s2", "s5", "s7", "s8"))


def test_nothing_outlives_the_call_not_even_a_double_forked_daemon(
    bwrap: BwrapEnvironment,
) -> None:
    marker = f"31337.{os.getpid()}"
    script = f"""
        (setsid sleep {marker} &)
        nohup sleep {marker} >/dev/null 2>&1 &
        python3 -c 'import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
' &
        disown -a
        sleep 0.3
        echo started
    """
    result = run(bwrap, script)
    assert result.stdout == "started\n"
    assert survivors(marker) == []


def test_a_timeout_kills_the_whole_sandbox(bwrap: BwrapEnvironment) -> None:
    marker = f"31338.{os.getpid()}"
    started = time.monotonic()
    with pytest.raises(ExecutionTimeout):
        run(bwrap, f"(setsid sleep {marker} &); sleep {marker}", timeout=1.0)
    assert time.monotonic() - started < 10
    assert survivors(marker) == []


def test_a_cancelled_call_is_stopped_and_leaves_nothing(bwrap: BwrapEnvironment) -> None:
    marker = f"31339.{os.getpid()}"
    cancel = threading.Event()
    threading.Timer(0.8, cancel.set).start()
    request = CommandRequest(
        cwd=bwrap.workspace,
        script=f"(setsid sleep {marker} &); sleep {marker}",
        writable=True,
        cancel=cancel,
    )
    with pytest.raises(Cancelled):
        bwrap.run(request)
    assert survivors(marker) == []


def test_an_interrupt_kills_the_sandbox_too(bwrap: BwrapEnvironment) -> None:
    marker = f"31340.{os.getpid()}"

    def interrupt() -> None:
        time.sleep(0.8)
        import _thread

        _thread.interrupt_main()

    threading.Thread(target=interrupt).start()
    with pytest.raises(KeyboardInterrupt):
        run(bwrap, f"(setsid sleep {marker} &); sleep {marker}")
    assert survivors(marker) == []


def test_a_sandbox_that_cannot_be_built_fails_the_call_and_runs_nothing(repo: Path) -> None:
    need_bwrap()
    refusing = repo.parent / "refusing-bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed' >&2\nexit 1\n")
    refusing.chmod(0o755)
    env = BwrapEnvironment(repo, bwrap=str(refusing))
    with pytest.raises(SandboxUnavailable, match=r"could not be built.*namespace failed"):
        env.run(CommandRequest(cwd=repo, argv=("touch", str(repo / "ran"))))
    assert not (repo / "ran").exists()


def test_a_missing_working_directory_is_a_clear_error(bwrap: BwrapEnvironment, repo: Path) -> None:
    with pytest.raises(ExecutionFailed, match="missing-dir does not exist"):
        bwrap.run(CommandRequest(cwd=repo / "missing-dir", argv=("true",)))


def test_the_egress_proxy_serves_a_listed_host_asks_for_any_https_host_and_refuses_other_ports(
    repo: Path,
) -> None:
    import socket

    need_bwrap()
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(4)
    port = upstream.getsockname()[1]

    def answer() -> None:
        conn, _ = upstream.accept()
        with conn:
            conn.sendall(b"upstream says hi\n")

    threading.Thread(target=answer, daemon=True).start()
    decided: list[tuple[str, int]] = []
    recorded: list[object] = []

    class Gate:
        def admit(self, host: str, port: int) -> str | None:
            decided.append((host, port))
            return None if host == "127.0.0.1" else f"network:{host} was not allowed (test)"

        def record(self, connection: object) -> None:
            recorded.append(connection)

    client = f"""
import os, socket
def connect(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(f"CONNECT {{target}} HTTP/1.1\\r\\nHost: {{target}}\\r\\n\\r\\n".encode())
    return s.recv(300).decode(errors="replace")
print(os.environ["HTTPS_PROXY"])
print(connect("127.0.0.1:{port}").splitlines()[0])
print(connect("example.org:443").splitlines()[-1])
print(connect("example.org:25").splitlines()[-1])
"""
    env = BwrapEnvironment(repo, egress=Egress((f"127.0.0.1:{port}",)))
    try:
        result = env.run(
            CommandRequest(cwd=repo, argv=("python3", "-c", client), network=Gate(), writable=True)
        )
    finally:
        env.close()
        upstream.close()
    assert result.stdout.splitlines() == [
        "http://127.0.0.1:3128",
        "HTTP/1.1 200 Connection established",
        "codecoder egress: network:example.org was not allowed (test)",
        "codecoder egress: example.org:25: only port 443 (https) is reached from a sandbox, "
        'unless a trusted codecoder.json lists "example.org:25" in docker.network.allow',
    ], result.stderr
    # Port 25 is refused before anyone is asked.
    assert decided == [("127.0.0.1", port), ("example.org", 443)]
    assert len(recorded) == 3


def test_the_call_reports_the_toolchains_it_showed(repo: Path, tmp_path: Path) -> None:
    need_bwrap()
    (tmp_path / "home").mkdir()
    env = BwrapEnvironment(repo, environ={"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    try:
        result = env.run(CommandRequest(cwd=repo, argv=("true",)))
    finally:
        env.close()
    assert result.extra["sandbox"] == {"toolchains": [], "writable": False}
    assert json.dumps(result.extra)  # plain data


def test_the_confine_helper_is_installed_executable(bwrap: BwrapEnvironment) -> None:
    assert stat.S_IMODE(bwrap.helper.stat().st_mode) & 0o111


def test_run_command_reaches_a_granted_host_through_the_egress_proxy_and_it_is_audited(
    repo: Path, tmp_path: Path
) -> None:
    import socket

    from codecoder.foundation.decision import Answer
    from codecoder.session import Runtime
    from tests.conftest import RecordingAsker, write_config

    need_bwrap()
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(4)
    port = upstream.getsockname()[1]

    def answer() -> None:
        conn, _ = upstream.accept()
        with conn:
            conn.sendall(b"hello from upstream\n")

    threading.Thread(target=answer, daemon=True).start()
    write_config(
        repo,
        {
            "docker": {"network": {"allow": [f"127.0.0.1:{port}"]}},
            "allowlist": {"network:127.0.0.1": "AlwaysThisProject"},
        },
    )
    client = (
        "import socket; s = socket.create_connection(('127.0.0.1', 3128), timeout=5); "
        f"s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n'); "
        "data = b''.join(iter(lambda: s.recv(100), b'')).decode(); "
        "print(data.replace(chr(13), '').replace(chr(10) * 2, chr(10)), end='')"
    )
    audit = tmp_path / "audit.jsonl"
    try:
        asker = RecordingAsker(Answer.SESSION)
        with Runtime(repo, asker=asker, audit_log=audit) as runtime:
            session = runtime.session()
            outcome = session.call("run_command", {"command": f'/usr/bin/python3 -c "{client}"'})
    finally:
        upstream.close()
    assert outcome.error is None, outcome.to_json()
    assert outcome.unwrap().data["stdout"] == (
        "HTTP/1.1 200 Connection established\nhello from upstream\n"
    )
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    network = [r for r in records if r["tool"] == "network"]
    assert [(r["outcome"], r["network"]["host"], r["network"]["port"]) for r in network] == [
        ("ok", "127.0.0.1", port)
    ]


def test_the_commit_tool_commits_contained_and_its_hook_runs_inside(repo: Path) -> None:
    from codecoder.foundation.decision import Answer
    from codecoder.session import Runtime
    from tests.conftest import RecordingAsker

    need_bwrap()
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch /tmp/hook-ran-inside && echo hook-ran >&2\n")
    (repo / "new.txt").write_text("contained\n")
    with Runtime(repo, asker=RecordingAsker(Answer.ONCE)) as runtime, runtime.session() as s:
        assert runtime.environment_of("commit") is EnvironmentTag.BWRAP
        outcome = s.call("commit", {"message": "from the sandbox", "paths": ["new.txt"]})
    assert outcome.ok, outcome.to_json()
    assert "hook-ran" in outcome.unwrap().output
    assert git(repo, "log", "-1", "--format=%s").strip() == "from the sandbox"
    assert not Path("/tmp/hook-ran-inside").exists()  # the hook's /tmp was the sandbox's


def test_a_sandbox_that_failed_to_build_once_is_built_again(repo: Path) -> None:
    """bubblewrap fails now and then when a host mount comes or goes while it remounts the file
    system (containers/bubblewrap#650): nothing ran, so the call builds a new sandbox."""
    need_bwrap()
    from codecoder.environments.bwrap.probe import bwrap_binary

    tries = repo.parent / "tries"
    flaky = repo.parent / "flaky-bwrap"
    flaky.write_text(
        "#!/bin/sh\n"
        f"echo x >> {tries}\n"
        f"if [ $(wc -l < {tries}) -lt 2 ]; then\n"
        "  echo 'bwrap: Can'\"'\"'t bind mount /oldroot/ on /newroot/: Invalid argument' >&2\n"
        "  exit 1\n"
        "fi\n"
        f'exec {bwrap_binary()} "$@"\n'
    )
    flaky.chmod(0o755)
    env = BwrapEnvironment(repo, bwrap=str(flaky))
    result = env.run(CommandRequest(cwd=repo, argv=("echo", "built"), writable=True))
    assert (result.exit_code, result.stdout) == (0, "built\n")
    assert tries.read_text().count("x") == 2


def test_a_program_in_a_workspace_under_the_home_shows_no_other_project(tmp_path: Path) -> None:
    need_bwrap()
    home = tmp_path / "home"
    workspace = home / "projects" / "mine"
    (workspace / "node_modules" / ".bin").mkdir(parents=True)
    (home / "projects" / "other").mkdir()
    (home / "projects" / "other" / ".env").write_text("SECRET=1\n")
    tool = workspace / "node_modules" / ".bin" / "tool"
    tool.write_text("#!/bin/sh\nls -A ~/projects\n")
    tool.chmod(0o755)
    environ = {"HOME": str(home), "PATH": f"{tool.parent}:/usr/bin:/bin"}
    env = BwrapEnvironment(workspace, environ=environ)
    result = env.run(CommandRequest(cwd=workspace, argv=("tool",)))
    assert result.stdout == "mine\n"
    assert result.extra["sandbox"]["toolchains"] == []
