"""Package indexes: the hosts a package manager reaches together, asked as one network grant.

`pip install` reaches pypi.org for the index and files.pythonhosted.org for the files; a grant
for one without the other only moves the failure. So a network question for a host of an index
(`network:pypi.org`) offers the index as one grant ("the Python package index: pypi.org,
files.pythonhosted.org"), recording each host's key (`GrantLevel.also`): the entries say
exactly which hosts they admit, and nothing is admitted by a name the file does not spell.

The table lists only the registries' own public hosts, each of which serves nothing but
packages: never a code host (github.com) nor a shared cloud storage host, where a grant would
reach far more than packages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from codecoder.permissions.programs.table import canonical_name

__all__ = ["PackageIndex", "index_for_host", "index_for_program"]


@dataclass(frozen=True, slots=True)
class PackageIndex:
    """One package index: what a person calls it, its hosts, the programs that use it."""

    name: str
    hosts: tuple[str, ...]
    programs: tuple[str, ...]


INDEXES: Final = (
    PackageIndex(
        "the Python package index",
        ("pypi.org", "files.pythonhosted.org"),
        ("pip", "pip3", "uv", "poetry", "pipx", "pdm", "hatch", "twine"),
    ),
    PackageIndex(
        "the npm registry",
        ("registry.npmjs.org", "registry.yarnpkg.com"),
        ("npm", "npx", "pnpm", "pnpx", "yarn", "bun", "bunx", "corepack"),
    ),
    PackageIndex(
        "the Rust crate registry",
        ("crates.io", "static.crates.io", "index.crates.io"),
        ("cargo", "rustup"),
    ),
    PackageIndex(
        "the Go module proxy and checksum database",
        ("proxy.golang.org", "sum.golang.org"),
        ("go",),
    ),
    PackageIndex(
        "the RubyGems index",
        ("rubygems.org", "index.rubygems.org"),
        ("gem", "bundle", "bundler"),
    ),
)
_BY_HOST: Final = {host: index for index in INDEXES for host in index.hosts}
_BY_PROGRAM: Final = {program: index for index in INDEXES for program in index.programs}


def index_for_host(host: str) -> PackageIndex | None:
    """The package index `host` is one of the hosts of, or None."""
    return _BY_HOST.get(host.lower().rstrip("."))


def index_for_program(argv: Sequence[str]) -> PackageIndex | None:
    """The package index the command `argv` uses when it is a package manager (`pip`, `python
    -m pip`, `npx`, `cargo`), or None."""
    if not argv:
        return None
    name = canonical_name(argv[0])
    if name.startswith("python") and len(argv) > 2 and argv[1] == "-m":
        name = argv[2]
    return _BY_PROGRAM.get(name)
