# memtap: `make demo` and `make test` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The reference MCP memory server the integration tests run as a real upstream (package.json).
NODE_STAMP := node_modules/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "memtap needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --no-audit --no-fund --loglevel=error && touch $@; \
	else \
		echo "npm not found: tests that need the reference MCP memory server will be skipped"; \
	fi

demo: $(STAMP)
	$(BIN)/memtap demo --db .demo/memtap-demo.db

lint: $(STAMP)
	$(BIN)/ruff check memtap tests benchmarks
	$(BIN)/ruff format --check memtap tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) $(NODE_STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP) $(NODE_STAMP)
	$(BIN)/python benchmarks/mcp_proxy_overhead.py
	$(BIN)/python benchmarks/mcp_overhead.py
	$(BIN)/python benchmarks/search_scaling.py

clean:
	rm -rf $(VENV) node_modules .demo .pytest_cache .mypy_cache .ruff_cache
