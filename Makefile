# The two commands in the README: `make demo` and `make test`.
# Each creates .venv, installs what it needs, and checks for Java 17+.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Re-install whenever pyproject.toml changes.
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo demo-status test lint typecheck bench java venv jars clean

java:
	@scripts/check_java.sh

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,postgres,sqlserver,dbt,dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

# Delta Lake and Iceberg jars for the local Spark session, fetched by Maven from
# jars/pom.xml into $(JARS) (read by changefeed.local_spark; CHANGEFEED_JARS overrides it).
# Re-fetched only when the pom changes.
JARS ?= .jars
JARS_STAMP := $(JARS)/.fetched-$(shell cksum jars/pom.xml | cut -d' ' -f1)

$(JARS_STAMP): jars/pom.xml
	@rm -rf $(JARS)
	mvn -q -f jars/pom.xml dependency:copy-dependencies -DexcludeTransitive=true -DoutputDirectory=$(abspath $(JARS))
	@touch $@

jars: $(JARS_STAMP)

# The shop example end to end (examples/shop/shop_demo, not part of the wheel); state in
# .demo/, so a second run continues.
# Options: make demo DEMO_ARGS="--duration 30 --rate 20" (or --reset to start over).
demo: java venv jars
	PYTHONPATH=examples/shop $(BIN)/python -m shop_demo $(DEMO_ARGS)

# `changefeed status` on the demo's database (its embedded server is started if needed)
# and its Spark tables. Options: make demo-status STATUS_ARGS="--json".
demo-status: venv jars
	PYTHONPATH=examples/shop $(BIN)/python -m shop_demo status $(STATUS_ARGS)

test: java venv jars
	$(BIN)/ruff check python tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/python -m pytest

# Benchmarks print markdown tables and update docs/performance.md; never part of `make test`.
bench: java venv jars
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(JARS) .demo .pytest_cache .mypy_cache .ruff_cache .hypothesis spark-warehouse metastore_db derby.log
