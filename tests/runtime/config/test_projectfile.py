"""codecoder.json: reading it (syntax, schema, positions) and writing grants to it safely."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from codecoder.config.projectfile import (
    AllowEntry,
    Binding,
    DenyEntry,
    Diagnostic,
    ProjectFile,
)
from codecoder.config.reading import load_project_file
from codecoder.config.writing import add_allow_entry, remove_allow_entry
from codecoder.foundation.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]

SESSION_WARNING = (
    "AlwaysThisSession means nothing in codecoder.json: the entry grants nothing; "
    "answer AlwaysThisSession at the prompt instead"
)


def write(directory: Path, text: str) -> Path:
    path = directory / "codecoder.json"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def patterns(path: Path) -> set[str]:
    return {entry.pattern for entry in load_project_file(path).allowlist}


# --- reading ---------------------------------------------------------------------------------


def test_a_missing_file_is_an_empty_configuration(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"

    assert load_project_file(path) == ProjectFile(path=path, exists=False, usable=True)


def test_the_seed_example_grants_two_entries_and_warns_about_the_session_scope(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
        {
          "allowlist": {
            "run_command:git": "AlwaysThisProject",
            "run_command:cargo": "AlwaysThisSession",
            "write_file:tests/**": "AlwaysThisProject"
          }
        }
        """,
    )

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=True,
        allowlist=(
            AllowEntry("run_command:git", "AlwaysThisProject", None, 3, 5, grants=True),
            AllowEntry("run_command:cargo", "AlwaysThisSession", None, 4, 5, grants=False),
            AllowEntry("write_file:tests/**", "AlwaysThisProject", None, 5, 5, grants=True),
        ),
        diagnostics=(
            Diagnostic("warning", "invalid_scope", SESSION_WARNING, "run_command:cargo", 4, 26),
        ),
    )


def test_every_section_is_read_with_the_position_of_each_entry(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {
          "$schema": "https://codecoder.dev/schema/codecoder.json",
          "allowlist": {
            "run_container:cargo": "AlwaysThisProject",
            "run_wasm:fmt": {"scope": "AlwaysThisProject", "digest": "sha256:00ff"}
          },
          "deny": ["run_command:git:push", "write_file:.env"],
          "environments": {"run_command": "@docker", "fetch_url": "@runtime"},
          "limits": {"timeout": 120, "max_output": 65536},
          "session_ttl": 3600
        }
        """,
    )

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=True,
        allowlist=(
            AllowEntry("run_container:cargo", "AlwaysThisProject", None, 4, 5, grants=True),
            AllowEntry("run_wasm:fmt", "AlwaysThisProject", "sha256:00ff", 5, 5, grants=True),
        ),
        deny=(DenyEntry("run_command:git:push", 7, 12), DenyEntry("write_file:.env", 7, 36)),
        bindings=(
            Binding("run_command", "@docker", 8, 20),
            Binding("fetch_url", "@runtime", 8, 46),
        ),
        timeout=120,
        max_output=65536,
        session_ttl=3600,
    )


def test_positions_are_exact_for_keys_with_slashes_tildes_and_escapes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        r"""
        {"allowlist": {
          "write_file:tests/**": "AlwaysThisProject",
          "write_file:a~b/c": "AlwaysThisProject",
          "run_command:\"git status\"": "AlwaysThisProject",
          "write_file:x\u002fy": "AlwaysThisProject"
        }}
        """,
    )
    project = load_project_file(path)

    assert [(e.pattern, e.line, e.column) for e in project.allowlist] == [
        ("write_file:tests/**", 2, 3),
        ("write_file:a~b/c", 3, 3),
        ('run_command:"git status"', 4, 3),
        ("write_file:x/y", 5, 3),
    ]
    # Pointers are RFC 6901: "/" is written "~1" and "~" is written "~0".
    assert project.position_of("/allowlist/write_file:tests~1**") == (2, 26)
    assert project.position_of("/allowlist/write_file:a~0b~1c") == (3, 23)
    assert project.position_of('/allowlist/run_command:"git status"') == (4, 33)
    assert project.position_of("/allowlist/write_file:x~1y") == (5, 26)
    assert project.position_of("/allowlist/write_file:tests/**") == (None, None)
    assert project.position_of("/allowlist") == (1, 15)
    assert project.position_of("") == (1, 1)


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        pytest.param(
            '{\n  "allowlist": {\n    "run_command:git": "AlwaysThisProject",\n  }\n}\n',
            "Expecting property name enclosed in double quotes",
            4,
            3,
            id="trailing comma",
        ),
        pytest.param(
            '{\n  "allowlist": {\n    "run_command:git": "AlwaysThisProject"\n}\n',
            "Expecting ',' delimiter",
            5,
            1,
            id="missing brace",
        ),
        pytest.param("allowlist: everything\n", "Expecting value", 1, 1, id="garbage"),
        pytest.param(
            "{\n  'allowlist': {}\n}\n",
            "Expecting property name enclosed in double quotes",
            2,
            3,
            id="single quotes",
        ),
        pytest.param('{"deny": []} {"deny": []}\n', "Extra data", 1, 14, id="two documents"),
    ],
)
def test_a_syntax_error_is_reported_where_json_found_it_and_grants_nothing(
    tmp_path: Path, text: str, message: str, line: int, column: int
) -> None:
    path = tmp_path / "codecoder.json"
    path.write_text(text, encoding="utf-8")

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=False,
        diagnostics=(
            Diagnostic("error", "syntax", f"not valid JSON: {message}", None, line, column),
        ),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            '{\n  "deny": [],\n  "allow": {}\n}',
            Diagnostic(
                "error",
                "schema",
                'unknown key "allow" at the top level '
                "(known: $schema, allowlist, deny, environments, limits, session_ttl, web, agent, "
                "read_roots, docker, bwrap, credentials)",
                None,
                3,
                3,
            ),
            id="unknown top-level key",
        ),
        pytest.param(
            '{\n  "allowlist": ["run_command:git"]\n}',
            Diagnostic("error", "schema", "allowlist should be an object", None, 2, 16),
            id="allowlist not an object",
        ),
        pytest.param(
            '{\n  "deny": "run_command:git:push"\n}',
            Diagnostic("error", "schema", "deny should be a valid list", None, 2, 11),
            id="deny not a list",
        ),
        pytest.param(
            '{\n  "deny": [7]\n}',
            Diagnostic("error", "schema", "deny[0] should be a valid string", None, 2, 12),
            id="deny item not a string",
        ),
        pytest.param(
            '{\n  "environments": {"run_command": "@podman"}\n}',
            Diagnostic(
                "error",
                "schema",
                'environments["run_command"] should be '
                "'@shell', '@bwrap', '@confined', '@docker', '@wasm', '@landlock' or '@runtime'",
                "run_command",
                2,
                35,
            ),
            id="unknown environment",
        ),
        pytest.param(
            '{\n  "limits": {"timeout": 0}\n}',
            Diagnostic("error", "schema", "limits.timeout should be greater than 0", None, 2, 25),
            id="timeout zero",
        ),
        pytest.param(
            '{\n  "limits": {"timeout": 86401}\n}',
            Diagnostic(
                "error",
                "schema",
                "limits.timeout should be less than or equal to 86400",
                None,
                2,
                25,
            ),
            id="timeout over a day",
        ),
        pytest.param(
            '{\n  "limits": {"timeout": "120"}\n}',
            Diagnostic("error", "schema", "limits.timeout should be a valid number", None, 2, 25),
            id="timeout a string",
        ),
        pytest.param(
            '{\n  "limits": {"timeout": NaN}\n}',
            Diagnostic("error", "schema", "limits.timeout should be a finite number", None, 2, 25),
            id="timeout NaN",
        ),
        pytest.param(
            '{\n  "limits": {"max_output": 1023}\n}',
            Diagnostic(
                "error",
                "schema",
                "limits.max_output should be greater than or equal to 1024",
                None,
                2,
                28,
            ),
            id="max_output too small",
        ),
        pytest.param(
            '{\n  "limits": {"max_output": 4096.5}\n}',
            Diagnostic(
                "error", "schema", "limits.max_output should be a valid integer", None, 2, 28
            ),
            id="max_output not an integer",
        ),
        pytest.param(
            '{\n  "limits": {"memory": 1}\n}',
            Diagnostic("error", "schema", 'unknown key "memory" in limits', None, 2, 14),
            id="unknown limit",
        ),
        pytest.param(
            '{\n  "limits": 120\n}',
            Diagnostic("error", "schema", "limits should be an object", None, 2, 13),
            id="limits not an object",
        ),
        pytest.param(
            '{\n  "session_ttl": 0\n}',
            Diagnostic(
                "error",
                "schema",
                "session_ttl must be -1 (never expires) or a positive number of seconds",
                None,
                2,
                18,
            ),
            id="session_ttl zero",
        ),
        pytest.param(
            '{\n  "$schema": 1\n}',
            Diagnostic("error", "schema", "$schema should be a valid string", None, 2, 14),
            id="schema not a string",
        ),
        pytest.param(
            '{\n  "allowlist": {"run_command:git": true}\n}',
            Diagnostic(
                "error",
                "schema",
                'allowlist["run_command:git"] should be a scope ("AlwaysThisProject") '
                'or an object {"scope": ..., "digest": ...}',
                "run_command:git",
                2,
                36,
            ),
            id="allowlist value not a scope",
        ),
        pytest.param(
            '{\n  "allowlist": {"run_wasm:fmt": {"digest": "sha256:00"}}\n}',
            Diagnostic(
                "error",
                "schema",
                'allowlist["run_wasm:fmt"] is missing "scope"',
                "run_wasm:fmt",
                2,
                33,
            ),
            id="grant object without scope",
        ),
        pytest.param(
            '{\n  "allowlist": {"run_wasm:fmt": {"scope": "AlwaysThisProject", "sha": "00"}}\n}',
            Diagnostic(
                "error",
                "schema",
                'unknown key "sha" in allowlist["run_wasm:fmt"]',
                "run_wasm:fmt",
                2,
                64,
            ),
            id="grant object with unknown key",
        ),
        pytest.param(
            '[\n  "run_command:git"\n]',
            Diagnostic("error", "schema", "the file should be an object", None, 1, 1),
            id="not an object at all",
        ),
    ],
)
def test_a_schema_error_is_reported_at_the_offending_value_and_grants_nothing(
    tmp_path: Path, text: str, expected: Diagnostic
) -> None:
    path = tmp_path / "codecoder.json"
    path.write_text(text, encoding="utf-8")

    assert load_project_file(path) == ProjectFile(
        path=path, exists=True, usable=False, diagnostics=(expected,)
    )


def test_an_unusable_file_grants_nothing_but_keeps_every_deny_it_could_read(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
        {
          "allowlist": {"run_container:cargo": "AlwaysThisProject"},
          "deny": ["run_command:git:push", 3, ""],
          "environments": {"run_command": "@docker"},
          "limits": {"timeout": 10},
          "session_ttl": 60
        }
        """,
    )

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=False,
        deny=(DenyEntry("run_command:git:push", 3, 12),),
        diagnostics=(
            Diagnostic("error", "schema", "deny[1] should be a valid string", None, 3, 36),
            Diagnostic(
                "error", "invalid_pattern", "deny[2]: a pattern must not be empty", "", 3, 39
            ),
        ),
    )


def test_a_value_that_is_no_scope_is_an_error_and_once_is_a_warning(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {"allowlist": {
          "run_container:cargo": "Forever",
          "run_wasm:fmt": {"scope": "Once"}
        }}
        """,
    )

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=False,
        diagnostics=(
            Diagnostic(
                "error",
                "invalid_scope",
                '"Forever" is not a scope: entries of codecoder.json are "AlwaysThisProject"',
                "run_container:cargo",
                2,
                26,
            ),
            Diagnostic(
                "warning",
                "invalid_scope",
                "Once means nothing in codecoder.json: the entry grants nothing; "
                "answer Once at the prompt instead",
                "run_wasm:fmt",
                3,
                29,
            ),
        ),
    )


def test_a_duplicate_key_warns_on_the_ignored_line_and_the_last_one_wins(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {
          "allowlist": {
            "run_container:cargo": "AlwaysThisSession",
            "write_file:docs/**": "AlwaysThisProject",
            "run_container:cargo": "AlwaysThisProject"
          }
        }
        """,
    )

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=True,
        allowlist=(
            AllowEntry("run_container:cargo", "AlwaysThisProject", None, 5, 5, grants=True),
            AllowEntry("write_file:docs/**", "AlwaysThisProject", None, 4, 5, grants=True),
        ),
        diagnostics=(
            Diagnostic(
                "warning",
                "duplicate_key",
                'allowlist["run_container:cargo"] appears again on line 5; '
                "the entry on line 3 is ignored (the last one wins)",
                "run_container:cargo",
                3,
                5,
            ),
        ),
    )


def test_a_second_deny_section_is_an_error_and_both_are_obeyed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {
          "allowlist": {"write_file:docs/**": "AlwaysThisProject"},
          "deny": ["run_command:git:push"],
          "deny": ["run_command:rm"]
        }
        """,
    )

    loaded = load_project_file(path)
    assert (loaded.usable, loaded.allowlist) == (False, ())
    assert [deny.pattern for deny in loaded.deny] == ["run_command:git:push", "run_command:rm"]
    assert loaded.diagnostics == (
        Diagnostic(
            "error",
            "duplicate_section",
            'the section "deny" appears again on line 4; a JSON reader keeps only the last '
            "one, so what this one says would be silently lost: merge the two",
            None,
            3,
            3,
        ),
    )


def test_an_empty_or_control_character_pattern_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        r"""
        {"allowlist": {
          "": "AlwaysThisProject",
          "run_command:git\u001b[2K": "AlwaysThisProject"
        },
        "deny": ["write_file:\u0000"]}
        """,
    )

    assert load_project_file(path).diagnostics == (
        Diagnostic(
            "error", "invalid_pattern", 'allowlist[""]: a pattern must not be empty', "", 2, 3
        ),
        Diagnostic(
            "error",
            "invalid_pattern",
            'allowlist["run_command:git\\u001b[2K"]: a pattern must not contain control characters',
            "run_command:git\x1b[2K",
            3,
            3,
        ),
        Diagnostic(
            "error",
            "invalid_pattern",
            "deny[0]: a pattern must not contain control characters",
            "write_file:\x00",
            5,
            10,
        ),
    )


@pytest.mark.parametrize("text", ["", "  \n\t\n"])
def test_an_empty_file_is_an_empty_configuration(tmp_path: Path, text: str) -> None:
    path = tmp_path / "codecoder.json"
    path.write_text(text, encoding="utf-8")

    assert load_project_file(path) == ProjectFile(path=path, exists=True, usable=True)


def test_a_directory_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    path.mkdir()

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=False,
        diagnostics=(
            Diagnostic("error", "unreadable", "cannot read codecoder.json: is a directory"),
        ),
    )


def test_bytes_that_are_not_utf8_are_unreadable_and_located(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    path.write_bytes(b'{\n  "allowlist": {"write_file:caf\xe9": "AlwaysThisProject"}\n}\n')

    assert load_project_file(path) == ProjectFile(
        path=path,
        exists=True,
        usable=False,
        diagnostics=(
            Diagnostic(
                "error",
                "unreadable",
                "codecoder.json is not UTF-8: byte 0xe9 cannot be decoded",
                None,
                2,
                32,
            ),
        ),
    )


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    path.write_bytes(b'\xef\xbb\xbf{"deny": ["run_command:rm"]}')

    assert load_project_file(path) == ProjectFile(
        path=path, exists=True, usable=True, deny=(DenyEntry("run_command:rm", 1, 11),)
    )


def test_a_diagnostic_as_json_has_every_field() -> None:
    diagnostic = Diagnostic("warning", "invalid_scope", SESSION_WARNING, "run_command:cargo", 4, 26)

    assert diagnostic.to_json() == {
        "severity": "warning",
        "code": "invalid_scope",
        "key": "run_command:cargo",
        "message": SESSION_WARNING,
        "line": 4,
        "column": 26,
        "file": None,
    }


def test_ten_thousand_entries_load_quickly_and_completely(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    allowlist = {f"write_file:generated/{i}/**": "AlwaysThisProject" for i in range(10_000)}
    path.write_text(json.dumps({"allowlist": allowlist}, indent=2), encoding="utf-8")

    started = time.monotonic()
    project = load_project_file(path)
    elapsed = time.monotonic() - started

    assert elapsed < 5
    assert project.usable
    assert project.diagnostics == ()
    assert [entry.pattern for entry in project.allowlist] == list(allowlist)
    assert project.allowlist[-1] == AllowEntry(
        "write_file:generated/9999/**", "AlwaysThisProject", None, 10_002, 5, grants=True
    )


# --- writing ---------------------------------------------------------------------------------


def test_granting_to_a_missing_file_creates_it_with_only_the_allowlist(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"

    add_allow_entry(path, "write_file:tests/**")

    assert path.read_text(encoding="utf-8") == (
        '{\n  "allowlist": {\n    "write_file:tests/**": "AlwaysThisProject"\n  }\n}\n'
    )
    assert (tmp_path / ".codecoder" / "codecoder.json.lock").is_file()


def test_a_grant_keeps_every_other_key_and_their_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {"session_ttl": 60, "deny": ["run_command:git:push"],
         "allowlist": {"run_container:cargo": "AlwaysThisProject"},
         "limits": {"max_output": 65536, "timeout": 120.5},
         "environments": {"run_command": "@docker"}, "$schema": "s"}
        """,
    )

    add_allow_entry(path, "run_container:npm:ünïcode")

    assert path.read_text(encoding="utf-8") == textwrap.dedent(
        """\
        {
          "session_ttl": 60,
          "deny": [
            "run_command:git:push"
          ],
          "allowlist": {
            "run_container:cargo": "AlwaysThisProject",
            "run_container:npm:ünïcode": "AlwaysThisProject"
          },
          "limits": {
            "max_output": 65536,
            "timeout": 120.5
          },
          "environments": {
            "run_command": "@docker"
          },
          "$schema": "s"
        }
        """
    )


def test_a_first_grant_puts_the_allowlist_right_after_the_schema(tmp_path: Path) -> None:
    path = write(tmp_path, '{"$schema": "s", "deny": ["run_command:rm"]}')

    add_allow_entry(path, "run_wasm:fmt", digest="sha256:00ff")

    assert path.read_text(encoding="utf-8") == textwrap.dedent(
        """\
        {
          "$schema": "s",
          "allowlist": {
            "run_wasm:fmt": {
              "scope": "AlwaysThisProject",
              "digest": "sha256:00ff"
            }
          },
          "deny": [
            "run_command:rm"
          ]
        }
        """
    )


def test_a_file_with_only_warnings_is_written_and_keeps_its_warned_entries(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
        {"allowlist": {"run_command:cargo": "AlwaysThisSession",
                       "run_wasm:fmt": "Once", "run_wasm:fmt": "AlwaysThisProject"}}
        """,
    )

    add_allow_entry(path, "write_file:tests/**")

    assert json.loads(path.read_text(encoding="utf-8")) == {
        "allowlist": {
            "run_command:cargo": "AlwaysThisSession",
            "run_wasm:fmt": "AlwaysThisProject",
            "write_file:tests/**": "AlwaysThisProject",
        }
    }


def test_granting_an_entry_that_is_there_does_not_rewrite_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '{"allowlist": {"run_wasm:fmt": "AlwaysThisProject"}}')
    before = os.stat(path)

    add_allow_entry(path, "run_wasm:fmt")

    assert (
        path.read_text(encoding="utf-8") == '{"allowlist": {"run_wasm:fmt": "AlwaysThisProject"}}'
    )
    assert os.stat(path).st_ino == before.st_ino


def test_a_revoke_removes_only_that_entry(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        {"allowlist": {"run_wasm:fmt": "AlwaysThisProject",
                       "write_file:tests/**": "AlwaysThisProject",
                       "run_container:cargo": {"scope": "AlwaysThisProject", "digest": "d"}},
         "deny": ["run_command:rm"]}
        """,
    )

    assert remove_allow_entry(path, "write_file:tests/**") is True
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "allowlist": {
            "run_wasm:fmt": "AlwaysThisProject",
            "run_container:cargo": {"scope": "AlwaysThisProject", "digest": "d"},
        },
        "deny": ["run_command:rm"],
    }


def test_revoking_an_absent_entry_returns_false_and_leaves_the_file_alone(tmp_path: Path) -> None:
    path = write(tmp_path, '{"allowlist": {"run_wasm:fmt": "AlwaysThisProject"}}')
    missing = tmp_path / "elsewhere" / "codecoder.json"
    missing.parent.mkdir()

    assert remove_allow_entry(path, "run_wasm:lint") is False
    assert remove_allow_entry(missing, "run_wasm:lint") is False
    assert (
        path.read_text(encoding="utf-8") == '{"allowlist": {"run_wasm:fmt": "AlwaysThisProject"}}'
    )
    assert not missing.exists()


@pytest.mark.parametrize(
    ("content", "message", "line", "column"),
    [
        pytest.param(
            b'{\n  "allowlist": {\n    "run_wasm:fmt": "AlwaysThisProject",\n  }\n}\n',
            "not valid JSON: Expecting property name enclosed in double quotes",
            4,
            3,
            id="syntax error",
        ),
        pytest.param(
            b'{\n  "allowlist": {},\n  "limits": {"timeout": -1}\n}\n',
            "limits.timeout should be greater than 0",
            3,
            25,
            id="schema error",
        ),
        pytest.param(
            b'{"allowlist": {"run_wasm:fmt": "Always"}}',
            '"Always" is not a scope: entries of codecoder.json are "AlwaysThisProject"',
            1,
            32,
            id="invalid scope",
        ),
        pytest.param(
            b'{"deny": ["\xff"]}',
            "codecoder.json is not UTF-8: byte 0xff cannot be decoded",
            1,
            12,
            id="not UTF-8",
        ),
    ],
)
def test_a_malformed_file_is_never_overwritten(
    tmp_path: Path, content: bytes, message: str, line: int, column: int
) -> None:
    path = tmp_path / "codecoder.json"
    path.write_bytes(content)
    suffix = "; the file is left as it is: fix it, then grant again"

    with pytest.raises(ConfigError) as granting:
        add_allow_entry(path, "write_file:tests/**")
    with pytest.raises(ConfigError) as revoking:
        remove_allow_entry(path, "run_wasm:fmt")

    for raised in (granting.value, revoking.value):
        assert (str(raised), raised.path, raised.line, raised.column) == (
            f"{path}:{line}:{column}: {message}{suffix}",
            path,
            line,
            column,
        )
    assert path.read_bytes() == content


def test_a_grant_to_a_directory_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    path.mkdir()

    with pytest.raises(ConfigError, match=r"cannot update codecoder\.json: is a directory"):
        add_allow_entry(path, "write_file:tests/**")


def test_a_grant_keeps_the_permissions_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "{}")
    path.chmod(0o640)

    add_allow_entry(path, "write_file:tests/**")

    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert patterns(path) == {"write_file:tests/**"}


@pytest.mark.parametrize(
    ("pattern", "scope", "message"),
    [
        ("", "AlwaysThisProject", 'cannot grant "": a pattern must not be empty'),
        (
            "run_command:git\n",
            "AlwaysThisProject",
            'cannot grant "run_command:git\\n": a pattern must not contain control characters',
        ),
        (
            "run_wasm:fmt",
            "AlwaysThisSession",
            'cannot write scope "AlwaysThisSession" to codecoder.json: '
            "only AlwaysThisProject lasts beyond the session",
        ),
    ],
)
def test_a_grant_the_file_could_not_hold_is_refused(
    tmp_path: Path, pattern: str, scope: str, message: str
) -> None:
    path = tmp_path / "codecoder.json"

    with pytest.raises(ValueError) as refused:
        add_allow_entry(path, pattern, scope)

    assert str(refused.value) == message
    assert not path.exists()


def test_a_later_grant_removes_stale_temporary_files_and_nothing_else(tmp_path: Path) -> None:
    path = write(tmp_path, '{"allowlist": {}}')
    stale = tmp_path / ".codecoder.json.0123456789abcdef.tmp"
    stale.write_text('{"allowlist": {"run_command:rm": "Alway', encoding="utf-8")
    unrelated = tmp_path / ".codecoder.json.notes.tmp"
    unrelated.write_text("mine", encoding="utf-8")

    assert load_project_file(path).usable
    add_allow_entry(path, "write_file:tests/**")

    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".codecoder",
        ".codecoder.json.notes.tmp",
        "codecoder.json",
    ]
    assert patterns(path) == {"write_file:tests/**"}


# --- several processes -----------------------------------------------------------------------

GRANTER = """
import sys
from pathlib import Path
from codecoder.config.writing import add_allow_entry

path, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    add_allow_entry(path, f"write_file:{name}/{i}/**")
"""

ENDLESS_GRANTER = """
import sys
from pathlib import Path
from codecoder.config.writing import add_allow_entry

path, name = Path(sys.argv[1]), sys.argv[2]
i = 0
while True:
    pattern = f"write_file:{name}/{i}/**"
    add_allow_entry(path, pattern)
    print(pattern, flush=True)
    i += 1
"""


def python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_eight_processes_granting_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    children = [python(GRANTER, str(path), f"worker{n}", "25") for n in range(8)]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    for child in children:  # all are waiting: start them together
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()

    outcomes = [child.communicate(timeout=120) for child in children]

    assert [
        (child.returncode, err) for child, (_, err) in zip(children, outcomes, strict=True)
    ] == [(0, "")] * 8
    project = load_project_file(path)
    assert (project.usable, project.diagnostics) == (True, ())
    assert patterns(path) == {f"write_file:worker{n}/{i}/**" for n in range(8) for i in range(25)}


def test_a_writer_killed_at_any_moment_leaves_a_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "codecoder.json"
    delays = random.Random(20_260_502)
    acknowledged: set[str] = set()
    for round_ in range(30):
        child = python(ENDLESS_GRANTER, str(path), f"round{round_}")
        assert child.stdout is not None
        first = child.stdout.readline()  # it is granting now
        time.sleep(delays.uniform(0, 0.05))
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
        # A grant whose pattern was printed had returned: it must be on disk.
        acknowledged |= {line for line in (first + rest).split("\n")[:-1]}

        project = load_project_file(path)
        assert (project.usable, project.diagnostics) == (True, ())
        assert acknowledged <= patterns(path)
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(leftovers) <= 1, leftovers

    add_allow_entry(path, "write_file:after/**")

    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert acknowledged | {"write_file:after/**"} <= patterns(path)
