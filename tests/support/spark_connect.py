"""A Spark Connect server for the tests, started from PySpark's own jars (its
``spark-connect`` jar and ``spark-submit``), with Delta and Iceberg as a local session has
them, and a client session on it. The server's Python workers run this interpreter, so
they import changefeed as the tests do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.spark_cluster import (
    EXECUTOR_CONF,
    conf_args,
    free_port,
    stop_group,
    wait_listening,
)


@contextmanager
def connect_server(workdir: Path, master: str = "local[2]",
                   python: str = sys.executable) -> Iterator[str]:  # fmt: skip
    """A running Connect server (its ``sc://`` address) until the block ends, its driver on
    ``master`` (a ``spark://`` master: executors of one core on the cluster's workers);
    raises RuntimeError naming its log when it does not start."""
    import pyspark

    from changefeed.local import jars

    home = Path(pyspark.__file__).parent
    warehouse = workdir / "warehouse"
    conf = {
        "spark.master": master,
        "spark.executor.cores": "1",
        **EXECUTOR_CONF,
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.sql.warehouse.dir": str(warehouse),
        **jars.lakehouse_conf(jars.lakehouse_jars(), warehouse),
    }
    port = free_port()
    conf["spark.connect.grpc.binding.port"] = str(port)
    command = [str(home / "bin" / "spark-submit"),
               "--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]  # fmt: skip
    command += [*conf_args(conf), "spark-internal"]
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": python,
           "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    env.pop("SPARK_CONF_DIR", None)  # not a developer's shared catalog
    log = workdir / "connect-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  cwd=workdir, start_new_session=True)  # fmt: skip
    try:
        wait_listening("Spark Connect server", server, port, log)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop_group(server)


@contextmanager
def remote_session(address: str) -> Iterator[Any]:
    """A Spark Connect session on ``address`` while the block runs. PySpark's functions
    build Connect columns while ``SPARK_CONNECT_MODE_ENABLED`` is set, and classic ones
    otherwise: it is set only meanwhile, so that the classic session this test process
    also holds (other tests') works before and after. (``SparkSession.builder.remote``
    refuses while a classic session exists; the Connect builder is asked directly.)"""
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    before = os.environ.get(_MODE)
    os.environ[_MODE] = "1"
    try:
        session = RemoteSession.builder.remote(address).getOrCreate()
        try:
            yield session
        finally:
            session.stop()
    finally:
        if before is None:
            os.environ.pop(_MODE, None)
        else:
            os.environ[_MODE] = before


_MODE = "SPARK_CONNECT_MODE_ENABLED"
