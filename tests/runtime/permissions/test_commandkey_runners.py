"""Two classes of forms that carried code or a program past a grant: interpreters' module and
script runners whose arguments are code, and a program the table does not know that is handed
a command in a spelling the launcher rule did not read. Each is attacked in several spellings:
the command must be compound (never covered by a grant for an innocent form), and a deny rule
must see what it runs."""

from __future__ import annotations

import pytest

from codecoder.permissions.allowlist import Grant, ProjectAllowlist
from codecoder.permissions.commandkey import key_command
from codecoder.permissions.keys import KeyStyle
from codecoder.permissions.patterns import KeyPattern

INLINE_CODE_RUNNERS = [
    # timeit runs the statements it is given, and its -s setup code.
    "python3 -m timeit 'import os; os.system(\"touch M\")'",
    "python3 -m timeit -s 'import os' 'os.system(1)'",
    "python3 -m timeit x=1",
    "python3 -mtimeit pass",
    "python3 -Im timeit pass",
    "python3 -Bsmtimeit pass",
    "python3 -X dev -m timeit pass",
    "python3.11 -m timeit pass",
    "/usr/bin/python3 -m timeit pass",
    "pypy -m timeit pass",
    # profilers, debuggers and tracers run the script or module they are given.
    "python3 -m cProfile -s cumtime evil.py",
    "python3 -m cprofile evil.py",
    "python3 -m profile -m evil",
    "python3 -m pdb -c continue evil.py",
    "python3 -m pdb evil.py",
    "python3 -m trace --run evil.py",
    "python3 -m runpy evil",
    "python3 -m doctest evil.txt",
    "python3 -m pydoc ./evil.py",
    "python3 -m inspect evil",
    "python3 -m code",
    "python3 -m asyncio",
    "python3 -m webbrowser file:///etc/passwd",
    "python3 -m sqlite3 db",
    "python3 -m http.server --cgi",
    "python3 -m zipfile -e evil.zip .",
    "python3 -m tarfile --extract evil.tar",
    "python3 -m idlelib",
    "python3 -m zipimport x",  # a standard-library module the table does not know: closed
    # third-party runners that hand on to another module or inline code
    "python3 -m coverage run -m timeit pass",
    "python3 -m debugpy --listen 5678 -c 'import os'",
    "python3 -m pyinstrument -m evil",
    "python3 -m pip config set global.x y",
    # other interpreters
    'node -p \'require("child_process").execSync("id")\'',
    "node -pe 1",
    "node --print=1",
    "node --eval=1",
    "perl -MPOSIX -e 1",
    "perl -Mstrict x.pl",
    "perl -wMevil x.pl",
    "perl -S evil",
    "ruby -S rake",
    "ruby -e 1",
    "php -d auto_prepend_file=evil.php x.php",
    "lua -e 'os.execute(1)'",
]


@pytest.mark.parametrize("command", INLINE_CODE_RUNNERS)
def test_a_runner_whose_arguments_are_code_is_compound(command: str) -> None:
    keyed = key_command(command)
    assert keyed.compound, (command, keyed.permission_key().raw)


LOADERS = [
    # a module loaded before the script: the narrowest grant is the exact command
    ("lua -l evil x.lua", "lua"),
    ("julia -L evil.jl x.jl", "julia"),
    ("ruby -rshellwords x.rb", "ruby"),
]


@pytest.mark.parametrize(("command", "program"), LOADERS)
def test_a_loaded_module_leaves_no_grant_for_the_script_alone(command: str, program: str) -> None:
    key = key_command(command).permission_key()
    assert key.grant_levels[0].entry.startswith(f'run_command:"{program} ')  # exactly this


RUNNER_ORDINARY = [
    ("python3 -m pytest -q", "run_command:python3:-m:pytest"),
    ("python3 -m pip install -r requirements.txt", "run_command:python3:-m:pip"),
    ("python3 -m venv .venv", "run_command:python3:-m:venv"),
    ("python3 -m json.tool data.json", "run_command:python3:-m:json.tool"),
    ("python3 -m unittest discover -s tests", "run_command:python3:-m:unittest"),
    ("python3 -m http.server 8000", "run_command:python3:-m:http.server"),
    ("python3 -m mypkg.cli build", "run_command:python3:-m:mypkg.cli"),
    ("python3 -m coverage run tests.py", "run_command:python3:-m:coverage"),
    ("python3 tool.py -m timeit", "run_command:python3:tool.py"),
]


@pytest.mark.parametrize(("command", "raw"), RUNNER_ORDINARY)
def test_ordinary_module_runs_stay_simple(command: str, raw: str) -> None:
    keyed = key_command(command)
    assert (keyed.compound, keyed.permission_key().raw) == (False, raw)


def test_a_grant_for_a_benchmark_does_not_run_any_python() -> None:
    granted = key_command("python3 -m timeit -n 3 pass").permission_key()
    attack = key_command("python3 -m timeit 'import os; os.system(\"touch M\")'").permission_key()
    assert granted.compound and attack.compound  # each only as itself
    assert granted.raw != attack.raw


# --- the launcher rule, in every spelling a parser accepts -------------------------------------

SMUGGLED = [
    "mytool -H'touch M'",
    "mytool -Htouch",
    "mytool -vxHtouch",
    "mytool -H'sh -c x'",
    "mytool -c'git push'",
    "mytool \"to''uch M\"",
    "mytool 't\\ouch M'",
    "mytool -H\"to''uch M\"",
    "mytool --cmd='t\\ouch M'",
    "mytool -exec=touch",
    "mytool --run 'to\"\"uch'",
    'mytool "tou""ch"',
]


@pytest.mark.parametrize("command", SMUGGLED)
def test_an_unknown_program_handed_a_command_in_any_spelling_is_compound(command: str) -> None:
    keyed = key_command(command, "/usr/bin:/bin")
    assert keyed.compound, (command, keyed.reason)


@pytest.mark.parametrize(
    "command",
    [
        "mytool build",
        "mytool -v build",
        "mytool -j4 build",
        "mytool -O2 -Wall src",
        "mytool --fast",
    ],
)
def test_an_unknown_programs_own_options_stay_simple(command: str) -> None:
    assert not key_command(command, "/usr/bin:/bin").compound


DENIED = ProjectAllowlist.build(
    [],
    [Grant(KeyPattern.parse("run_command:touch")), Grant(KeyPattern.parse("run_command:git:push"))],
    lambda tool: KeyStyle.COMMAND,
)


@pytest.mark.parametrize(
    "command",
    [
        c
        for c in SMUGGLED
        if "touch" in c.replace("'", "").replace('"', "").replace("\\", "") or "push" in c
    ],
)
def test_a_deny_rule_sees_the_smuggled_command(command: str) -> None:
    key = key_command(command, "/usr/bin:/bin").permission_key()
    assert DENIED.denied_by(key) is not None, command


GH_COMMANDS = [
    ("gh run list", "run_command:gh:run:list"),
    ("gh run view 123 --log", "run_command:gh:run:view"),
    ("gh -R owner/repo pr list --state open", "run_command:gh:pr:list"),
    ("gh pr --repo owner/repo view 1 --json title", "run_command:gh:pr:view"),
    ("gh pr merge 7 --squash", "run_command:gh:pr:merge"),
    ("gh api repos/o/r", "run_command:gh:api"),
    ("gh status", "run_command:gh:status"),
    ("gh config get editor", "run_command:gh:config:get"),
]


@pytest.mark.parametrize(("command", "raw"), GH_COMMANDS)
def test_gh_is_keyed_to_its_group_and_command(command: str, raw: str) -> None:
    """A grant for reading a run's log is never one for deleting it (view and watch are also
    programs on PATH: a word after gh is a subcommand, not a program it launches)."""
    assert key_command(command, "/usr/bin:/bin").permission_key().raw == raw


GH_DENIED = ProjectAllowlist.build(
    [], [Grant(KeyPattern.parse("run_command:gh:pr:merge"))], lambda tool: KeyStyle.COMMAND
)


def test_a_grant_for_one_gh_command_covers_no_other_and_a_deny_sees_through_options() -> None:
    view = key_command("gh run view 1", "/usr/bin:/bin").permission_key()
    delete = key_command("gh run delete 1", "/usr/bin:/bin").permission_key()
    assert "run_command:gh:run:delete" not in [level.entry for level in view.levels]
    assert "run_command:gh:run:view" not in [level.entry for level in delete.levels]
    for spelling in ("gh pr merge 7", "gh -R o/r pr merge 7", "gh pr --repo=o/r merge 7"):
        key = key_command(spelling, "/usr/bin:/bin").permission_key()
        assert GH_DENIED.denied_by(key) is not None, (spelling, key.raw)
    listed = key_command("gh pr list", "/usr/bin:/bin").permission_key()
    assert GH_DENIED.denied_by(listed) is None


@pytest.mark.parametrize(
    "command",
    [
        "gh extension install owner/gh-evil",
        "gh ext exec evil",
        "gh alias set co 'pr checkout' --shell",
        "gh config set pager 'sh -c id'",
        "gh codespace ssh -- id",
        "gh browse",
        "gh evil-extension --flag",
    ],
)
def test_what_gh_runs_of_its_own_is_compound(command: str) -> None:
    keyed = key_command(command, "/usr/bin:/bin")
    assert keyed.compound, (command, keyed.permission_key().raw)
