"""Which files a search on @wasm looks at: ripgrep's rules (ignore files, hidden names, never
`.git`; see `SearchOptions`) applied to a fileops walk, so both backends find the same files."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import pathspec

from codecoder.tools.files.backend import Entry, FileContent, SearchOptions
from codecoder.tools.files.paths import _join, _under_git


class ManyFilesReader(Protocol):
    """What the ignore rules need from the fileops layer (`ConfinedFiles`): many small files."""

    def read_many(
        self, root: str, paths: Sequence[str], *, limit: int
    ) -> Iterator[tuple[str, FileContent | str]]:
        """The contents of `paths` (relative to `root`), in order, or an error message for each."""


IGNORE_FILES = (".rgignore", ".ignore", ".gitignore")  # ripgrep's precedence in one directory


def _searched_files(
    files: ManyFilesReader, base: str, entries: Sequence[Entry], options: SearchOptions
) -> list[str]:
    """The regular files of a walk of `base` that a search looks at (see SearchOptions), as
    paths relative to `base`, in walk order."""
    candidates = [
        e.path
        for e in entries
        if e.type == "file"
        and not _under_git(e.path)
        and (options.hidden or not any(part.startswith(".") for part in e.path.split("/")))
    ]
    if options.include_ignored:
        return candidates
    rules = _IgnoreRules.load(files, base, entries)
    return [rel for rel in candidates if not rules.ignored(rel)]


class _IgnoreRules:
    """`.gitignore`, `.ignore` and `.rgignore` files, applied as ripgrep applies them: the
    deepest file with a matching pattern decides, the last matching pattern in it wins, and
    nothing under an ignored directory comes back. Paths are relative to the walked `base`;
    the ignore files of its parents, up to the root, count too."""

    def __init__(self, specs: dict[str, list[pathspec.GitIgnoreSpec]], base: str) -> None:
        self._specs = specs  # directory relative to the root ("" for the root) -> its files
        self._base = "" if base == "." else base
        self._dirs: dict[str, bool] = {}

    @classmethod
    def load(cls, files: ManyFilesReader, base: str, entries: Sequence[Entry]) -> _IgnoreRules:
        head, _, _ = base.partition("/")
        parts = base.split("/") if base != "." else []
        prefix = [head] if head.startswith("@") else []
        texts: dict[str, dict[str, bytes]] = {}
        # The parents of `base`, up to the workspace (or read root) it is in.
        for depth in range(len(prefix), len(parts)):
            directory = "/".join(parts[:depth]) or "."
            for name, content in files.read_many(directory, list(IGNORE_FILES), limit=1 << 20):
                if isinstance(content, FileContent):
                    texts.setdefault("/".join(parts[:depth]), {})[name] = content.data
        inside = [
            e.path
            for e in entries
            if e.type == "file" and e.path.rsplit("/", 1)[-1] in IGNORE_FILES
        ]
        for rel, content in files.read_many(base, inside, limit=1 << 20):
            if isinstance(content, FileContent):
                directory, _, name = _join("" if base == "." else base, rel).rpartition("/")
                texts.setdefault(directory, {})[name] = content.data
        specs = {
            directory: [
                pathspec.GitIgnoreSpec.from_lines(
                    by_name[name].decode("utf-8", "replace").splitlines()
                )
                for name in IGNORE_FILES
                if name in by_name
            ]
            for directory, by_name in texts.items()
        }
        return cls(specs, base)

    def ignored(self, rel: str) -> bool:
        path = _join(self._base or ".", rel) if self._base else rel
        parts = path.split("/")
        below = len(self._base.split("/")) if self._base else 0
        for depth in range(below + 1, len(parts)):
            directory = "/".join(parts[:depth])
            if directory not in self._dirs:
                self._dirs[directory] = self._match(directory, is_dir=True)
            if self._dirs[directory]:
                return True
        return self._match(path, is_dir=False)

    def _match(self, path: str, *, is_dir: bool) -> bool:
        parts = path.split("/")
        for depth in range(len(parts) - 1, -1, -1):
            directory = "/".join(parts[:depth])
            for spec in self._specs.get(directory, ()):
                rel = "/".join(parts[depth:]) + ("/" if is_dir else "")
                verdict = spec.check_file(rel).include
                if verdict is not None:
                    return verdict
        return False
