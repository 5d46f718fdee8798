"""The suite passes whatever machine it runs on: started as cron, nohup and some CI runners
start jobs (SIGINT, SIGQUIT and SIGHUP ignored, no controlling terminal) and with an empty
`.git` directory and a foreign `codecoder.json` above its temporary directory.

Each of these made tests fail that were about the product (49 of 50 failures on a clean clone):
every Ctrl-C test, and the fail-closed, init, prompt and file-name tests. A representative slice
of them runs here in such a machine; `tests/conftest.py` is what makes them pass (dispositions
restored, no search for a project above the worker's temporary directories)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# One or two of each kind that failed: Ctrl-C (a call, a session, a helper thread), fail-closed
# rules, init, the prompt in a real terminal, file names, the project found from a directory.
SLICE = [
    "tests/runtime/interfaces/test_interruption.py",
    "tests/runtime/interfaces/test_live_output.py::"
    "test_ctrl_c_stops_the_command_and_keeps_its_output_on_screen_and_in_the_audit_log",
    "tests/runtime/interfaces/test_cli.py::"
    "test_an_interrupted_call_kills_the_commands_group_exits_and_is_audited",
    "tests/runtime/interfaces/test_rules_fail_closed.py::"
    "test_call_with_allow_is_refused_and_nothing_runs[trailing comma]",
    "tests/runtime/interfaces/test_rules_fail_closed.py::"
    "test_decide_says_deny_and_why[trailing comma]",
    "tests/runtime/tools/test_file_names.py::"
    "test_the_write_tools_refuse_a_name_that_is_not_utf8_before_asking",
    "tests/runtime/interfaces/test_starting.py::"
    "test_init_never_writes_over_a_file_and_print_only_prints",
    "tests/runtime/permissions/test_prompt.py::test_a_person_answers_in_a_real_terminal",
    "tests/runtime/permissions/test_prompt.py::test_end_of_input_at_the_prompt_denies",
    "tests/runtime/config/test_discovery.py::"
    "test_without_either_the_working_directory_is_the_project",
    "tests/runtime/config/test_discovery.py::"
    "test_check_says_which_project_and_never_ok_for_a_file_that_is_not_there",
]
OPTIONS = ("-q", "-p", "no:cacheprovider", "-n", "0", "--basetemp")
# Started with these ignored, as `nohup cmd &` from a script is.
IGNORING = (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):\n"
    "    signal.signal(s, signal.SIG_IGN)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


def test_a_slice_passes_with_signals_ignored_and_a_foreign_project_above_tmpdir(
    tmp_path: Path,
) -> None:
    foreign = tmp_path / "foreign"
    (foreign / ".git").mkdir(parents=True)  # empty: git says "not a repository"
    # A project file that, adopted, would refuse every command and grant every write.
    (foreign / "codecoder.json").write_text(
        json.dumps({"deny": ["run_command:*"], "allowlist": {"write_file:**": "AlwaysThisProject"}})
    )
    tmpdir = foreign / "tmp"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("GIT_CEILING_DIRECTORIES", None)  # the slice's own conftest sets its own
    env["TMPDIR"] = str(tmpdir)
    done = subprocess.run(
        [sys.executable, "-c", IGNORING, "-m", "pytest", *OPTIONS, str(tmpdir / "base"), *SLICE],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,  # no controlling terminal, as a job started by cron has none
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
