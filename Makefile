# memtap: `make demo` and `make test` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "memtap needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/memtap demo --db .demo/memtap-demo.db

lint: $(STAMP)
	$(BIN)/ruff check memtap tests benchmarks
	$(BIN)/ruff format --check memtap tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/mcp_overhead.py
	$(BIN)/python benchmarks/search_scaling.py
	$(BIN)/python benchmarks/openai_overhead.py

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
