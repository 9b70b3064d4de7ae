# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint format openapi bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/shellgate serve

test: $(STAMP)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff format --check app tests bench migrations
	$(BIN)/ruff check app tests bench migrations
	$(BIN)/mypy app

format: $(STAMP)
	$(BIN)/ruff format app tests bench migrations
	$(BIN)/ruff check --fix app tests bench migrations

openapi: $(STAMP)
	$(BIN)/python -m app openapi > openapi.json

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
