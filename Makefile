# The two commands of the README: `make run` and `make test`. Both create the virtual
# environment first (once: `make venv` is a no-op when nothing changed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: venv run test lint typecheck layers pytest docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,test,docs,compression,spark]'
	touch $(STAMP)

run: venv
	$(BIN)/trio-kafka demo

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: venv
	$(BIN)/mypy

layers: venv
	$(BIN)/lint-imports

# A pytest-xdist worker per core (two here): the real-time tests (chaos, Spark, SIGKILL)
# in one group on one worker, the rest on all (tests/conftest.py). PYTEST_WORKERS=0 runs
# everything in one process.
PYTEST_WORKERS ?= auto

pytest: venv
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck layers docs pytest

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache
