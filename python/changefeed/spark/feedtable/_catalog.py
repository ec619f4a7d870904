"""Whether a table exists, as a catalog that may fail to answer says it.

``spark.catalog.tableExists`` answers False on any analysis error, and Hive's metastore
reports a database it failed to read as a database that does not exist (its ObjectStore
turns the store's error into "no such object"): a metastore that cannot be reached for a
moment makes an existing feed table look missing. The callers decide on that answer
whether to create a table and whether to delete the location of a table that is not in
the catalog (protocol 11.5), so a wrong "missing" could delete a live table's files.
:func:`table_exists` believes a "missing" only once the catalog has listed the table's
namespace without it (or its catalog without the namespace): a listing that fails raises.
"""

from __future__ import annotations

import re
from typing import Any

from changefeed.errors import ChangefeedError

#: Spark's conditions for a namespace that is not there (Spark 4, and 3.x's name).
_NO_NAMESPACE = ("SCHEMA_NOT_FOUND", "NO_SUCH_NAMESPACE")
#: A name that is the same as a ``show tables ... like`` pattern (which Spark matches as a
#: case-insensitive regular expression, ``*`` for any characters and ``|`` between
#: alternatives).
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


class CatalogUnavailable(ChangefeedError, RuntimeError):
    """The catalog could not say whether a table exists: it reported the table missing
    and then failed to list the table's namespace, or listed a table that Spark cannot
    read. Nothing was created or deleted; the message has the catalog's own error."""


def split_name(name: str) -> list[str]:
    """The parts of a dotted table name, each unquoted (backticks, with doubled backticks
    for one): ``"`c`.db.t"`` -> ``["c", "db", "t"]``.

    >>> split_name("`spark_catalog`.`a``b`.t")
    ['spark_catalog', 'a`b', 't']
    """
    parts: list[str] = []
    current, quoted, i = "", False, 0
    while i < len(name):
        char = name[i]
        if char == "`":
            if quoted and name[i + 1 : i + 2] == "`":
                current, i = current + "`", i + 2
                continue
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
        i += 1
    if quoted or not current or any(not p for p in parts):
        raise ValueError(f"not a table name: {name!r}")
    return [*parts, current]


def quote(part: str) -> str:
    """One identifier in backticks, a backtick in it doubled."""
    return "`" + part.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """``text`` for a single-quoted Spark SQL literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def table_exists(spark: Any, name: str) -> bool:
    """Whether the table (or view) ``name`` (``[catalog.]schema.table`` or ``table``,
    parts optionally in backticks) exists in ``spark``'s catalogs.

    True when Spark finds it, or when Spark did not but the listing of its namespace
    shows it and Spark then finds it (the first answer was a metastore that failed to
    answer). False only when the catalog has listed the table's namespace without it, or
    its catalog without that namespace. A namespace that the listing of its tables says
    is missing and the listing of its catalog then shows (created meanwhile, as by a
    concurrent first write into a new schema, or a metastore that failed to answer) has
    its tables listed once more, and that listing decides. Raises
    :class:`CatalogUnavailable` when a listing fails, the namespace is missing again for
    that second listing, or a listed table is one Spark still cannot read, and
    ``ValueError`` for a malformed name.
    """
    parts = split_name(name)
    namespace, table = parts[:-1], parts[-1]
    try:
        # Spark's tableExists also raises, where the metastore's error is not one it maps
        # to "missing" (Hive's "Unable to fetch table")
        if spark.catalog.tableExists(".".join(quote(p) for p in parts)):
            return True
        return _listed(spark, namespace, table)
    except CatalogUnavailable:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CatalogUnavailable(
            f"the catalog cannot say whether {name} exists: it failed to answer or to list "
            f"the schema ({first}); nothing was created or deleted: check that the "
            "metastore is reachable and run again",
            cause=exc,
        ) from exc


def _listed(spark: Any, namespace: list[str], table: str, again: bool = True) -> bool:
    """Whether listing ``namespace`` shows ``table`` (then Spark is asked for it once
    more); False for a namespace the listing of its catalog does not show either; a
    namespace that it shows is listed ``again``, once."""
    from pyspark.errors import AnalysisException

    qualified = ".".join(quote(p) for p in namespace)
    listing = f"show tables in {qualified}" if namespace else "show tables"
    if _PLAIN.fullmatch(table):  # a pattern is a regex to Spark: only a plain name is itself
        listing += f" like '{table}'"
    try:
        rows = spark.sql(listing).collect()
    except Exception as exc:
        if not _no_namespace(exc):
            raise
        if not _namespace_listed(spark, namespace, exc, again):
            return False
        return _listed(spark, namespace, table, again=False)
    names = {str(row["tableName"]).lower() for row in rows if not row["isTemporary"]}
    if table.lower() not in names:
        return False
    full = f"{qualified}.{quote(table)}" if namespace else quote(table)
    try:
        spark.catalog.getTable(full)
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0]
        raise CatalogUnavailable(
            f"the catalog lists the table {full} in its schema, but Spark cannot read it "
            f"({first}); nothing was created or deleted",
            cause=exc,
        ) from exc
    return True  # the first answer was the metastore's failure to answer


def _no_namespace(exc: Exception) -> bool:
    """Whether ``exc`` says that the namespace does not exist: Spark's condition, or the
    catalog's own exception (Iceberg's Hadoop catalog raises it through Py4J as it is)."""
    from pyspark.errors import AnalysisException

    if isinstance(exc, AnalysisException):
        return exc.getCondition() in _NO_NAMESPACE
    return "NoSuchNamespaceException" in str(exc)


def _namespace_listed(spark: Any, namespace: list[str], missing: Exception, again: bool) -> bool:
    """Whether the catalog's listing shows ``namespace``, which a listing of its tables
    just said is missing; raises when it does and ``again`` is false (a second time)."""
    catalog, schema = (namespace[0], namespace[1:]) if len(namespace) > 1 else (None, namespace)
    where = f" in {quote(catalog)}" if catalog else ""
    try:
        rows = spark.sql(f"show namespaces{where}").collect()
    except Exception as exc:
        if _no_namespace(exc):  # Iceberg's Hadoop catalog before its warehouse exists
            return False
        raise
    wanted = ".".join(schema).lower()
    if wanted not in (str(row[0]).lower() for row in rows):
        return False
    if again:
        return True
    raise CatalogUnavailable(
        f"the catalog reported the schema {'.'.join(namespace)} missing twice and listed it "
        "in between: its metastore is failing to answer; nothing was created or deleted: "
        "run again",
        cause=missing,
    )
