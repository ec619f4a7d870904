"""The child side of :mod:`tests.support.faults.procs`: one connection, commands on stdin.

Run as ``python -m tests.support.faults.worker '<json config>'``. Every event is one JSON line on
stdout. A write reports each step it passed (``locked``, ``inserted``, ``committing``)
before it takes the next, so the parent knows exactly how far a child got when it
froze or killed it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import psycopg
from tests.support.faults import feedkit


def emit(ev: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"ev": ev, **data}) + "\n")
    sys.stdout.flush()


def next_command() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        os._exit(0)  # the parent is gone
    command: dict[str, Any] = json.loads(line)
    return command


def error_event(exc: BaseException) -> dict[str, Any]:
    sqlstate = getattr(exc, "sqlstate", None)
    return {"type": type(exc).__name__, "sqlstate": sqlstate, "message": str(exc)}


def main() -> None:
    config = json.loads(sys.argv[1])
    kit = feedkit.FeedKit.from_json(config["feed"])
    conn = psycopg.connect(config["uri"], autocommit=True)
    emit("ready", backend_pid=conn.info.backend_pid, pid=os.getpid())
    while True:
        cmd = next_command()
        op = cmd.pop("op")
        if op == "quit":
            conn.close()
            emit("bye")
            return
        try:
            if op == "write":
                run_write(kit, conn, cmd)
            elif op == "read":
                cursor = bytes.fromhex(cmd["cursor"])
                events = kit.read_page(conn, cmd["shard"], cursor, cmd["page_size"])
                emit("page", events=[[u.hex(), k] for u, k in events])
            elif op == "move":
                emit("moving")
                moved = kit.move_outbox(conn, cmd["shard"])
                emit("moved", moved=moved)
            elif op == "sql":
                rows = conn.execute(cmd["sql"], cmd.get("params")).fetchall()
                emit("rows", rows=[list(r) for r in rows])
            else:
                emit("error", type="ValueError", sqlstate=None, message=f"unknown op {op}")
        except Exception as exc:
            if conn.closed or conn.broken:
                emit("error", **error_event(exc), broken=True)
                conn = psycopg.connect(config["uri"], autocommit=True)
                emit("reconnected", backend_pid=conn.info.backend_pid)
            else:
                emit("error", **error_event(exc), broken=False, tb=traceback.format_exc())


def run_write(kit: feedkit.FeedKit, conn: psycopg.Connection[Any], cmd: dict[str, Any]) -> None:
    """One write; ``hold`` names the step after which it waits for a ``go`` command."""
    hold = cmd.get("hold")

    def step(name: str, **data: Any) -> None:
        emit(name, **data)
        if hold == name:
            go = next_command()  # end of input exits the process here
            if go.get("op") != "go":
                raise RuntimeError(f"expected go after {name}, got {go}")

    keys = [k if not isinstance(k, list) else tuple(k) for k in cmd["keys"]]
    kit.write(
        conn,
        cmd["shard"],
        keys,
        time_hint_ms=cmd.get("time_hint_ms"),
        step=step,
    )
    emit("ok")


if __name__ == "__main__":
    main()
