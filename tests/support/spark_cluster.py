"""A Spark standalone cluster for the tests: a master and two workers started from
PySpark's own jars (``spark-class``), each in its own JVM and work directory, so that
executors run in processes of their own, as on a real cluster. The executors' Python
workers run this interpreter (``PYSPARK_PYTHON``), where changefeed is installed, unless
the nodes' environment names another.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.spark_jvm import JVM_OPTIONS

#: How long a master or a worker may take to come up on a busy 2-core machine.
START_SECONDS = 120
#: What every application on the cluster gives its executors: memory within a worker's
#: 1 GiB, and the JVM options of the tests' short-lived JVMs (C1 only, the serial
#: collector: tests/support/spark_jvm.py), which the master and workers run with too.
EXECUTOR_CONF = {
    "spark.executor.memory": "768m",
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_listening(name: str, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until ``process`` (a server, its output in ``log``) listens on ``port``;
    RuntimeError naming the log if it exits or never does."""
    _wait_until(name, process, log, lambda: listening(port))


def conf_args(conf: Mapping[str, str]) -> list[str]:
    """``spark-submit``'s ``--conf key=value`` arguments for ``conf``."""
    return [word for key, value in conf.items() for word in ("--conf", f"{key}={value}")]


def _wait_until(name: str, process: subprocess.Popen[bytes], log: Path,
                ready: Callable[[], bool]) -> None:  # fmt: skip
    """Until ``ready()``; RuntimeError naming ``process``'s log if it exits first or
    :data:`START_SECONDS` pass."""
    deadline = time.monotonic() + START_SECONDS
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the {name} did not start ({log}): {tail}")
        time.sleep(0.5)


def _environment() -> dict[str, str]:
    import pyspark

    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent),
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS}  # fmt: skip
    env.pop("SPARK_CONF_DIR", None)  # not a developer's shared catalog
    return env


def _start(name: str, args: list[str], workdir: Path,
           env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:  # fmt: skip
    """``spark-class <args>`` in a process group of its own, its output in a log."""
    env = env or _environment()
    log = workdir / f"{name}.log"
    command = [str(Path(env["SPARK_HOME"]) / "bin" / "spark-class"), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=workdir, start_new_session=True)  # fmt: skip
    return process, log


def _wait(name: str, process: subprocess.Popen[bytes], log: Path, ready: str) -> None:
    """Until the log shows ``ready``; RuntimeError naming the log if it never does."""
    _wait_until(f"Spark {name}", process, log, lambda: ready in log.read_text(errors="replace"))


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop a daemon started in a process group of its own, its JVM included."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


@dataclass(frozen=True)
class Cluster:
    """A running standalone cluster: its master's ``spark://`` URL and web UI."""

    url: str
    ui: str

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON): workers, cores used, applications."""
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as response:
            return dict(json.load(response))


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 2,
                       node_env: Mapping[str, str] | None = None) -> Iterator[Cluster]:  # fmt: skip
    """A running master with ``workers`` workers of one core and 1 GiB each until the block
    ends, the workers started at once; each worker (so its executors) has a temp directory
    of its own, not the driver's, and ``node_env`` in its environment (what a node's own
    set-up gives it, such as an object store's keys). Raises RuntimeError naming the log of
    the daemon that did not start."""
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    with ExitStack() as stack:
        master = _start("master", ["org.apache.spark.deploy.master.Master", "--host",
                                   "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                        workdir)  # fmt: skip
        stack.callback(stop_group, master[0])
        _wait("master", *master, "I have been elected leader")
        started = []
        for i in range(workers):
            work = workdir / f"worker-{i}"
            (work / "tmp").mkdir(parents=True, exist_ok=True)
            env = {**_environment(), **(node_env or {}), "TMPDIR": str(work / "tmp"),
                   "SPARK_LOCAL_DIRS": str(work / "tmp")}  # fmt: skip
            worker = _start(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url,
                                            "--cores", "1", "--memory", "1g", "--work-dir",
                                            str(work), "--webui-port", str(free_port())],
                            workdir, env)  # fmt: skip
            stack.callback(stop_group, worker[0])
            started.append((f"worker-{i}", *worker))
        for name, process, log in started:
            _wait(name, process, log, "Successfully registered with master")
        yield Cluster(url, f"http://127.0.0.1:{ui}")
