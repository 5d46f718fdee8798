"""`import codecoder`: the public names, each where it is defined and documented; loaded when
used, so that importing the package costs only the standard library."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import codecoder

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "integrations" / "python.md"


def test_every_public_name_is_exported_and_resolves() -> None:
    assert sorted(codecoder.__all__) == codecoder.__all__  # kept sorted: a diff shows a change
    assert set(codecoder.__all__) == set(codecoder._PUBLIC)
    for name in codecoder.__all__:
        value = getattr(codecoder, name)
        module = importlib.import_module(codecoder._PUBLIC[name])
        assert value is getattr(module, name), name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == codecoder._PUBLIC[name], name
    assert set(codecoder.__all__) <= set(dir(codecoder))


def test_a_name_that_is_not_public_is_an_attribute_error() -> None:
    try:
        codecoder.Dispatcher  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'Dispatcher'" in str(exc)
    else:
        raise AssertionError("codecoder.Dispatcher is not public")


def test_every_error_is_public_and_the_tree_has_one_root() -> None:
    from codecoder.foundation import errors

    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    }
    assert defined <= set(codecoder.__all__)
    assert all(issubclass(getattr(codecoder, name), codecoder.CodecoderError) for name in defined)


def test_every_public_name_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    undocumented = [name for name in codecoder.__all__ if not re.search(rf"`{name}[`(]", text)]
    assert undocumented == []


def test_the_package_is_typed() -> None:
    assert (Path(codecoder.__file__).parent / "py.typed").is_file()
    config = (REPO / "pyproject.toml").read_text()
    assert '"codecoder" = ["py.typed"]' in config


def _imported(*argv: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True
    )
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_importing_codecoder_imports_only_the_standard_library() -> None:
    imported = _imported("-c", "import codecoder") - _imported("-c", "pass")
    assert imported == {"codecoder"}


def test_a_public_name_loads_its_module_when_first_used() -> None:
    imported = _imported("-c", "import codecoder; codecoder.Answer")
    assert "codecoder.foundation.decision" in imported
    assert not imported & {"pydantic", "docker", "bashlex", "codecoder.session"}
