# The two commands of the README: `make run` and `make test`. Both create the virtual
# environment first (once: `make venv` is a no-op when nothing changed).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: venv run test lint typecheck layers pytest docs clean kafka

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,test,docs,compression,spark]'
	touch $(STAMP)

# Apache Kafka for the tests (kafka/pom.xml): its jars from Maven Central into a cache
# folder git ignores, fetched again only when the pom changes. Needs Java 17+ and Maven.
KAFKA_JARS := .cache/kafka/jars
KAFKA_STAMP := .cache/kafka/.stamp

kafka: $(KAFKA_STAMP)

$(KAFKA_STAMP): kafka/pom.xml
	@command -v java >/dev/null || { echo "make kafka: no java on the PATH; Apache Kafka 4.4 needs Java 17 or newer (e.g. apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
	@command -v mvn >/dev/null || { echo "make kafka: no mvn on the PATH; Maven fetches Kafka's jars from Maven Central (e.g. apt-get install maven)" >&2; exit 1; }
	rm -rf $(KAFKA_JARS)
	mvn --batch-mode --quiet -f kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(KAFKA_JARS)
	touch $(KAFKA_STAMP)

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

test: kafka lint typecheck layers docs pytest

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache .cache/kafka
