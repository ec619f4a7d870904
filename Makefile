# The two commands in the README: `make demo` and `make test`.
# Each creates .venv, installs what it needs, and checks for Java 17+.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Re-install whenever pyproject.toml changes.
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

# pytest-xdist workers for `make test` and `make test-fast`. Two: the first takes the Spark
# groups, the second the others (tests/support/schedule.py; docs/testing.md, "Workers").
# `make test WORKERS=0` runs everything in one process.
WORKERS ?= 2

.PHONY: demo demo-status test test-setup test-fast test-durations test-sqlserver lint typecheck bench java venv jars compat-venv jvm-archive wheel clean

java:
	@scripts/check_java.sh

$(STAMP): pyproject.toml
	@echo "changefeed: installing changefeed, dbt and PySpark into $(VENV) (a few minutes the first time; again only when pyproject.toml changes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv (from PyPI) resolves and installs the same pins several times faster than pip.
	$(BIN)/python -m pip install --quiet 'uv>=0.5'
	@# --compile-bytecode: uv writes no .pyc files by default (pip does), and where
	@# PYTHONDONTWRITEBYTECODE is set (as on the machines this project runs on) none is written,
	@# so every Python process the tests start would compile dbt and pyspark again (~1.6 s).
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[spark,connect,postgres,sqlserver,dbt,dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@
	@echo "changefeed: $(VENV) is ready"

venv: $(STAMP)

# Delta Lake and Iceberg jars for the local Spark session, fetched by Maven from
# jars/pom.xml into $(JARS) (read by changefeed.local.spark; CHANGEFEED_JARS overrides it),
# and Hadoop's S3A connector from jars/s3a/pom.xml, with its transitive dependencies (the
# AWS SDK's modules; that pom says why). Re-fetched only when a pom changes.
JARS ?= .jars
JARS_POMS := jars/pom.xml jars/s3a/pom.xml
JARS_STAMP := $(JARS)/.fetched-$(shell cat $(JARS_POMS) | cksum | cut -d' ' -f1)

$(JARS_STAMP): $(JARS_POMS)
	@echo "changefeed: fetching the Delta Lake, Iceberg, PostgreSQL JDBC and S3A jars with Maven into $(JARS) (a minute or two the first time; again only when jars/pom.xml or jars/s3a/pom.xml changes)"
	@rm -rf $(JARS)
	mvn -q -f jars/pom.xml dependency:copy-dependencies -DexcludeTransitive=true -DoutputDirectory=$(abspath $(JARS))
	mvn -q -f jars/s3a/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(JARS))
	@touch $@

jars: $(JARS_STAMP)

# PySpark 3.5 in an environment of its own, for the ULID UDFs' older-PySpark test
# (tests/test_udfs_older_pyspark.py); pins in tests/support/older_pyspark.txt.
COMPAT_VENV ?= .venv-pyspark35
COMPAT_STAMP := $(COMPAT_VENV)/.installed-$(shell cksum tests/support/older_pyspark.txt | cut -d' ' -f1)

$(COMPAT_STAMP): tests/support/older_pyspark.txt
	@test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet 'uv>=0.5'
	$(COMPAT_VENV)/bin/uv pip install --quiet --compile-bytecode --python $(COMPAT_VENV)/bin/python -r tests/support/older_pyspark.txt
	@rm -f $(COMPAT_VENV)/.installed-*
	@touch $@

compat-venv: $(COMPAT_STAMP)

# The class-data archive of the tests' short-lived Spark JVMs (tests/support/spark_jvm.py;
# docs/testing.md, "JVM options"), for the classes of this venv's pyspark and of $(JARS).
JVM_ARCHIVE := $(VENV)/spark-tests.jsa

$(JVM_ARCHIVE): $(STAMP) $(JARS_STAMP) tests/support/spark_jvm.py
	$(BIN)/python tests/support/spark_jvm.py $@

jvm-archive: $(JVM_ARCHIVE)

# The shop example end to end (examples/shop/shop_demo, not part of the wheel); state in
# .demo/, so a second run continues.
# Options: make demo DEMO_ARGS="--duration 30 --rate 20" (or --reset to start over).
demo: java venv jars
	PYTHONPATH=examples/shop $(BIN)/python -m shop_demo $(DEMO_ARGS)

# `changefeed status` on the demo's database (its embedded server is started if needed)
# and its Spark tables. Options: make demo-status STATUS_ARGS="--json".
demo-status: venv jars
	PYTHONPATH=examples/shop $(BIN)/python -m shop_demo status $(STATUS_ARGS)

# The package as one wheel for the nodes of a cluster (docs/deploying.md, "Shipping the
# package"): dist/changefeed-<version>-py3-none-any.whl, pure Python, its extras naming what
# each node needs. The dbt package is installed from git by revision instead.
wheel: venv
	$(BIN)/uv build --quiet --wheel --out-dir dist .

lint: venv
	$(BIN)/ruff check python tests benchmarks examples

typecheck: venv
	$(BIN)/mypy

# What every test tier runs before pytest, two jobs at a time on this project's 2 cores
# (each job is mostly one process): the two environments and the jars, then the
# class-data archive (one JVM) beside ruff and mypy. One after another, these took about
# 250 s of a fresh clone's `make test`.
test-setup: java
	@$(MAKE) --no-print-directory -j2 venv jars compat-venv
	@$(MAKE) --no-print-directory -j2 jvm-archive lint typecheck

# The full tier, which CI runs (.ci/run). test-fast leaves out the tests marked slow.
test: test-setup
	$(BIN)/python -m pytest -n $(WORKERS)

test-fast: test-setup
	$(BIN)/python -m pytest -n $(WORKERS) -m "not slow"

# The full tier, recording each test group's seconds into tests/durations.json, which
# orders the workers' lanes (tests/support/schedule.py); commit the file it writes.
test-durations: test-setup
	CHANGEFEED_RECORD_DURATIONS=1 $(BIN)/python -m pytest -n $(WORKERS)

# The live SQL Server suite against the server CHANGEFEED_SQLSERVER_DSN names
# (mssql://user:password@host:1433/master; docs/sqlserver.md, "Running the live suite").
# Without the variable it would only skip, so this target refuses to run without it.
test-sqlserver: venv
	@test -n "$$CHANGEFEED_SQLSERVER_DSN" || { echo "set CHANGEFEED_SQLSERVER_DSN=mssql://user:password@host:1433/master (docs/sqlserver.md)"; exit 1; }
	$(BIN)/python -m pytest tests/sqlserver_live tests/test_sqlserver_client.py -v

# Benchmarks print markdown tables and update docs/performance.md; never part of `make test`.
bench: java venv jars
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(COMPAT_VENV) $(JARS) .demo .pytest_cache .mypy_cache .ruff_cache .hypothesis spark-warehouse metastore_db derby.log dist build
