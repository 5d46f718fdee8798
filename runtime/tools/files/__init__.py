"""The file tools, and the confined file layer they stand on.

Every byte these tools read or write goes through `sandboxes/fileops/fileops.wasm`, a small WASI
program run in @wasm with only the directory the call needs preopened: the workspace read-only
for the read tools (read_file, list_dir, glob, grep, diff; Permission.none), read-write for the
write tools (write_file, edit_file, move_file, delete_file; Ask, keyed by the workspace-relative
path). So a read tool cannot reach `~/.ssh/id_rsa`, whatever path or symlink it is given: the
WASI preopen does not contain it. Logic that needs no file access (glob matching, regular
expressions, diffs, edits) runs here, in Python, on what the module returns.

Two rules close what WASI alone leaves open inside the workspace:

* Changes never follow symlinks (fileops walks each path component with O_NOFOLLOW), and never
  write through a file with several hard links. So the workspace-relative path in a key is the
  file that changes, and a grant for `write_file:src/**` cannot reach `.git/hooks/` through a
  link planted in `src/`.
* Protected paths (`codecoder.json`, `.codecoder/`, `.git/`, and any `.git` directory deeper
  down) mark their keys `protected`, which the engine never grants beyond Once; `run_wasm`
  modules never get them writable at all, at any depth (see `run_wasm_preopens`).

Paths in tool arguments are workspace-relative POSIX paths; absolute paths and `..` are refused
when the arguments are validated, naming the field. Extra read roots (from the project file,
passed in `ToolContext.extra["read_roots"]` as a mapping of name to directory) are read as
`@name/relative/path`, read-only.

Where each part lives: `paths` (tool argument paths, read roots), `globs` (glob patterns),
`limits` (how much is read and shown), `backend` (what the read tools need from their
environment), `landlock` with `beneath` (@landlock: ripgrep for searches, openat2 for single
files), `fileops` with `ignore` (@wasm: the confined file layer, and which files its searches
look at), `text` (file contents as shown), `keys` (the write tools' permission keys), and the
tools: `read_tools`, `write_tools`, `run_wasm`.
"""

from __future__ import annotations

from typing import Any

from codecoder.foundation.protected import is_protected_path
from codecoder.tools.base import Tool
from codecoder.tools.files.backend import Entry, FileContent, Walk
from codecoder.tools.files.fileops import ConfinedFiles
from codecoder.tools.files.globs import glob_regex
from codecoder.tools.files.paths import normalise_path
from codecoder.tools.files.read_tools import Diff, Glob, Grep, ListDir, ReadFile
from codecoder.tools.files.run_wasm import RunWasm, module_result, run_wasm_preopens
from codecoder.tools.files.write_tools import DeleteFile, EditFile, MoveFile, WriteFile

__all__ = [
    "FILE_TOOLS",
    "ConfinedFiles",
    "DeleteFile",
    "Diff",
    "EditFile",
    "Entry",
    "FileContent",
    "Glob",
    "Grep",
    "ListDir",
    "MoveFile",
    "ReadFile",
    "RunWasm",
    "Walk",
    "WriteFile",
    "glob_regex",
    "is_protected_path",
    "module_result",
    "normalise_path",
    "run_wasm_preopens",
]


FILE_TOOLS: tuple[Tool[Any], ...] = (
    ReadFile(),
    ListDir(),
    Glob(),
    Grep(),
    Diff(),
    WriteFile(),
    EditFile(),
    MoveFile(),
    DeleteFile(),
    RunWasm(),
)
