"""The documentation site holds together: it builds strictly (no broken link or anchor), the
README stays a front door whose links lead into it, the generated configuration reference is
current, and the pages that name the code's parts name all of them.

The examples in the pages are run by tests/test_docs_examples.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from codecoder.interfaces.hookinstall import Agent, plan_install
from codecoder.tools.names import BUILTIN_TOOL_NAMES
from tests.docsblocks import DOCS_CODECODER, REPO, recipe

README = REPO / "README.md"
DOCS = REPO / "docs"
CODE = ("runtime", "environments", "sandboxes", "benchmarks", "tests")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `mkdocs build --strict` makes it: a warning (a broken link or anchor, a page
    left out of the nav) fails the build."""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):  # CI must build it
        pytest.importorskip("material", reason="mkdocs-material is in the dev extra")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "spec" / "index.html").is_file()


def test_the_readme_is_a_front_door_of_at_most_16_kib() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode()) <= 16 * 1024
    # The set-up commands: one sh block right after the marker, install then test.
    after = text.split("<!-- set-up -->\n", 1)[1]
    assert after.startswith("```sh\n")
    commands = [line for line in after.split("```", 2)[1].splitlines()[1:] if line.strip()]
    assert len(commands) == 2


def _readme_links() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"\]\((docs/[^)#\s]+)(#[^)\s]*)?\)", text)


def test_every_readme_link_into_the_docs_leads_to_a_page_and_heading(site: Path) -> None:
    links = _readme_links()
    assert len(links) > 20
    for target, anchor in links:
        page = REPO / target
        assert page.is_file(), f"README links to {target}, which does not exist"
        relative = page.relative_to(DOCS).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "index" else relative.parts
        built = site.joinpath(*parts, "index.html")  # mkdocs' directory URLs
        if anchor:
            html = built.read_text(encoding="utf-8")
            assert f'id="{anchor[1:]}"' in html, (
                f"README links to {target}{anchor}: no such heading"
            )


def _config_reference() -> ModuleType:
    path = REPO / "scripts" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_describes_every_key_of_the_schema() -> None:
    reference = _config_reference()
    assert set(reference.leaves()) == set(reference.DESCRIPTIONS)


def test_the_configuration_reference_is_what_the_schema_generates() -> None:
    reference = _config_reference()
    committed = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    assert committed == reference.render(), "run: python scripts/config_reference.py"


def test_the_tools_page_names_every_built_in_tool() -> None:
    page = (DOCS / "reference" / "tools.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `([a-z_]+)` \|", page, re.M))
    assert named == set(BUILTIN_TOOL_NAMES)


def test_the_command_page_names_every_command() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "codecoder", "--help"], capture_output=True, text=True, check=True
    ).stdout
    listed = shown.split("positional arguments:", 1)[1].split("options:", 1)[0]
    commands = set(re.findall(r"^    ([a-z]+)\b", listed, re.M))
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `codecoder ([a-z]+)` \|", page, re.M))
    assert commands and named == commands


def test_the_specification_has_every_section_the_code_cites() -> None:
    cited: set[int] = set()
    for folder in CODE:
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".json", ".md", ".c") and path.is_file():
                for group in re.findall(
                    r"SPEC ((?:§\d+(?:, )?)+)", path.read_text(errors="replace")
                ):
                    cited.update(int(n) for n in re.findall(r"\d+", group))
    spec = (DOCS / "spec.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", spec, re.M)}
    assert cited, "the code cites no section: the search is broken"
    assert cited <= sections
    assert sections == set(range(1, max(sections) + 1)), "sections are numbered without gaps"


def test_every_path_of_the_repository_the_docs_name_exists() -> None:
    """A module renamed or moved fails here until the pages that name it follow."""
    folders = "|".join((*CODE, "scripts", "tests"))
    named = set()
    for page in [README, *DOCS.rglob("*.md")]:
        for path in re.findall(rf"`((?:{folders})/[^`\s]*)`", page.read_text()):
            # `tests/x.py::test_name` names a test: the file must exist
            named.add((page.relative_to(REPO), path.split("::")[0].rstrip("/")))
    assert len(named) > 50
    missing = [f"{page}: {path}" for page, path in sorted(named) if not (REPO / path).exists()]
    assert missing == []


@pytest.mark.parametrize(
    ("agent", "name"),
    [("claude-code", "claude-hooks"), ("gemini", "gemini-hooks"), ("codex", "codex-mcp")],
)
def test_the_agents_recipes_are_what_hook_install_writes(
    agent: Agent, name: str, tmp_path: Path
) -> None:
    """The recipes tests/integrations/ run are the product's: what `codecoder hook install
    AGENT` writes into a settings file that was not there, for the codecoder the docs name
    (`hook install --print` prints it; tests/runtime/interfaces/test_hook_install.py)."""
    written = plan_install(agent, (DOCS_CODECODER,), project=tmp_path).after
    assert recipe(name) == written, f"the recipe {name!r} is not what hook install writes"


# Packages the layout page describes as a whole ("one module per layer", "one module per family
# of programs") rather than module by module.
DESCRIBED_AS_A_WHOLE = ("runtime/permissions/programs", "runtime/interfaces/escapes")


def test_the_layout_page_names_every_module() -> None:
    """A module added to runtime/ or environments/ is named on docs/layout.md (by its file
    name), and a package by its folder: the page is where a newcomer looks for it."""
    page = (DOCS / "layout.md").read_text(encoding="utf-8")
    unnamed = []
    for top in ("runtime", "environments"):
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO)
            package = relative.parent.as_posix()
            if package.startswith(DESCRIBED_AS_A_WHOLE):
                if f"{relative.parent.name}/" not in page:
                    unnamed.append(package + "/")
            elif path.name != "__init__.py" and path.name not in page:
                unnamed.append(relative.as_posix())
            elif path.name == "__init__.py" and f"{relative.parent.name}/" not in page:
                unnamed.append(package + "/")
    assert unnamed == [], "docs/layout.md does not name: " + ", ".join(sorted(set(unnamed)))


def test_the_escape_suite_page_counts_the_corpus() -> None:
    """The numbers docs/security/escape-suite.md gives are the corpus's: attempts added to a
    layer's file change them."""
    layers = {
        path.stem: len(json.loads(path.read_text())["attempts"])
        for path in (REPO / "sandboxes" / "escapes").glob("*.json")
    }
    page = (DOCS / "security" / "escape-suite.md").read_text(encoding="utf-8")
    found = re.search(
        r"(\d+) attempts today\s+\(the docker layer's (\d+) run once under every runtime the "
        r"engine has: (\d+) with runc and gVisor\)",
        page,
    )
    assert found is not None, "the page no longer counts the attempts in the form this test reads"
    total, docker, both = (int(n) for n in found.groups())
    assert (total, docker, both) == (
        sum(layers.values()),
        layers["docker"],
        sum(layers.values()) + layers["docker"],
    )
