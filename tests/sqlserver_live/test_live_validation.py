"""Input validation and trusted writers on a real SQL Server (issue 14, item 2;
docs/sqlserver.md "Error numbers"): ULID arguments that are NULL or not 16 bytes are
refused with 51065, and a blocking writer's rows must lie in its own shard and block
(the guard trigger, 51066; 51010 without a write). Never run yet (no server here)."""

from __future__ import annotations

from typing import Any

from tests.support.sqlserver_live import LiveFeed, expect_error, lit, run


def test_ulid_arguments_must_be_16_bytes(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    for value in ("null", "0x" + "00" * 15, "0x" + "00" * 17):
        expect_error(conn, f"exec {feed.obj('read_feed')} @shard_id = 0, @cursor = {value};",
                     number=51065, text="a ULID of 16 bytes")  # fmt: skip
        missing = 51045 if value == "null" else 51065  # barrier_check's own NULL check first
        expect_error(conn, f"exec {feed.obj('barrier_check')} @shard_id = 0, "
                           f"@position = {value};", number=missing)  # fmt: skip
        expect_error(conn, f"exec {feed.obj('save_cursor')} @consumer = N'c', @shard_id = 0, "
                           f"@cursor = {value};", number=51065)  # fmt: skip
    # the default still reads from the beginning
    assert run(conn, f"exec {feed.obj('read_feed')} @shard_id = 0;") == []


def test_a_writer_cannot_insert_outside_its_shard_and_block(fresh: Any, conn: Any) -> None:
    feed: LiveFeed = fresh("blocking_int")
    row = ", ".join(lit(v) for v in [1])
    # no write in progress on this connection
    expect_error(conn, f"insert into {feed.obj('feed')} (shard_id, ulid, {feed.keys_sql}) "
                       f"values (0, 0x{'01' * 16}, {row});", number=51010)  # fmt: skip
    w = feed.lock(conn, 0)
    run(conn, "begin transaction;")
    try:
        # another shard, and a ULID made up below the block
        for shard, ulid in ((1, w.first_ulid), (0, bytes(16))):
            expect_error(conn, f"insert into {feed.obj('feed')} (shard_id, ulid, "
                               f"{feed.keys_sql}) values ({shard}, 0x{ulid.hex()}, {row});",
                         number=51066, text="is outside this write's shard")  # fmt: skip
            run(conn, "if @@trancount = 0 begin transaction;")
        run(conn, feed.insert_events_sql(0, [[2]]))
        run(conn, feed.publish_sql())
    finally:
        run(conn, "if @@trancount > 0 rollback;")
        feed.client.release(conn)
    assert [e.key[0] for e in feed.read_all(conn, 0)] == [2]
