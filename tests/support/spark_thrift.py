"""The Spark Thrift server for the tests, started as docs/deploying.md says (its block
``deploying-thrift-server``) from PySpark's own ``spark-submit``, on a shared catalog and
a standalone cluster's master."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.spark_cluster import (
    EXECUTOR_CONF,
    conf_args,
    free_port,
    stop_group,
    wait_listening,
)

#: What the documented command names, which the test replaces with its own.
DOC_MASTER = "spark://master-host:7077"
DOC_PORT = "10000"


def documented_command(documented: str, master: str, port: int, cwd: Path) -> list[str]:
    """The block's ``spark-submit`` command (after its ``export`` line), with this test's
    master and port and PySpark's own ``spark-submit``."""
    import pyspark

    lines = documented.replace("\\\n", " ").strip().splitlines()
    (command,) = [line for line in lines if line.startswith("spark-submit ")]
    assert DOC_MASTER in command and f"port={DOC_PORT}" in command, command
    command = command.replace(DOC_MASTER, master).replace(f"port={DOC_PORT}", f"port={port}")
    words = shlex.split(command.replace("$PWD", str(cwd)))
    return [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), *words[1:]]


@contextmanager
def thrift_server(documented: str, master: str, env: dict[str, str],
                  workdir: Path) -> Iterator[int]:  # fmt: skip
    """The documented Thrift server, its driver on ``master``, listening on the port it
    yields until the block ends; RuntimeError naming its log when it does not start."""
    port = free_port()
    command = documented_command(documented, master, port, workdir)
    command[1:1] = conf_args(EXECUTOR_CONF)
    log = workdir / "thrift-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                  env={**env, "SPARK_LOCAL_IP": "127.0.0.1"}, cwd=workdir,
                                  start_new_session=True)  # fmt: skip
    try:
        wait_listening("Spark Thrift server", server, port, log)
        yield port
    finally:
        stop_group(server)
