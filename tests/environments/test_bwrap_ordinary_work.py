"""Ordinary work still runs in @bwrap after round 4's protections (issue 33): a C build with make
and cc in the workspace, `pip install --target` from a local wheel with a pip cache, and
`npm install` of a local package with npm's cache, the user's caches shown read-only from the
home as a trusted file shows them (their configuration covered), each call's writes to a cache
of its own in the sandbox's home. Git's own work is in
tests/environments/test_bwrap_protected_paths.py. Nothing here reaches the network."""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.settings import BwrapSettings
from tests.environments.bwrap_support import need_bwrap, repo

__all__ = ["repo"]  # fixtures


def contained(env: BwrapEnvironment, script: str) -> tuple[int, str]:
    done = env.run(CommandRequest(cwd=env.workspace, script=script, writable=True, timeout=120))
    return done.exit_code, done.stdout + done.stderr


def test_a_make_and_cc_build_in_the_workspace(repo: Path) -> None:
    need_bwrap()
    (repo / "hello.c").write_text('#include <stdio.h>\nint main(void){puts("built");return 0;}\n')
    (repo / "Makefile").write_text("hello: hello.c\n\tcc -O2 -o $@ $<\n")
    env = BwrapEnvironment(repo, warm=False)
    try:
        code, said = contained(env, "make -s && ./hello && stat -c %a hello")
    finally:
        env.close()
    assert (code, said) == (0, "built\n755\n"), said


def wheel(directory: Path) -> Path:
    """A minimal pure-Python wheel of a package `tinypkg`."""
    path = directory / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("tinypkg/__init__.py", "VALUE = 'installed'\n")
        archive.writestr(
            "tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"
        )
        archive.writestr(
            "tinypkg-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr("tinypkg-1.0.dist-info/RECORD", "")
    return path


def test_pip_install_target_and_npm_install_with_their_caches(repo: Path, tmp_path: Path) -> None:
    need_bwrap()
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    home = tmp_path / "home"
    (home / ".cache" / "pip").mkdir(parents=True)
    (home / ".cache" / "pip" / "selfcheck.json").write_text("{}\n")
    (home / ".npm").mkdir()
    (home / ".npmrc").write_text("//registry.npmjs.org/:_authToken=npm-canary\n")
    wheels = repo / "wheels"
    wheels.mkdir()
    wheel(wheels)
    package = repo / "local-pkg"
    package.mkdir()
    (package / "package.json").write_text('{"name": "local-pkg", "version": "1.0.0"}\n')
    (package / "index.js").write_text("module.exports = 'npm installed';\n")
    (repo / "app").mkdir()
    (repo / "app" / "package.json").write_text('{"name": "app", "version": "1.0.0"}\n')
    (home / ".npm" / "_cacache").mkdir()  # the human's cache, shown read-only
    settings = BwrapSettings(home=("~/.cache/pip", "~/.npm"))
    environ = {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    env = BwrapEnvironment(repo, settings, environ=environ, warm=False)
    try:
        code, said = contained(
            env,
            f"""set -e
{sys.executable} -m pip install -q --disable-pip-version-check --no-index \\
    --find-links wheels --target deps --cache-dir ~/.cache/pip-call tinypkg
PYTHONPATH=deps {sys.executable} -c 'import tinypkg; print(tinypkg.VALUE)'
cd app && npm install --offline --no-audit --no-fund --cache ~/.npm-call ../local-pkg >/dev/null
node -e 'console.log(require("local-pkg"))'
ls ~/.npm/_cacache >/dev/null; cat ~/.npmrc 2>/dev/null || true""",
        )
    finally:
        env.close()
    assert code == 0, said
    assert said.split("\n")[:2] == ["installed", "npm installed"], said
    assert "npm-canary" not in said
    assert (repo / "deps" / "tinypkg" / "__init__.py").is_file()
    assert (repo / "app" / "node_modules" / "local-pkg").exists()


# What every account reads: after what the host keeps private is hidden
# (environments.privatefiles), none of it is (git, python, the CA bundle, locales, /usr/share,
# the name service's files, the CPU count the C library reads from /sys).
ORDINARY_READS = """
set -e
git --version >/dev/null
python3 -c 'import json, ssl, os; ssl.create_default_context(); print("cpus", os.cpu_count())'
head -1 /etc/passwd | cut -d: -f1
test -r /etc/resolv.conf && test -r /etc/hosts && test -r /etc/nsswitch.conf
grep -q BEGIN /etc/ssl/certs/ca-certificates.crt && echo ca-bundle
ls /usr/share/zoneinfo/UTC /usr/share/i18n/SUPPORTED >/dev/null && echo usr-share
locale -a >/dev/null && echo locales
nproc >/dev/null
test -n "$(ls /sys/fs/cgroup /sys/devices/system/cpu)"
getent passwd root | cut -d: -f1
id -un
"""
ORDINARY_SAID = "ca-bundle\nusr-share\nlocales\nroot\n"
# The system's programs (this test's own virtual environment lies outside what @confined reads).
SYSTEM_ENVIRON = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": str(Path.home()),
    "LANG": "C.UTF-8",
}


def test_what_every_account_reads_still_reads_in_bwrap(repo: Path) -> None:
    need_bwrap()
    env = BwrapEnvironment(repo, warm=False, environ=SYSTEM_ENVIRON)
    try:
        code, said = contained(env, ORDINARY_READS)
    finally:
        env.close()
    assert code == 0, said
    assert said.startswith("cpus ") and said.split("\n", 2)[1] == "root", said
    assert ORDINARY_SAID in said, said


def test_what_every_account_reads_still_reads_in_confined(repo: Path) -> None:
    from codecoder.environments.bwrap.confined import ConfinedEnvironment

    need_bwrap()
    env = ConfinedEnvironment(repo, environ=SYSTEM_ENVIRON)
    done = env.run(CommandRequest(cwd=repo, script=ORDINARY_READS, writable=True, timeout=120))
    said = done.stdout + done.stderr
    assert done.exit_code == 0, said
    assert ORDINARY_SAID in said, said
