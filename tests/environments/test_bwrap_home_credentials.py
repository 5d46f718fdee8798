"""Credentials inside the home entries a sandbox is shown (issue 33, class 5): with the README's
own example (`{"bwrap": {"home": ["~/.m2", "~/.gradle"]}}`, trusted), a contained `cat` printed
the passwords of settings.xml, settings-security.xml and gradle.properties; a `[registry] token`
in ~/.cargo/config.toml was readable when cargo ran. A shown directory's own configuration (the
files at its top) is covered by an empty file whatever its name, unless it is a program, a
file the toolchain needs to run, or a file the user's settings name themselves; its caches,
packages and programs stay. Real bubblewrap, real files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codecoder.environments.base import CommandRequest
from codecoder.environments.bwrap.environment import BwrapEnvironment
from codecoder.environments.bwrap.settings import BwrapSettings
from tests.environments.bwrap_support import need_bwrap, repo

__all__ = ["repo"]  # fixtures

SECRET = "hunter2-canary"
FILES = {
    ".m2/settings.xml": f"<settings><servers><server><password>{SECRET}</password>"
    "</server></servers></settings>\n",
    ".m2/settings-security.xml": f"<settingsSecurity><master>{SECRET}</master>"
    "</settingsSecurity>\n",
    ".m2/repository/org/x/x-1.jar": "jar\n",
    ".gradle/gradle.properties": f"mavenPassword={SECRET}\norg.gradle.jvmargs=-Xmx1g\n",
    ".gradle/caches/modules-2/x.bin": "cache\n",
    ".gradle/init.gradle": f"// {SECRET}\n",  # a name no list would know
    ".cargo/config.toml": f'[registry]\ntoken = "{SECRET}"\n',
    ".cargo/registry/index/x": "index\n",
    ".rustup/settings.toml": 'default_toolchain = "stable"\n',
    ".rustup/toolchains/stable/lib/x": "lib\n",
    ".mytool/secrets.yml": f"key: {SECRET}\n",  # an unknown tool's
    ".mytool/cache/y": "cache\n",
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    for name, content in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    bin_dir = root / ".cargo" / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text("#!/bin/sh\ncat ~/.cargo/config.toml ~/.rustup/settings.toml; ls ~/.cargo\n")
    cargo.chmod(0o755)
    return root


def contained(repo: Path, home: Path, script: str, settings: BwrapSettings) -> str:
    need_bwrap()
    environ = {"HOME": str(home), "PATH": f"{home}/.cargo/bin:/usr/bin:/bin"}
    env = BwrapEnvironment(repo, settings, environ=environ, warm=False)
    try:
        done = env.run(CommandRequest(cwd=repo, script=script, writable=True, timeout=30))
    finally:
        env.close()
    return done.stdout + done.stderr


def test_a_shown_toolchains_configuration_is_hidden_and_its_caches_stay(
    repo: Path, home: Path
) -> None:
    settings = BwrapSettings(home=("~/.m2", "~/.gradle", "~/.mytool"))
    said = contained(
        repo,
        home,
        "cat ~/.m2/*.xml ~/.gradle/*.properties ~/.gradle/init.gradle ~/.mytool/secrets.yml; "
        "grep -rs canary ~ ; cat ~/.m2/repository/org/x/x-1.jar ~/.gradle/caches/modules-2/x.bin "
        "~/.mytool/cache/y",
        settings,
    )
    assert SECRET not in said
    assert said.split() == ["jar", "cache", "cache"]


def test_cargo_runs_without_its_registry_token_and_with_its_toolchain(
    repo: Path, home: Path
) -> None:
    said = contained(repo, home, "cargo", BwrapSettings())
    assert SECRET not in said
    assert 'default_toolchain = "stable"' in said  # rustup's own state, needed to run
    assert "registry" in said.split()  # the cache directory is there


def test_a_file_the_user_names_is_shown_as_it_is(repo: Path, home: Path) -> None:
    settings = BwrapSettings(home=("~/.gradle", "~/.gradle/gradle.properties"))
    said = contained(repo, home, "cat ~/.gradle/gradle.properties", settings)
    assert said == FILES[".gradle/gradle.properties"]
