# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Two installs into one venv: serving needs the runtime dependencies only; tests and linters
# need the [dev] extra (a superset). A PostgreSQL SHELLGATE_DATABASE_URL adds its driver.
DEV_STAMP := $(VENV)/.installed
# The server also reads its settings from .env: so does this, for a setting the environment
# does not hold (the file's last line for it).
ENV_FILE ?= .env
setting = $(or $($(1)),$(shell sed -n 's/^[[:space:]]*$(1)[[:space:]]*=[[:space:]]*//p' $(ENV_FILE) 2>/dev/null | tail -n 1))
DATABASE_URL := $(call setting,SHELLGATE_DATABASE_URL)
# Commands work in ./workspace unless a workspace is set, not in this checkout: what an agent
# wrote here (this Makefile, setup.py, the tests, .git's config and hooks) would run as whoever
# next runs make, the tests or git in it.
DEFAULT_WORKSPACE := $(if $(call setting,SHELLGATE_WORKSPACE),,$(CURDIR)/workspace)
RUNTIME_EXTRAS := $(if $(findstring postgresql,$(DATABASE_URL)),[postgres],)
RUNTIME_STAMP := $(VENV)/.installed-runtime$(if $(RUNTIME_EXTRAS),-postgres,)
# The console's xterm.js files (served from node_modules/, no build step).
NODE_STAMP := node_modules/.stamp
# Every install takes the versions the suite passed on (constraints.txt; `make lock` renews it).
PIP_INSTALL := $(BIN)/pip install -q -c constraints.txt
# The client (sdk/, distribution shellgate-client) is installed beside the server, which needs it.
SDK := sdk/pyproject.toml
# What lint and format read: the client's sources too.
SOURCES := app sdk tests bench migrations

.PHONY: run test lint format openapi bench clean console-deps wheel lock sync-sdk

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUNTIME_STAMP): pyproject.toml setup.py $(SDK) constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e ./sdk -e '.$(RUNTIME_EXTRAS)'
	touch $@

$(DEV_STAMP): pyproject.toml setup.py $(SDK) constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e ./sdk -e '.[dev]'
	touch $@

# Resolve pyproject.toml's ranges afresh in a scratch venv and record the result: the next
# `make test` runs on it, and CI on exactly what that run passed on.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q -e ./sdk -e '.[dev,postgres]'
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
	$(if $(DEFAULT_WORKSPACE),mkdir -p '$(DEFAULT_WORKSPACE)')
	$(if $(DEFAULT_WORKSPACE),SHELLGATE_WORKSPACE='$(DEFAULT_WORKSPACE)') $(BIN)/shellgate serve

# Two workers (pytest-xdist): most of a test's time is a server starting or a command
# waiting, so two halves overlap even on two cores (CI: 16 min serial, 10 in two).
test: $(DEV_STAMP) $(NODE_STAMP)
	$(BIN)/pytest -q -n 2

# ruff's banned imports (pyproject.toml, app/api/ruff.toml) are the layering check.
lint: $(DEV_STAMP)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/mypy app sdk/shellgate
	$(BIN)/python sdk/generate_sync.py --check
	@command -v shellcheck >/dev/null || { echo "make lint needs shellcheck for the shipped scripts (Debian: apt-get install shellcheck)"; exit 1; }
	shellcheck app/process/*.sh app/sessions/*.sh

format: $(DEV_STAMP)
	$(BIN)/ruff format $(SOURCES)
	$(BIN)/ruff check --fix $(SOURCES)

# The sync client (sdk/shellgate/sync_*.py) is generated from the async one: after changing
# async_*.py, run this and commit both (`make lint` checks they agree).
sync-sdk: $(DEV_STAMP)
	$(BIN)/python sdk/generate_sync.py

openapi: $(DEV_STAMP)
	$(BIN)/python -m app openapi > openapi.json

bench: $(DEV_STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.bench_reader

# The wheels and sdists in dist/: the server's and the client's it depends on (install both:
# `pip install dist/*.whl`).
wheel: $(DEV_STAMP)
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m build --outdir dist sdk

clean:
	rm -rf $(VENV) data build dist sdk/build .pytest_cache .mypy_cache .ruff_cache node_modules
