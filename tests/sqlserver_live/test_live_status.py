"""``changefeed status`` on a real SQL Server: the pending writes with the age of the
oldest (from ``safe_point``, by the server's clock) and the outbox backlog, in the JSON and
Prometheus output under PostgreSQL's names; the reader role sees the age but not the
backlog (it may not read the outbox). The feeds are render-matrix cases."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.sqlserver_live import LiveFeed, Server, member_of

from changefeed.cli import main
from changefeed.dialects.sqlserver import client as mssql_client


def status(capsys: Any, uri: str, feed: LiveFeed, *extra: str) -> str:
    code = main(["status", "--connection", uri, "--feed", feed.spec["feed_id"], *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return str(out)


def test_status_shows_a_pending_write_and_its_age(
    fresh: Any, mssql: Server, conn: Any, capsys: Any
) -> None:
    feed: LiveFeed = fresh("blocking_int")
    feed.write(conn, 0, [[1]])
    shard = json.loads(status(capsys, mssql.uri, feed, "--json"))["shards"][0]
    assert (shard["pending"], shard["oldest_pending_age_s"]) == (0, 0.0)
    with mssql.connection() as writer:
        feed.lock(writer, 0)
        try:
            time.sleep(0.5)
            shard = json.loads(status(capsys, mssql.uri, feed, "--json"))["shards"][0]
            assert shard["pending"] == 1 and 0.4 < shard["oldest_pending_age_s"] < 60
            out = status(capsys, mssql.uri, feed, "--format", "prometheus")
            assert 'changefeed_pending_writes{feed="shop.orders",shard="0"} 1\n' in out
            labels = '{feed="shop.orders",shard="0"}'
            assert f"changefeed_oldest_pending_write_age_seconds{labels} " in out
            assert "1 (oldest " in status(capsys, mssql.uri, feed)
            # the reader role may call safe_point, so it sees the age too
            info = feed.client.info(conn)
            with member_of(mssql, conn, feed.role("reader"), "cf_status_reader") as c:
                assert mssql_client.oldest_pending_age(c, info, 0) > 0.4
        finally:
            feed.client.release(writer)


def test_status_shows_the_outbox_backlog(fresh: Any, mssql: Server, conn: Any, capsys: Any) -> None:
    feed: LiveFeed = fresh("outbox_int")
    feed.outbox_insert(conn, 0, [[1], [2], [3]])
    shard = json.loads(status(capsys, mssql.uri, feed, "--json"))["shards"][0]
    assert shard["outbox"] == 3
    out = status(capsys, mssql.uri, feed, "--format", "prometheus")
    assert 'changefeed_outbox_rows{feed="shop.orders",shard="0"} 3\n' in out
    info = feed.client.info(conn)
    with member_of(mssql, conn, feed.role("reader"), "cf_status_outbox_reader") as c:
        assert mssql_client.outbox_rows(c, info, 0) is None  # error 229
    assert [e.key[0] for e in feed.read_all(conn, 0)] == [1, 2, 3]
    shard = json.loads(status(capsys, mssql.uri, feed, "--json"))["shards"][0]
    assert shard["outbox"] == 0
