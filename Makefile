# The developer's entry point: each habit of the project is one target (CONTRIBUTING.md).
# CI (.ci/run) runs `make check` and then the tests, so what holds here holds there.
#
#   make setup       install codecoder editable with its test tools, the npm clients the tests
#                    drive, and the pre-commit hooks
#   make lint        ruff check and ruff format --check
#   make format      ruff's fixes and formatting, applied
#   make types       mypy, strict, over the installed layout (scripts/typecheck.sh)
#   make layers      import-linter's layer and cycle contracts (scripts/lint-imports.sh)
#   make check       lint, types and layers: what CI runs before the tests
#   make test        the whole suite, exactly the README's command (in parallel: pyproject.toml)
#   make test-fast   the tests that need no Docker, no bubblewrap sandbox, no agent CLI and
#                    start no codecoder process (markers: docker, bwrap, agents, slow)
#   make docs        the documentation site, built strictly (mkdocs.yml)
#   make bench       the benchmarks, every area (bench.json and the table)
#
# The interpreter is the README's venv (.venv, scripts/install.sh) where there is one, else
# python3 (an activated venv); use another with `make PYTHON=/path/to/python ...`.

PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
# scripts/typecheck.sh and scripts/lint-imports.sh run $PYTHON too.
export PYTHON
FAST := not docker and not bwrap and not agents and not slow

.PHONY: help setup lint format types layers check test test-fast docs bench

help:
	@sed -n '4,15s/^# \{0,1\}//p' Makefile

setup:
	$(PYTHON) -m pip install -e '.[dev]'
	@if command -v npm >/dev/null; then \
	    npm ci --prefix tests/mcp_client --no-audit --no-fund && \
	    npm ci --prefix tests/integrations --no-audit --no-fund; \
	else echo "npm is missing: the MCP TypeScript client and agent CLI tests will skip"; fi
	@if [ -e .git ]; then $(PYTHON) -m pre_commit install; fi

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

format:
	$(PYTHON) -m ruff check --fix .
	$(PYTHON) -m ruff format .

types:
	bash scripts/typecheck.sh

layers:
	bash scripts/lint-imports.sh

check: lint types layers

test:
	$(PYTHON) -m pytest -q

test-fast:
	$(PYTHON) -m pytest -q -m "$(FAST)"

docs:
	@test -f mkdocs.yml || { echo "make docs: no mkdocs.yml in $(CURDIR)" >&2; exit 2; }
	$(PYTHON) -m mkdocs build --strict

bench:
	$(PYTHON) -m codecoder bench --json bench.json
