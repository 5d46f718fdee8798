"""A file whose name is not UTF-8, through the CLI: listed, found and read back in one
spelling (`n\xe9e.txt`), never as `n�e.txt`; the write tools refuse such a name clearly."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.interfaces.test_cli import as_json, codecoder


def test_a_name_that_is_not_utf8_is_shown_in_one_spelling_that_works_as_input(
    project: Path,
) -> None:
    (project / "docs").mkdir()
    with open(bytes(project / "docs") + b"/n\xe9e.txt", "wb") as file:
        file.write(b"latin-1 name\n")
    listed = codecoder("call", "list_dir", "docs", project=project)
    found = codecoder("call", "glob", '{"pattern": "**/*.txt"}', project=project)
    grepped = codecoder("call", "grep", '{"pattern": "latin"}', project=project)
    assert listed.stdout == "n\\xe9e.txt  (13 bytes)\n"
    assert found.stdout == "docs/n\\xe9e.txt\n"
    assert grepped.stdout == "docs/n\\xe9e.txt:1:latin-1 name\n"
    data = as_json(codecoder("call", "list_dir", "docs", "--json", project=project))
    assert data["result"]["data"]["entries"][0]["name"] == "n\\xe9e.txt"
    typed = codecoder("call", "read_file", "docs/n\\xe9e.txt", project=project)
    as_json_arguments = json.dumps({"path": "docs/n\\xe9e.txt"})
    sent = codecoder("call", "read_file", as_json_arguments, project=project)
    assert typed.stdout == sent.stdout == "     1\tlatin-1 name\n"
    assert "\ufffd" not in listed.stdout + found.stdout + grepped.stdout


def test_the_write_tools_refuse_a_name_that_is_not_utf8_before_asking(project: Path) -> None:
    proc = codecoder(
        "call",
        "write_file",
        json.dumps({"path": "n\\xe9e.txt", "content": "x"}),
        "--answer",
        "once",
        "--json",
        project=project,
    )
    assert proc.returncode == 2
    error = as_json(proc)["error"]
    assert error["type"] == "InvalidArguments"
    assert "the name is not UTF-8" in error["message"]
    assert list(project.iterdir()) == []
