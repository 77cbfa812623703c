# memtap: `make demo` and `make test` set up everything they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The reference MCP memory server the integration tests run as a real upstream (package.json).
NODE_STAMP := node_modules/.installed
# Debian's chromium, which the dashboard's browser tests drive through Playwright (never
# `playwright install`: the tests pass its path). Installed once when missing and apt-get exists.
CHROMIUM_STAMP := $(VENV)/.chromium
# The LangGraph example agent's own environment: langchain-mcp-adapters needs the MCP SDK 1.x and
# memtap the 2.x (examples/agents/requirements-langgraph.txt); tests/test_agents_examples.py runs it.
LANGGRAPH_VENV ?= .venv-langgraph
LANGGRAPH_STAMP := $(LANGGRAPH_VENV)/.installed

.PHONY: demo test lint typecheck pytest bench soak clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "memtap needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,agents]'
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --no-audit --no-fund --loglevel=error && touch $@; \
	else \
		echo "npm not found: tests that need the reference MCP memory server will be skipped"; \
	fi

$(LANGGRAPH_STAMP): examples/agents/requirements-langgraph.txt
	$(PYTHON) -m venv $(LANGGRAPH_VENV)
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet -r examples/agents/requirements-langgraph.txt
	@touch $@

$(CHROMIUM_STAMP):
	@if command -v chromium >/dev/null 2>&1; then \
		touch $@; \
	elif command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && apt-get install -y -qq chromium) && touch $@; \
	else \
		echo "no chromium and no apt-get: the dashboard's browser tests will be skipped"; \
	fi

# The main job: generate a small paradigms + permission suite, replay it on the embedded backend
# through memtap's MCP front door, and score the run: the table ends the demo.
demo: $(STAMP)
	@mkdir -p .demo
	@echo "== 1. A scripted memory session through memtap's MCP front door: the trace and an item's lineage"
	$(BIN)/memtap demo --db .demo/memtap-demo.db
	@echo "== 2. A generated paradigms + permission suite, replayed through the front door"
	$(BIN)/memtap suite gen paradigms --seed 7 --episodes 8 -o .demo/suite-paradigms.jsonl
	$(BIN)/memtap suite gen permission --seed 7 --episodes 2 -o .demo/suite-permission.jsonl
	cat .demo/suite-paradigms.jsonl .demo/suite-permission.jsonl > .demo/suite.jsonl
	$(BIN)/memtap suite stats .demo/suite.jsonl
	rm -f .demo/replay.db .demo/replay.db-wal .demo/replay.db-shm
	$(BIN)/memtap replay .demo/suite.jsonl --target builtin --workers 2 --run demo --db .demo/replay.db
	@echo "== 3. Its score: storage, retrieval and answer levels, profiles, failure attribution"
	$(BIN)/memtap score demo --db .demo/replay.db
	$(BIN)/memtap report demo --db .demo/replay.db -o .demo/report.html
	@echo "== Look at it: the run's report is .demo/report.html; the dashboard opens with"
	@echo "   $(BIN)/memtap ui --db .demo/replay.db    (then http://127.0.0.1:8760/ui/)"

lint: $(STAMP)
	$(BIN)/ruff check memtap tests benchmarks scripts examples
	$(BIN)/ruff format --check memtap tests benchmarks scripts examples

typecheck: $(STAMP)
	$(BIN)/mypy

# MEMTAP_REQUIRE_AGENTS: the example agents' tests fail, rather than skip, when a framework is missing.
# The suite runs on PYTEST_WORKERS pytest-xdist workers (auto: one per core), whole files per worker
# (loadfile: a module fixture is built once; with loadgroup a worker interleaved the browser tests with
# other files and built their site twice). The tests marked `serial` (the fault harness: wall-clock
# bounds) then run alone, outside xdist. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= auto
PYTEST_ENV := MEMTAP_REQUIRE_AGENTS=1 MEMTAP_LANGGRAPH_PYTHON=$(abspath $(LANGGRAPH_VENV))/bin/python
pytest: $(STAMP) $(NODE_STAMP) $(CHROMIUM_STAMP) $(LANGGRAPH_STAMP)
	$(PYTEST_ENV) $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not serial"
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:xdist -m serial

test: lint typecheck pytest

bench: $(STAMP) $(NODE_STAMP)
	$(BIN)/python benchmarks/mcp_proxy_overhead.py
	$(BIN)/python benchmarks/wrapped_servers_overhead.py
	$(BIN)/python benchmarks/mcp_overhead.py
	$(BIN)/python benchmarks/search_scaling.py
	$(BIN)/python benchmarks/replay_throughput.py
	$(BIN)/python benchmarks/openai_overhead.py
	$(BIN)/python benchmarks/ui_pages.py

# The long harness: the fault and load harness (64 clients) and then the fuzz
# (benchmarks/fuzz_soak.py, MEMTAP_FUZZ_EXAMPLES cases per operation and mode, default 200); prints the
# reliability table of docs/reliability.md and exits 1 when a target is missed.
soak: $(STAMP) $(NODE_STAMP)
	$(BIN)/python benchmarks/soak.py

clean:
	rm -rf $(VENV) $(LANGGRAPH_VENV) node_modules .demo .pytest_cache .mypy_cache .ruff_cache
