"""The write tools: write_file, edit_file, move_file and delete_file.

They run in @wasm through the confined file layer (`ConfinedFiles`) with the workspace
preopened read-write, ask (Ask, keyed by the workspace-relative path; see `keys`) and are in
category WRITE. Changes never follow symlinks and never write through a file with several hard
links, so the path in a key is the file that changes. Edits are computed here, in Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pydantic import Field, model_validator

from codecoder.foundation.ceiling import EnvironmentTag
from codecoder.foundation.errors import ExecutionFailed
from codecoder.permissions.keys import CallSite, KeyStyle, Permission, Preview
from codecoder.tools.base import Category, Parameters, Tool, ToolContext, ToolResult
from codecoder.tools.files.fileops import _files
from codecoder.tools.files.keys import _move_key, _write_key
from codecoder.tools.files.paths import WritePath
from codecoder.tools.files.preview import edit_preview, write_preview
from codecoder.tools.files.text import _read_text


class _WriteTool:
    """What the write tools share: @wasm, Ask keyed by a workspace path, category WRITE."""

    category = Category.WRITE
    environment = EnvironmentTag.WASM
    bindable = frozenset({EnvironmentTag.WASM})
    key_style = KeyStyle.PATH


def _with_preview(permission: Permission, preview: Callable[[], Preview]) -> Permission:
    assert permission.key is not None
    return Permission.ask(dataclasses.replace(permission.key, preview=preview))


class WriteFileParameters(Parameters):
    path: WritePath = Field(
        description="The file to write, relative to the workspace; missing directories are made."
    )
    content: str = Field(description="The whole new content of the file (UTF-8).")


class WriteFile(_WriteTool, Tool[WriteFileParameters]):
    name = "write_file"
    description = (
        "Create a file in the workspace, or replace all of its content. Symbolic links are not "
        "followed: write to the file a link points to, not to the link."
    )
    parameters = WriteFileParameters

    def permission(self, args: WriteFileParameters) -> Permission:
        return _write_key(self.name, args.path)

    def permission_in(self, args: WriteFileParameters, site: CallSite) -> Permission:
        """The key, with what the write would change for its question (read only if asked)."""
        return _with_preview(
            self.permission(args), write_preview(site.workspace, args.path, args.content)
        )

    def execute(self, args: WriteFileParameters, ctx: ToolContext) -> ToolResult:
        data = args.content.encode("utf-8")
        created = _files(ctx).write(args.path, data)
        verb = "created" if created else "replaced"
        return ToolResult(
            f"{verb} {args.path} ({len(data)} bytes)\n",
            data={"path": args.path, "bytes": len(data), "created": created},
        )


class EditFileParameters(Parameters):
    path: WritePath = Field(description="The file to edit, relative to the workspace.")
    old_string: str = Field(
        min_length=1,
        description="The exact text to replace, including whitespace; it must occur exactly "
        "once unless replace_all is set (add surrounding lines to make it unique).",
    )
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(default=False, description="Replace every occurrence.")

    @model_validator(mode="after")
    def _changes_something(self) -> EditFileParameters:
        if self.old_string == self.new_string:
            raise ValueError("old_string and new_string are the same: nothing would change")
        return self


class EditFile(_WriteTool, Tool[EditFileParameters]):
    name = "edit_file"
    description = (
        "Replace an exact string in a workspace text file. Fails, changing nothing, when the "
        "string does not occur, or occurs more than once and replace_all is not set."
    )
    parameters = EditFileParameters

    def permission(self, args: EditFileParameters) -> Permission:
        return _write_key(self.name, args.path)

    def permission_in(self, args: EditFileParameters, site: CallSite) -> Permission:
        """The key, with the edit's diff for its question (read only if asked)."""
        preview = edit_preview(
            site.workspace, args.path, args.old_string, args.new_string, args.replace_all
        )
        return _with_preview(self.permission(args), preview)

    def execute(self, args: EditFileParameters, ctx: ToolContext) -> ToolResult:
        files = _files(ctx)
        text = _read_text(files, args.path)
        count = text.count(args.old_string)
        if count == 0:
            raise ExecutionFailed(f"edit_file {args.path}: old_string was not found in the file")
        if count > 1 and not args.replace_all:
            raise ExecutionFailed(
                f"edit_file {args.path}: old_string occurs {count} times; include more "
                "surrounding text to make it unique, or set replace_all"
            )
        first_line = text.count("\n", 0, text.index(args.old_string)) + 1
        files.write(args.path, text.replace(args.old_string, args.new_string).encode("utf-8"))
        replaced = count if args.replace_all else 1
        plural = "s" if replaced != 1 else ""
        return ToolResult(
            f"edited {args.path}: {replaced} replacement{plural}, first at line {first_line}\n",
            data={"path": args.path, "replacements": replaced, "first_line": first_line},
        )


class MoveFileParameters(Parameters):
    source: WritePath = Field(description="The file or directory to move.")
    destination: WritePath = Field(
        description="Its new path, relative to the workspace; missing directories are made."
    )
    overwrite: bool = Field(default=False, description="Replace an existing destination.")


class MoveFile(_WriteTool, Tool[MoveFileParameters]):
    name = "move_file"
    description = (
        "Move or rename a file or directory inside the workspace. Refuses to replace an "
        "existing destination unless overwrite is set."
    )
    parameters = MoveFileParameters

    def permission(self, args: MoveFileParameters) -> Permission:
        return _move_key(self.name, args.source, args.destination)

    def execute(self, args: MoveFileParameters, ctx: ToolContext) -> ToolResult:
        _files(ctx).move(args.source, args.destination, overwrite=args.overwrite)
        return ToolResult(
            f"moved {args.source} -> {args.destination}\n",
            data={"source": args.source, "destination": args.destination},
        )


class DeleteFileParameters(Parameters):
    path: WritePath = Field(description="The file, symbolic link or empty directory to delete.")


class DeleteFile(_WriteTool, Tool[DeleteFileParameters]):
    name = "delete_file"
    description = (
        "Delete a file, a symbolic link (not what it points to) or an empty directory from "
        "the workspace."
    )
    parameters = DeleteFileParameters

    def permission(self, args: DeleteFileParameters) -> Permission:
        return _write_key(self.name, args.path)

    def execute(self, args: DeleteFileParameters, ctx: ToolContext) -> ToolResult:
        _files(ctx).delete(args.path)
        return ToolResult(f"deleted {args.path}\n", data={"path": args.path})
