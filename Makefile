# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The console's xterm.js files (served from node_modules/, no build step).
NODE_STAMP := node_modules/.stamp

.PHONY: run test lint format openapi bench clean console-deps

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "need npm (Node.js) for the console's xterm.js"; exit 1; }
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

console-deps: $(NODE_STAMP)

# Serving needs no npm: without it the console falls back to a plain log view.
run: $(STAMP)
	@$(MAKE) --no-print-directory console-deps || echo "warning: console without xterm.js (no npm)"
	$(BIN)/shellgate serve

test: $(STAMP) $(NODE_STAMP)
	$(BIN)/pytest -q

# ruff's banned imports (pyproject.toml, app/api/ruff.toml) are the layering check.
lint: $(STAMP)
	$(BIN)/ruff format --check app tests bench migrations
	$(BIN)/ruff check app tests bench migrations
	$(BIN)/mypy app
	@command -v shellcheck >/dev/null || { echo "make lint needs shellcheck for app/*.sh (Debian: apt-get install shellcheck)"; exit 1; }
	shellcheck app/*.sh

format: $(STAMP)
	$(BIN)/ruff format app tests bench migrations
	$(BIN)/ruff check --fix app tests bench migrations

openapi: $(STAMP)
	$(BIN)/python -m app openapi > openapi.json

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache node_modules
