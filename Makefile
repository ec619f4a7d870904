# The two commands in the README: `make demo` and `make test`.
# Each creates .venv, installs what it needs, and checks for Java 17+.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Re-install whenever pyproject.toml changes.
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint typecheck bench java venv clean

java:
	@scripts/check_java.sh

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,postgres,sqlserver,dbt,dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

demo: java venv
	$(BIN)/python examples/ulid_udfs/demo.py

test: java venv
	$(BIN)/ruff check python tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest

# Benchmarks print markdown tables and update docs/performance.md; never part of `make test`.
bench: java venv
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis spark-warehouse metastore_db derby.log
