"""The shared catalog: one Spark catalog that the CLI, the Spark source and dbt use at once.

An embedded Derby metastore admits one process, so a landing loop and ``dbt run`` cannot
share it. The shared catalog keeps Spark's Hive metastore in an embedded PostgreSQL server
(pgserver's binaries, listening on 127.0.0.1) and writes one ``spark-defaults.conf``
that every Spark process of the project reads through ``SPARK_CONF_DIR``: pyspark's
launcher applies it to the CLI's session and to dbt-spark's ``method: session`` alike,
so the one file is the one place the catalog is configured.

    <dir>/postgres/             the metastore server's data directory
    <dir>/warehouse/            the tables' files (unless --warehouse names another
                                directory, or an object store's URI: s3a://bucket/path)
    <dir>/conf/spark-defaults.conf  ending in a section of the user's own settings, which
                                init keeps (:data:`USER_SECTION`)
    <dir>/conf/spark-env.sh     starts a stopped server before any Spark driver starts
    <dir>/conf/log4j2.properties  Spark's warnings, without the routine ones
    <dir>/catalog.json          port and warehouse, read back by later commands

:func:`init` is idempotent: it creates what is missing and starts the server if it is
stopped (after a reboot, run it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from xml.etree import ElementTree

from changefeed.dialects.postgres import metastore
from changefeed.errors import ChangefeedError
from changefeed.local import jars
from changefeed.local._jvm import LOCAL_CONF, jvm_output_to, require_java
from changefeed.local.embedded_postgres import import_pgserver

__all__ = [
    "ANNOUNCED",
    "CONF_FILE",
    "DEFAULT_DIR",
    "ENV_FILE",
    "HOST",
    "LOG_FILE",
    "MARKER",
    "METASTORE_DB",
    "QUIET_LOGGERS",
    "SILENT_LOG_FILE",
    "SPARK_STARTING",
    "STOPPED_FILE",
    "USER_SECTION",
    "Catalog",
    "CatalogError",
    "before_spark",
    "configured",
    "connect_metastore",
    "ensure_running",
    "found_above",
    "init",
    "is_uri",
    "launcher_script",
    "load",
    "logging_properties",
    "schema_lock",
    "schema_ready",
    "silent_logging_properties",
    "start_failed_message",
    "starting_message",
    "stop",
    "stopped_message",
    "unset_message",
    "write_conf",
]

#: The catalog's directory that ``changefeed catalog init`` takes without ``--dir``,
#: relative to the directory it runs in.
DEFAULT_DIR = ".changefeed/catalog"
#: The file in a catalog's directory that holds its port and warehouse: a directory is a
#: catalog when it has one.
_STATE_FILE = "catalog.json"
#: Key of spark-defaults.conf naming the catalog directory; marks the file as this
#: module's, so a SPARK_CONF_DIR of the user's own is never taken for a shared catalog.
MARKER = "spark.changefeed.catalog"
CONF_FILE = "spark-defaults.conf"
#: The last line of spark-defaults.conf that ``init`` writes: what the user adds below it
#: (an object store's endpoint and credentials) is kept when ``init`` rewrites the file.
#: Spark reads the file top down and a later line wins, so a key set there also overrides
#: the catalog's own value above it.
USER_SECTION = "# Your own settings below this line are kept by `changefeed catalog init`."
#: In the catalog's directory while ``changefeed catalog stop`` holds the server stopped:
#: then no Spark start starts it (after a reboot, without the file, one does), and each
#: says so in one line naming ``init``, which removes the file.
STOPPED_FILE = "stopped"
#: Spark's logging for a start on a stopped catalog: none, so that the driver's one
#: error (the metastore it cannot reach) is all it prints.
SILENT_LOG_FILE = "log4j2-stopped.properties"
#: Sourced by Spark's launcher (bin/load-spark-env.sh) from SPARK_CONF_DIR before it
#: starts a driver JVM: the one hook that also runs for dbt-spark's ``method: session``.
ENV_FILE = "spark-env.sh"
#: Spark's logging for every process on the catalog (read from SPARK_CONF_DIR, which
#: Spark's launcher puts first on the class path).
LOG_FILE = "log4j2.properties"
#: Loggers whose warnings are routine on a local shared catalog, each with what it says
#: on every clean run: a table's location that does not exist yet (with a stack trace),
#: the metastore's schema version, Hive's settings, Hadoop's native libraries.
QUIET_LOGGERS = {
    "filestreamsink": "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink",
    "hadoopfsutils": "org.apache.spark.util.HadoopFSUtils",
    "objectstore": "org.apache.hadoop.hive.metastore.ObjectStore",
    "hivelog": "hive.log",
    "hiveconf": "org.apache.hadoop.hive.conf.HiveConf",
    "sessionstate": "org.apache.hadoop.hive.ql.session.SessionState",
    "nativecodeloader": "org.apache.hadoop.util.NativeCodeLoader",
    # a Delta table in a Hive metastore has no Hive SerDe: said for every table created
    "hiveexternalcatalog": "org.apache.spark.sql.hive.HiveExternalCatalog",
    # a long plan's text is shortened (a state model's MERGE)
    "sparkstringutils": "org.apache.spark.util.SparkStringUtils",
    # a cached result's lineage is cut (Delta's MERGE)
    "mappartitionsrdd": "org.apache.spark.rdd.MapPartitionsRDD",
}
METASTORE_DB = "metastore"
#: What a Spark start on the catalog prints on a terminal (spark-env.sh), unless the
#: process that starts Spark has said so itself and set :data:`ANNOUNCED`.
SPARK_STARTING = "changefeed: starting Spark (10 to 60 s)"
ANNOUNCED = "CHANGEFEED_SPARK_ANNOUNCED"
HOST = "127.0.0.1"
#: A location with a scheme (s3a://, hdfs://, file://): Spark's to reach, kept as given.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: A line of a Java properties file: the key, an optional ``=`` or ``:``, the value.
_PROPERTY = re.compile(r"([^\s=:]+)\s*[=:]?\s*(.*)")
#: The root logger and its one appender, on standard error, of both logging files.
_CONSOLE = [
    "rootLogger.level = warn",
    "rootLogger.appenderRef.stderr.ref = console",
    "appender.console.type = Console",
    "appender.console.name = console",
    "appender.console.target = SYSTEM_ERR",
]
#: A table of our own in the metastore database, created once every Hive table is.
_SCHEMA_CREATED = "changefeed_schema_created"


class CatalogError(ChangefeedError, RuntimeError):
    """The shared catalog cannot be set up or reached; the message names the fix."""


@dataclass(frozen=True)
class Catalog:
    directory: Path
    #: Where the tables live: an absolute local path, or a URI (``s3a://bucket/path``).
    warehouse: str
    port: int

    @property
    def pgdata(self) -> Path:
        return self.directory / "postgres"

    @property
    def conf_dir(self) -> Path:
        return self.directory / "conf"

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{HOST}:{self.port}/{METASTORE_DB}"

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings of the catalog (what spark-defaults.conf holds)."""
        driver = jars.postgresql_driver()
        conf = {
            MARKER: str(self.directory),
            **LOCAL_CONF,
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": self.warehouse,
            # The metastore's class loader sees the driver only on the JVM's class path:
            # spark.jars is added later, to a loader the Hive client does not search.
            "spark.driver.extraClassPath": str(driver),
            "spark.hadoop.javax.jdo.option.ConnectionURL": self.jdbc_url,
            "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            "spark.hadoop.javax.jdo.option.ConnectionUserName": "postgres",
            "spark.hadoop.javax.jdo.option.ConnectionPassword": "",
            # Spark turns these on for its Derby default only. init creates the schema
            # first, alone; creation stays on for a table a later Hive call needs first.
            "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
            "spark.hadoop.hive.metastore.schema.verification": "false",
        }
        try:
            lakehouse = jars.lakehouse_jars()
        except jars.LakehouseJarsMissing:
            pass
        else:
            conf.update(jars.lakehouse_conf(lakehouse, self.warehouse))
            # The Thrift server resolves the catalog plugins (DeltaCatalog, Iceberg's) and
            # their base classes from the JVM's class path too, not from spark.jars: without
            # them there it could read no table at all (NoClassDefFoundError).
            conf["spark.driver.extraClassPath"] = os.pathsep.join(
                [str(driver), *(str(jar) for jar in lakehouse)]
            )
        return conf

    def user_conf(self) -> dict[str, str]:
        """The settings of spark-defaults.conf's user section (below :data:`USER_SECTION`)."""
        return _properties(_user_section(self.conf_dir / CONF_FILE))


def is_uri(location: str | Path) -> bool:
    """Whether ``location`` names its file system by a scheme (``s3a://bucket/path``)
    rather than being a local path."""
    return bool(_URI.match(str(location)))


def _location(warehouse: str | Path) -> str:
    """A warehouse as catalog.json keeps it: a URI as given (without a trailing ``/``), a
    local path made absolute."""
    if is_uri(warehouse):
        return str(warehouse).rstrip("/")
    return str(Path(warehouse).resolve())


def _user_section(conf_file: Path) -> str:
    """What follows :data:`USER_SECTION` in ``conf_file`` ("" without the file or line)."""
    try:
        text = conf_file.read_text()
    except FileNotFoundError:
        return ""
    _, found, kept = text.partition(USER_SECTION + "\n")
    return kept if found else ""


def _properties(text: str) -> dict[str, str]:
    """``key value`` lines as Spark reads spark-defaults.conf (a Java properties file: the
    key ends at the first blank, ``=`` or ``:``; ``#`` and ``!`` start comments); a later
    line wins. Continuation lines (a trailing ``\\``) are not joined."""
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        match = _PROPERTY.match(line)
        if match:
            settings[match[1]] = match[2].strip()
    return settings


def configured() -> Catalog | None:
    """The shared catalog that ``SPARK_CONF_DIR`` names, or None (the Derby default)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        return None
    conf_file = Path(conf_dir) / CONF_FILE
    if not conf_file.is_file():
        return None
    for line in conf_file.read_text().splitlines():
        key, _, value = line.strip().partition(" ")
        if key == MARKER:
            return load(Path(value.strip()))
    return None


def found_above(start: Path) -> Catalog | None:
    """The catalog in :data:`DEFAULT_DIR` of ``start`` or of its nearest parent that has
    one (as ``init`` run there without ``--dir`` made it), or None."""
    for directory in (start, *start.parents):
        candidate = directory / DEFAULT_DIR
        if (candidate / _STATE_FILE).is_file():
            return load(candidate)
    return None


def unset_message(catalog: Catalog) -> str:
    """What a Spark start that would miss ``catalog`` for want of ``SPARK_CONF_DIR``
    says, in one line."""
    conf_dir = shlex.quote(str(catalog.conf_dir))
    return (
        f"SPARK_CONF_DIR is not set, so this Spark session would start a catalog of its own "
        f"(a new Derby metastore_db/ in the current directory) instead of the shared catalog "
        f"in {shlex.quote(str(catalog.directory))}, where the landing writes: export "
        f"SPARK_CONF_DIR={conf_dir} (the line changefeed catalog init printed), or set it to a "
        f"conf directory of your own for another catalog"
    )


def load(directory: Path) -> Catalog:
    state_file = directory / _STATE_FILE
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        raise CatalogError(
            f"{directory} holds no shared catalog (no catalog.json): run "
            f"`changefeed catalog init --dir {directory}`"
        ) from None
    return Catalog(directory=directory, warehouse=str(state["warehouse"]), port=state["port"])


def init(directory: str | Path, *, warehouse: str | Path | None = None) -> Catalog:
    """Create (or find) the catalog in ``directory``, start its server, write its conf.

    ``warehouse``: a local directory (made absolute), or a URI that Spark reaches through
    a Hadoop file system (``s3a://bucket/path``), kept as given."""
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    location = _location(warehouse) if warehouse is not None else None
    with _locked(directory):
        state_file = directory / _STATE_FILE
        if state_file.exists():
            catalog = load(directory)
            if location is not None and location != catalog.warehouse:
                raise CatalogError(
                    f"the catalog in {directory} keeps its tables in {catalog.warehouse}, "
                    f"not {location}: leave out --warehouse, or use another --dir"
                )
        else:
            catalog = Catalog(
                directory=directory,
                warehouse=location or str(directory / "warehouse"),
                port=_free_port(),
            )
        if catalog.warehouse.startswith("s3a://"):
            try:
                jars.s3a_connector()
            except jars.LakehouseJarsMissing as exc:
                raise CatalogError(str(exc)) from None
        # Written first: the port it names is the server's from the first start on.
        state_file.write_text(
            json.dumps({"warehouse": str(catalog.warehouse), "port": catalog.port}) + "\n"
        )
        _start_server(catalog)
        (directory / STOPPED_FILE).unlink(missing_ok=True)
        _create_database(catalog)
        if not is_uri(catalog.warehouse):
            Path(catalog.warehouse).mkdir(parents=True, exist_ok=True)
        write_conf(catalog)
    with schema_lock(catalog):
        if not schema_ready(catalog):
            _create_schema(catalog)
    return catalog


def write_conf(catalog: Catalog) -> None:
    """Write the files of ``<dir>/conf``; of an existing spark-defaults.conf, the user's
    section (below :data:`USER_SECTION`) is kept."""
    catalog.conf_dir.mkdir(exist_ok=True)
    conf_file = catalog.conf_dir / CONF_FILE
    conf = "".join(f"{key} {value}\n" for key, value in catalog.spark_conf().items())
    _replace(
        conf_file,
        "# Written by `changefeed catalog init`; every Spark process that reads it\n"
        "# (SPARK_CONF_DIR) shares one catalog. Run the command again to rewrite it: it\n"
        "# rewrites the lines above the last comment and keeps those below it.\n"
        + conf
        + USER_SECTION
        + "\n"
        + _user_section(conf_file),
    )
    (catalog.conf_dir / ENV_FILE).write_text(launcher_script(catalog))
    (catalog.conf_dir / LOG_FILE).write_text(logging_properties())
    (catalog.conf_dir / SILENT_LOG_FILE).write_text(silent_logging_properties())


def _replace(path: Path, text: str) -> None:
    # A killed init leaves the old file, with the user's section, not half a new one.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def logging_properties() -> str:
    """The catalog's ``log4j2.properties``: Spark's warnings and errors on standard error,
    as Spark's own default for a shell, without the routine ones of :data:`QUIET_LOGGERS`
    (a clean ``dbt run`` printed some 340 lines of stack traces from them)."""
    lines = [
        "# Written by `changefeed catalog init`: the logging of every Spark process on this",
        "# catalog. Run the command again to rewrite it.",
        *_CONSOLE,
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
    ]
    for key, name in QUIET_LOGGERS.items():
        lines += [f"logger.{key}.name = {name}", f"logger.{key}.level = error"]
    return "\n".join(lines) + "\n"


def silent_logging_properties() -> str:
    """The catalog's :data:`SILENT_LOG_FILE`: a Spark start while ``changefeed catalog
    stop`` holds the catalog stopped logs nothing. The root keeps a shell's level (else
    PySpark's driver says that it changes it) and its one appender passes nothing (without
    an appender Spark would take the file for none and log with its own defaults)."""
    lines = [
        "# Written by `changefeed catalog init`: the logging of a Spark start on the catalog",
        "# while `changefeed catalog stop` holds it stopped (spark-env.sh names it): none.",
        *_CONSOLE,
        "appender.console.filter.threshold.type = ThresholdFilter",
        "appender.console.filter.threshold.level = off",
    ]
    return "\n".join(lines) + "\n"


def launcher_script(catalog: Catalog, python: str = sys.executable) -> str:
    """The ``spark-env.sh`` of the catalog: before a Spark driver starts (any pyspark,
    ``spark-submit`` or Thrift server; dbt's plugin does the same earlier,
    :func:`before_spark`), start the server if it is not running (after a reboot), as the
    changefeed commands do (:func:`ensure_running`). Without it, a driver on a stopped
    catalog waits a minute for Hive's retries and prints thousands of lines that never
    name the fix. When the server cannot be started, the launch stops with one line
    naming the command that shows why.
    A catalog that ``changefeed catalog stop`` stopped stays stopped: the launch says so in
    one line naming ``init``, and its driver fails at its first look at the catalog, at
    once and without a log line. On a terminal it says that Spark is starting
    (:data:`SPARK_STARTING`)."""
    directory = shlex.quote(str(catalog.directory))
    starting = f"changefeed: {starting_message(catalog)}"
    failed = f"changefeed: {start_failed_message(catalog)}"
    # The driver starts, but asks the metastore at the stopped server's port, once, with
    # its logging off: its first look at the catalog fails at once in one error (dbt then
    # says it in a few lines), where an exit here would leave PySpark's gateway error and
    # dbt a traceback of 150 lines.
    held = " ".join([
        f"-Dspark.hadoop.hive.metastore.uris=thrift://{HOST}:{catalog.port}",
        "-Dspark.hadoop.hive.metastore.connect.retries=1",
        "-Dspark.hadoop.hive.metastore.failure.retries=0",
        f"-Dlog4j2.configurationFile={catalog.conf_dir / SILENT_LOG_FILE}",
    ])  # fmt: skip
    return (
        "# Written by `changefeed catalog init`; Spark's launcher sources it from\n"
        "# SPARK_CONF_DIR before it starts a driver. It starts the shared catalog's server\n"
        "# when it is stopped (after a reboot), unless `changefeed catalog stop` stopped it.\n"
        "# Run the command again to rewrite it.\n"
        "# A local catalog's drivers listen on the loopback (else Spark warns on every start\n"
        "# that the host name resolves to it).\n"
        'SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"\n'
        f"if [ -e {shlex.quote(str(catalog.directory / STOPPED_FILE))} ]; then\n"
        f"  echo {shlex.quote('changefeed: ' + stopped_message(catalog))} >&2\n"
        f'  export SPARK_SUBMIT_OPTS="${{SPARK_SUBMIT_OPTS:-}} {held}"\n'
        f"elif ! (exec 3<>/dev/tcp/{HOST}/{catalog.port}) 2>/dev/null; then\n"
        f"  echo {shlex.quote(starting)} >&2\n"
        f"  if ! {shlex.quote(python)} -m changefeed.cli catalog init --dir {directory} "
        ">/dev/null 2>&1; then\n"
        f"    echo {shlex.quote(failed)} >&2\n"
        "    exit 1\n"
        "  fi\n"
        "fi\n"
        "# On a terminal, say what the next seconds are (a dbt run printed nothing while its\n"
        "# Spark started); a pipe or a log file gets nothing.\n"
        f'if [ -t 2 ] && [ -z "${{{ANNOUNCED}:-}}" ]; then\n'
        f"  echo {shlex.quote(SPARK_STARTING)} >&2\n"
        "fi\n"
    )


def _create_schema(catalog: Catalog) -> None:
    """Create every table of Hive's metastore now, in this one process, through Hive's
    own DataNucleus set-up (so names and types are the ones Hive maps to).

    Left to itself, DataNucleus creates a table the first time Hive uses it, on a second
    connection, while the first holds the transaction's locks: on PostgreSQL the two
    wait for each other for ever (a `drop database` was the first to hang), and two
    processes starting at once would also race to create the same tables.
    """
    import pyspark
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    require_java()
    # A JVM with Spark's class path and the driver, but no Spark context: Hive's own
    # classes are all this needs, and the context would double the start-up time.
    conf = SparkConf(loadDefaults=False)
    conf.set("spark.driver.extraClassPath", str(jars.postgresql_driver()))
    # The JVM's log lines go to a file, not between the command's output.
    with jvm_output_to(catalog.directory / "init-jvm.log"):
        gateway = launch_gateway(conf)  # type: ignore[no-untyped-call]
    try:
        jvm = gateway.jvm
        hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf()
        for key, value in catalog.spark_conf().items():
            if key.startswith("spark.hadoop."):
                hive_conf.set(key.removeprefix("spark.hadoop."), value)
        store = jvm.org.apache.hadoop.hive.metastore.ObjectStore()
        store.setConf(hive_conf)
        try:
            factory = store.getPersistenceManager().getPersistenceManagerFactory()
            classes = jvm.java.util.HashSet()
            for name in _metastore_classes(Path(pyspark.__file__).parent / "jars"):
                classes.add(name)
            factory.getNucleusContext().getStoreManager().createSchemaForClasses(
                classes, jvm.java.util.Properties()
            )
        finally:
            store.shutdown()
    finally:
        gateway.shutdown()
        gateway.proc.terminate()
        gateway.proc.wait()
    with _connect(catalog) as conn:
        metastore.mark_schema_created(conn, _SCHEMA_CREATED)


def _metastore_classes(spark_jars: Path) -> list[str]:
    """The persistent classes of Hive's metastore, from the package.jdo of its jar."""
    found = sorted(spark_jars.glob("hive-metastore-*.jar"))
    if not found:
        raise CatalogError(
            f"Spark's Hive metastore jar (hive-metastore-*.jar) is not in {spark_jars}: "
            "the shared catalog needs a pyspark with Hive support (pip install pyspark)"
        )
    with zipfile.ZipFile(found[-1]) as jar:
        jdo = ElementTree.fromstring(jar.read("package.jdo"))
    return [
        f"{package.get('name')}.{cls.get('name')}"
        for package in jdo.iter("package")
        for cls in package.iter("class")
    ]


def ensure_running(catalog: Catalog) -> None:
    """Start the catalog's server if it is not running (after a reboot); no-op if it runs.
    A catalog stopped by :func:`stop` stays stopped: CatalogError naming ``init``."""
    with _locked(catalog.directory):
        if (catalog.directory / STOPPED_FILE).exists():
            raise CatalogError(stopped_message(catalog))
        _start_server(catalog)


def stop(catalog: Catalog) -> None:
    """Stop the catalog's server (its data stays) and keep it stopped: no Spark start or
    ``changefeed`` command starts it again, only ``init`` (:data:`STOPPED_FILE`)."""
    server = _server(catalog)
    with _locked(catalog.directory):
        (catalog.directory / STOPPED_FILE).touch()
        if _running(catalog):
            _pg_ctl(server, ["-w", "stop", "-m", "fast"])


def stopped_message(catalog: Catalog) -> str:
    """What every start on a catalog stopped by :func:`stop` says, in one line."""
    return (
        f"the shared catalog's server ({HOST}:{catalog.port}) was stopped by `changefeed "
        f"catalog stop`; start it with: {_init_command(catalog)}"
    )


def starting_message(catalog: Catalog) -> str:
    """What a start that finds the server down (after a reboot) says, in one line."""
    return (
        f"starting the server of the shared catalog ({HOST}:{catalog.port}), which was "
        f"stopped: {_init_command(catalog)}"
    )


def start_failed_message(catalog: Catalog) -> str:
    """What a start says when the server is down and does not start, in one line."""
    return (
        f"the server of the shared catalog ({HOST}:{catalog.port}) is stopped and did not "
        f"start; run {_init_command(catalog)} to see why"
    )


def _init_command(catalog: Catalog) -> str:
    return f"changefeed catalog init --dir {shlex.quote(str(catalog.directory))}"


def before_spark(catalog: Catalog, announce: Callable[[str], None]) -> None:
    """In a process that runs changefeed's code before its Spark driver starts (dbt,
    through the :mod:`dbt_changefeed` plugin), do at once what the catalog's
    ``spark-env.sh`` (:func:`launcher_script`) does only when that driver launches: on a
    catalog stopped by :func:`stop`, CatalogError with :func:`stopped_message`; on a
    server that is down (after a reboot), start it, passing :func:`starting_message` to
    ``announce`` first, and CatalogError with :func:`start_failed_message` if it does not
    start. A running server costs one TCP connect. Failing here, before Spark, is what
    keeps such a failure to one line: past the launch, dbt reports Spark's error."""
    if (catalog.directory / STOPPED_FILE).exists():
        raise CatalogError(stopped_message(catalog))
    if _listening(catalog):
        return
    announce(starting_message(catalog))
    try:
        ensure_running(catalog)
    except Exception as exc:  # whatever the cause, `init` (named in the message) shows it
        if isinstance(exc, CatalogError) and (catalog.directory / STOPPED_FILE).exists():
            raise  # stopped by `changefeed catalog stop` meanwhile: its own message
        raise CatalogError(start_failed_message(catalog)) from exc


def _listening(catalog: Catalog) -> bool:
    try:
        with socket.create_connection((HOST, catalog.port), timeout=2):
            return True
    except OSError:
        return False


def schema_ready(catalog: Catalog) -> bool:
    """Whether the metastore's tables exist (created by the first Spark on the catalog)."""
    with _connect(catalog) as conn:
        return metastore.schema_created(conn, _SCHEMA_CREATED)


@contextlib.contextmanager
def schema_lock(catalog: Catalog) -> Iterator[None]:
    """Held while one process creates the metastore schema, so that two first Spark
    sessions never create the same tables at once (PostgreSQL fails the second)."""
    with _connect(catalog) as conn, metastore.schema_lock(conn):
        yield


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    # Two commands starting at once must not both start the server.
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _server(catalog: Catalog) -> Any:
    """What pgserver needs to initialise and run the data directory, without starting
    it: pgserver's own start listens on a Unix socket only, and JDBC needs TCP."""
    try:
        import_pgserver()
        from pgserver.postgres_server import PostgresServer
        from pgserver.utils import ensure_user_exists
    except ImportError:
        raise CatalogError(
            "the shared catalog's embedded PostgreSQL needs pgserver: pip install "
            "'changefeed[spark]' (or pgserver)"
        ) from None
    pgdata = catalog.pgdata.resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    # PostgreSQL refuses to run as root; pgserver then runs it as its own user.
    system_user = "pgserver" if os.geteuid() == 0 else None
    if system_user:
        ensure_user_exists(system_user)
    server: Any = SimpleNamespace(
        pgdata=pgdata, system_user=system_user, postgres_user="postgres", log=pgdata / "log"
    )
    # initdb once (with trust authentication), and the permissions a non-root user needs.
    PostgresServer.ensure_pgdata_inited(server)
    return server


def _running(catalog: Catalog) -> bool:
    import_pgserver()
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(catalog.pgdata.resolve())
    return info is not None and info.is_running()


def _start_server(catalog: Catalog) -> None:
    server = _server(catalog)
    if _running(catalog):
        return
    # TCP on the loopback only: PostgreSQL's JDBC driver has no Unix sockets.
    options = f"-h {HOST} -p {catalog.port} -k ''"
    try:
        _pg_ctl(server, ["-w", "-t", "60", "-o", options, "-l", str(server.log), "start"])
    except subprocess.CalledProcessError:
        log = server.log.read_text()[-2000:] if server.log.exists() else ""
        raise CatalogError(
            f"the shared catalog's PostgreSQL in {catalog.pgdata} did not start on "
            f"{HOST}:{catalog.port} (is the port taken? then delete {catalog.directory} "
            f"and run `changefeed catalog init` again); its log ends:\n{log}"
        ) from None


def _pg_ctl(server: Any, args: list[str]) -> None:
    import_pgserver()
    from pgserver._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(server.pgdata), *args],
        check=True,
        user=server.system_user,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _create_database(catalog: Catalog) -> None:
    with _connect(catalog, "postgres") as conn:
        metastore.create_database(conn, METASTORE_DB)


def connect_metastore(catalog: Catalog) -> Any:
    """An autocommit connection to the catalog's metastore database (its server started
    first if it is stopped), for reading it without Spark
    (:mod:`changefeed.local.catalog_tables`)."""
    ensure_running(catalog)
    return _connect(catalog)


def _connect(catalog: Catalog, dbname: str = METASTORE_DB):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(
        host=HOST, port=catalog.port, user="postgres", dbname=dbname, autocommit=True
    )


def _free_port() -> int:
    import_pgserver()
    from pgserver.utils import find_suitable_port

    return int(find_suitable_port(HOST))
