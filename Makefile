# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Two installs into one venv: serving needs the runtime dependencies only; tests and linters
# need the [dev] extra (a superset). A PostgreSQL SHELLGATE_DATABASE_URL adds its driver.
DEV_STAMP := $(VENV)/.installed
# The server also reads its settings from .env: so does this, when the environment has no URL.
ENV_FILE ?= .env
DATABASE_URL := $(or $(SHELLGATE_DATABASE_URL),$(shell sed -n 's/^[[:space:]]*SHELLGATE_DATABASE_URL[[:space:]]*=[[:space:]]*//p' $(ENV_FILE) 2>/dev/null | tail -n 1))
RUNTIME_EXTRAS := $(if $(findstring postgresql,$(DATABASE_URL)),[postgres],)
RUNTIME_STAMP := $(VENV)/.installed-runtime$(if $(RUNTIME_EXTRAS),-postgres,)
# The console's xterm.js files (served from node_modules/, no build step).
NODE_STAMP := node_modules/.stamp
# Every install takes the versions the suite passed on (constraints.txt; `make lock` renews it).
PIP_INSTALL := $(BIN)/pip install -q -c constraints.txt

.PHONY: run test lint format openapi bench clean console-deps wheel lock

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUNTIME_STAMP): pyproject.toml setup.py constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.$(RUNTIME_EXTRAS)'
	touch $@

$(DEV_STAMP): pyproject.toml setup.py constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e '.[dev]'
	touch $@

# Resolve pyproject.toml's ranges afresh in a scratch venv and record the result: the next
# `make test` runs on it, and CI on exactly what that run passed on.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q -e '.[dev,postgres]'
	{ sed -n '/^#/p' constraints.txt; .venv-lock/bin/pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-lock

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "need npm (Node.js) for the console's xterm.js"; exit 1; }
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

console-deps: $(NODE_STAMP)

# Serving needs no npm: without it the console falls back to a plain log view.
run: $(RUNTIME_STAMP)
	@$(MAKE) --no-print-directory console-deps || echo "warning: console without xterm.js (no npm)"
	$(BIN)/shellgate serve

# Two workers (pytest-xdist): most of a test's time is a server starting or a command
# waiting, so two halves overlap even on two cores (CI: 16 min serial, 10 in two).
test: $(DEV_STAMP) $(NODE_STAMP)
	$(BIN)/pytest -q -n 2

# ruff's banned imports (pyproject.toml, app/api/ruff.toml) are the layering check.
lint: $(DEV_STAMP)
	$(BIN)/ruff format --check app shellgate tests bench migrations
	$(BIN)/ruff check app shellgate tests bench migrations
	$(BIN)/mypy app shellgate
	@command -v shellcheck >/dev/null || { echo "make lint needs shellcheck for the shipped scripts (Debian: apt-get install shellcheck)"; exit 1; }
	shellcheck app/process/*.sh app/sessions/*.sh

format: $(DEV_STAMP)
	$(BIN)/ruff format app shellgate tests bench migrations
	$(BIN)/ruff check --fix app shellgate tests bench migrations

openapi: $(DEV_STAMP)
	$(BIN)/python -m app openapi > openapi.json

bench: $(DEV_STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.bench_reader

# The wheel and sdist in dist/ (what `pip install shellgate-….whl` installs).
wheel: $(DEV_STAMP)
	$(BIN)/python -m build --outdir dist .

clean:
	rm -rf $(VENV) data build dist .pytest_cache .mypy_cache .ruff_cache node_modules
