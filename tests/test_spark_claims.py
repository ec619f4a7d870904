"""One run of a model at a time (docs/spark.md, "One run of a model at a time"): two dbt
processes on one shared catalog start the same state model at once; one is refused in one
line while the other holds the model, nothing is written twice, and the holder SIGKILLed
does not block the next run. A failed run releases its claim (the package's on-run-end
hook); a holder that cannot be checked from here (another host) blocks until
``changefeed_claim_timeout_minutes`` or until ``changefeed.release_claim``.

Each dbt process is a resident driver (one JVM, one dbt parse) that runs the commands the
test sends it; the claims are read from the metastore's own PostgreSQL, not through the
macros under test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.support import spark_source as kit
from tests.support.dbt_harness import package_project
from tests.support.doc_blocks import sample
from tests.support.shared_catalog import (
    CLI,
    init_catalog,
    landed_consumer,
    landed_source,
    process_env,
    write_profile,
)

#: slow: two Spark drivers and the catalog's server, 2 to 4 minutes on 2 cores.
pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

SCHEMA = "cf_claims"
LANDED = f"{SCHEMA}.landed_orders"
#: The pause is long enough that the test, not the pause, ends the first run.
PAUSE_MS = 600_000
STATE = ("--select", "orders_state")
MODELS = {
    "sources.yml": landed_source(SCHEMA),
    "orders_state.sql": """{{ config(materialized='changefeed_current_state', file_format='parquet',
    unique_key='id', pre_hook="{{ claim_test_hook() }}") }}
select e.shard_id, e.ulid, e.id, e.payload.v as v, e.changefeed_feed_batch
from {{ changefeed.feed_events(source('landed', 'landed_orders'), this) }} as e
""",
    # A plain consumer: claimed by feed_batch and feed_cursor, released by on-run-end only.
    "orders_consumer.sql": landed_consumer("landed_orders"),
}

#: The model's pre-hook: a run pauses (var pause_ms) or fails (var fail) after it has
#: claimed the model.
HOOK = """{% macro claim_test_hook() %}
  {#-- run_query, which collects: dbt-spark's session cursor leaves a hook's result unread --#}
  {%- if execute and var('fail', false) -%}
    {%- set held = run_query("show views in spark_catalog.changefeed_claims like '"
        ~ this.schema ~ "__orders_state__t*'").rows | length -%}
    {%- do run_query("select raise_error('planned failure, claims held: " ~ held ~ "')") -%}
  {%- elif execute -%}
    {%- do run_query("select reflect('java.lang.Thread', 'sleep', cast("
        ~ var('pause_ms', 0) ~ " as bigint))") -%}
  {%- endif -%}
  select 1
{% endmacro %}
"""

#: A resident driver: one JSON command per stdin line, one JSON answer per stdout line.
DRIVER = """
import json, os, sys
out = os.fdopen(os.dup(1), "w")  # answers; everything else printed goes to stderr
os.dup2(2, 1)
from pathlib import Path
from dbt.cli.main import dbtRunner
from pyspark.sql import SparkSession

work, project = Path(sys.argv[1]), sys.argv[2]
common = ["--project-dir", project, "--profiles-dir", str(work), "--log-path",
          str(work / "logs"), "--no-version-check"]
spark = SparkSession.builder.getOrCreate()
for line in sys.stdin:
    command = json.loads(line)
    if "dbt" in command:
        result = dbtRunner().invoke([*command["dbt"], *common])
        errors = [r.message for r in (result.result or []) if getattr(r, "status", "") == "error"]
        answer = {"ok": result.success, "errors": errors,
                  "exception": str(result.exception) if result.exception else None}
    elif "land" in command:
        from changefeed.spark.landing import land
        answer = {"ok": True, "events": land(spark, command["land"], command["table"]).events}
    else:
        answer = {"ok": True, "rows": [list(r) for r in spark.sql(command["sql"]).collect()]}
    out.write(json.dumps(answer, default=str) + "\\n")
    out.flush()
"""


class Driver:
    def __init__(self, name: str, work: Path, project: Path, env: dict[str, str]) -> None:
        self.log = work / f"{name}.log"
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", DRIVER, str(work), str(project)], env=env, cwd=work,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                start_new_session=True,
            )  # fmt: skip

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            pytest.fail(f"the driver ended: {self.log.read_text()[-3000:]}")
        return json.loads(line)

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        self.send(command)
        return self.answer()

    def dbt(self, *args: str) -> dict[str, Any]:
        return self.ask({"dbt": list(args)})

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _claims(catalog_uri: str) -> dict[str, str]:
    """The claim views of the metastore: name -> query text, from its PostgreSQL."""
    with psycopg.connect(catalog_uri) as conn:
        rows = conn.execute(
            'select t."TBL_NAME", t."VIEW_ORIGINAL_TEXT" from "TBLS" t join "DBS" d '
            'on d."DB_ID" = t."DB_ID" where d."NAME" = \'changefeed_claims\''
        ).fetchall()
    return {name: text for name, text in rows}


def _tickets(names: Any, model: str = "orders_state") -> list[str]:
    """The runs whose claim views (tickets or choosing) of the model are in ``names``."""
    stem = f"{SCHEMA}__{model}__"
    return sorted(n.removeprefix(stem) for n in names if n.startswith(stem))


def _foreign_claim(model: str = "orders_state") -> str:
    """A claim of the model as a run on another host (which this one cannot check) would
    have written it just now: ticket 1."""
    return (
        f"create view spark_catalog.changefeed_claims.{SCHEMA}__{model}__t1_{'e' * 32} as"
        " select 'elsewhere-run' as invocation_id, 'elsewhere/10.0.0.9' as host,"
        f" cast(4242 as bigint) as pid, cast({int(time.time())} as bigint) as claimed_at,"
        f" 'session' as method, 'model.cf_claims.{model}' as model"
    )


def _holder_blanked(line: str) -> str:
    """The refusal without what differs from run to run (the holder's process, host,
    invocation and time)."""
    return re.sub(r"process \d+ on [^,]+, invocation [^,]+, since [^)]+ UTC",
                  "process P on H, invocation I, since T UTC", line)  # fmt: skip


def _first_answer(drivers: list[Driver], timeout: float) -> tuple[Driver, dict[str, Any]]:
    """The first of ``drivers`` to answer, and its answer."""
    import select

    streams = {d.proc.stdout: d for d in drivers}
    ready, _, _ = select.select(list(streams), [], [], timeout)
    assert ready, f"no run ended within {timeout} s"
    driver = streams[ready[0]]
    return driver, driver.answer()


def _parent(pid: int) -> int:
    """A process's parent, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _readable(stream: Any) -> bool:
    """Whether the driver has answered (its run ended)."""
    import select

    return bool(select.select([stream], [], [], 0)[0])


@pytest.mark.timeout(1200)
def test_a_second_run_of_a_model_is_refused_and_a_dead_holder_blocks_nothing(
    pg_uri: str, dbt: Any, tmp_path: Path
) -> None:
    env = process_env()
    env["PYSPARK_PYTHON"] = sys.executable  # the driver's land() runs Python workers
    conf_dir = init_catalog(sample("shared-catalog-init"), env, tmp_path)
    from changefeed.local import catalog

    shared = catalog.load(conf_dir.parent)
    catalog_uri = f"postgresql://postgres@127.0.0.1:{shared.port}/{catalog.METASTORE_DB}"

    feed = kit.create_feed(dbt, pg_uri, "blocking", "id bigint primary key, v text")
    kit.write_many_blocking(pg_uri, feed, 0, 1, 200, 50)
    project = package_project(tmp_path / "project", "cf_claims", MODELS)
    (project / "macros").mkdir()
    (project / "macros" / "claim_test_hook.sql").write_text(HOOK)
    write_profile(sample("shared-catalog-profiles"), tmp_path, SCHEMA)
    env["CHANGEFEED_DBT_PACKAGES_DIR"] = str(tmp_path / "dbt_packages")
    first = Driver("first", tmp_path, project, env)
    second = Driver("second", tmp_path, project, env)
    try:
        source = {"connection": pg_uri, "feed": feed, "payload": "true"}
        assert first.ask({"land": source, "table": LANDED})["events"] == 200
        assert first.dbt("deps")["ok"]
        assert second.dbt("ls", *STATE)["ok"]  # both drivers warm: a parse behind them
        # 1. Two runs of the model started at once, each to pause in its pre-hook once it
        # holds the model: one is refused, in one line naming the other, which holds it.
        pause = json.dumps({"pause_ms": PAUSE_MS})
        for driver in (first, second):
            driver.send({"dbt": ["run", *STATE, "--vars", pause]})
        started = time.monotonic()
        loser, refused = _first_answer([first, second], 300)
        waited = time.monotonic() - started
        holder = second if loser is first else first
        (claim,) = [text for name, text in _claims(catalog_uri).items()
                    if name.startswith(f"{SCHEMA}__orders_state__t")]  # fmt: skip
        holder_pid = int(claim.split(" as bigint) as pid")[0].rsplit("cast(", 1)[1])
        assert _parent(holder_pid) == holder.proc.pid, "the claim is the paused run's JVM's"
        assert not refused["ok"], refused
        (message,) = refused["errors"]
        lines = [line for line in message.splitlines() if line.strip().startswith("changefeed:")]
        assert len(lines) == 1, message
        refusal = lines[0].strip()
        assert refusal.startswith(
            "changefeed: model 'orders_state' is being run by another dbt run "
            f"(process {holder_pid} "
        ), message
        assert _holder_blanked(refusal) == _holder_blanked(sample("spark-claim-refused").strip())
        time.sleep(1)
        assert holder.proc.poll() is None and holder.proc.stdout is not None
        assert not _readable(holder.proc.stdout), "the holder's run is still paused"
        first, second = holder, loser

        # 3. The holder is SIGKILLed mid-run; the next run goes ahead at once.
        first.kill()  # no wait: the killed JVM may still be listed (until it is reaped)
        started = time.monotonic()
        assert second.dbt("run", *STATE)["ok"], second.log.read_text()[-3000:]
        assert time.monotonic() - started < 300
        state = second.ask({"sql": f"select id, v from {SCHEMA}.orders_state"})["rows"]
        assert sorted(state) == [[i, f"v{i}"] for i in range(1, 201)], "each key once"
        assert _tickets(_claims(catalog_uri)) == []  # released on success

        # 4. A run that fails after its claim releases it (on-run-end).
        failed = second.dbt("run", *STATE, "--vars", json.dumps({"fail": True}))
        assert not failed["ok"], failed
        assert "planned failure, claims held: 1" in " ".join(failed["errors"]), failed
        assert _tickets(_claims(catalog_uri)) == []

        # 5. A holder on another host: refused until the timeout or release_claim.
        second.ask({"sql": _foreign_claim()})
        refused = second.dbt("run", *STATE)
        assert not refused["ok"] and "(process 4242 on elsewhere/10.0.0.9" in refused["errors"][0]
        lapsed = second.dbt(
            "run", *STATE, "--vars", json.dumps({"changefeed_claim_timeout_minutes": 0})
        )
        assert lapsed["ok"], lapsed
        assert _tickets(_claims(catalog_uri)) == []  # the lapsed one dropped, ours released
        second.ask({"sql": _foreign_claim()})
        released = second.dbt(
            "run-operation", "changefeed.release_claim", "--args", "{model: orders_state}"
        )
        assert released["ok"], released
        assert second.dbt("run", *STATE)["ok"]

        # 6. A plain consumer: refused while another host holds it; its own runs' claims
        # are released by on-run-end; every event consumed once.
        second.ask({"sql": _foreign_claim("orders_consumer")})
        refused = second.dbt("run", "--select", "orders_consumer")
        assert not refused["ok"], refused
        assert "changefeed: model 'orders_consumer' is being run by" in refused["errors"][0]
        released = second.dbt(
            "run-operation", "changefeed.release_claim", "--args", "{model: orders_consumer}"
        )
        assert released["ok"], released
        for _ in range(2):
            assert second.dbt("run", "--select", "orders_consumer")["ok"]
        assert _tickets(_claims(catalog_uri), "orders_consumer") == []  # on-run-end dropped it
        consumed = second.ask({"sql": f"select id from {SCHEMA}.orders_consumer"})["rows"]
        assert sorted(consumed) == [[i] for i in range(1, 201)], "each event once"
        print({"refused after s": round(waited, 1)})
    finally:
        first.kill()
        second.kill()
        subprocess.run([*CLI, "catalog", "stop", "--dir", str(conf_dir.parent)], env=env,
                       cwd=tmp_path, capture_output=True, timeout=60)  # fmt: skip
