"""The adapter-neutral feed macros: option validation, relation parsing, long names.

Rendered by real dbt (tests/support/dbt_harness.py) under the postgres target; none of these macros
touches the database, so they behave the same on every adapter.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from tests.support.dbt_harness import DbtError

pytestmark = pytest.mark.postgres


def _options(dbt: Any, raw: str) -> str:
    return str(dbt.render("{{ changefeed._feed_options(" + raw + ") }}", "postgres"))


def test_options_fill_defaults_and_normalise_a_single_key(dbt: Any) -> None:
    rendered = _options(dbt, "{'mode': 'outbox', 'key': 'order_id'}")
    assert rendered == (
        "{'mode': 'outbox', 'key': ['order_id'], 'stall_timeout_ms': 5000, 'lock_probe_ms': 20,"
        " 'capture': 'none', 'shard': None, 'row_image': False, 'stated': ['key', 'mode']}"
    )


def test_options_keep_explicit_values(dbt: Any) -> None:
    rendered = _options(
        dbt,
        "{'mode': 'blocking', 'key': ['a', 'b'], 'stall_timeout_ms': 800, 'lock_probe_ms': 10}",
    )
    assert rendered == (
        "{'mode': 'blocking', 'key': ['a', 'b'], 'stall_timeout_ms': 800, 'lock_probe_ms': 10,"
        " 'capture': 'none', 'shard': None, 'row_image': False,"
        " 'stated': ['key', 'lock_probe_ms', 'mode', 'stall_timeout_ms']}"
    )


def test_row_image_option_defaults_to_false(dbt: Any) -> None:
    rendered = dbt.render_many(
        [
            "{{ tojson(changefeed._feed_options({'mode': 'outbox'}).row_image) }}",
            "{{ tojson(changefeed._feed_options({'mode': 'blocking', 'row_image': true})"
            ".row_image) }}",
        ],
        "postgres",
    )
    assert [json.loads(r) for r in rendered] == [False, True]


@pytest.mark.parametrize(
    ("raw", "capture", "shard"),
    [
        ("{'mode': 'outbox', 'capture': 'trigger'}", "trigger", "0"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': 3}", "trigger", "3"),
        (
            "{'mode': 'outbox', 'capture': 'trigger', 'shard': ' customer_id % 8 '}",
            "trigger",
            "customer_id % 8",
        ),
        (
            "{'mode': 'outbox', 'capture': 'trigger', 'shard': 'f(\"a(\", \\'b)\\')'}",
            "trigger",
            "f(\"a(\", 'b)')",
        ),
        ("{'mode': 'outbox', 'capture': 'none'}", "none", None),
        ("{'mode': 'blocking', 'capture': 'none'}", "none", None),
    ],
)
def test_capture_options(dbt: Any, raw: str, capture: str, shard: str | None) -> None:
    rendered = dbt.render(
        "{% set o = changefeed._feed_options(" + raw + ") %}{{ tojson([o.capture, o.shard]) }}",
        "postgres",
    )
    assert json.loads(rendered) == [capture, shard]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{'mode': 'fast'}", "mode must be one of blocking, outbox; got: fast"),
        ("{}", "mode must be one of blocking, outbox; got: None"),
        (
            "{'mode': 'outbox', 'shards': 4}",
            "unknown option 'shards'; accepted options: mode, key, stall_timeout_ms, lock_probe_ms",
        ),
        ("{'mode': 'outbox', 'key': []}", "key must be a column name or a non-empty list"),
        ("{'mode': 'outbox', 'key': ['a', 'a']}", "key lists a column twice: a, a"),
        ("{'mode': 'outbox', 'key': [1]}", "every key column must be a non-empty string; got: 1"),
        ("{'mode': 'outbox', 'stall_timeout_ms': 0}", "stall_timeout_ms must be a positive whole"),
        ("{'mode': 'outbox', 'stall_timeout_ms': true}", "stall_timeout_ms must be a positive"),
        ("{'mode': 'outbox', 'lock_probe_ms': 1.5}", "lock_probe_ms must be a positive whole"),
        # an int in the generated code and in sp_getapplock's @LockTimeout
        ("{'mode': 'outbox', 'stall_timeout_ms': 2147483648}", "stall_timeout_ms .* below 2\\^31"),
        (
            "{'mode': 'outbox', 'stall_timeout_ms': 100, 'lock_probe_ms': 100}",
            r"lock_probe_ms \(100\) must be smaller than stall_timeout_ms \(100\)",
        ),
        ("'outbox'", "the feed options must be a mapping"),
        ("{'mode': 'outbox', 'capture': 'cdc'}", "capture must be one of none, trigger; got: cdc"),
        (
            "{'mode': 'outbox', 'row_image': 'true'}",
            "row_image must be one of true, false .*; got: true",
        ),
        ("{'mode': 'blocking', 'row_image': 1}", "row_image must be one of true, false .*; got: 1"),
        ("{'mode': 'blocking', 'capture': 'trigger'}", "capture: trigger needs mode: outbox"),
        (
            "{'mode': 'outbox', 'shard': 'a % 2'}",
            "shard is the shard expression of capture: trigger",
        ),
        (
            "{'mode': 'outbox', 'capture': 'trigger', 'shard': ' '}",
            "shard must be a SQL expression",
        ),
        (
            "{'mode': 'outbox', 'capture': 'trigger', 'shard': true}",
            "shard must be a SQL expression",
        ),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': '1;2'}", "may not contain ;"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': \"';'\"}", "may not contain ;"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': 'a /* b */'}", "may not contain /\\*"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': '0) --'}", "may not contain --"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': '$$x$$'}", "may not contain \\$"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': 'a)'}", "unbalanced parentheses"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': '(a'}", "unbalanced parentheses"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': '[a'}", "an unclosed quote"),
        ("{'mode': 'outbox', 'capture': 'trigger', 'shard': ') or (a'}", "unbalanced parentheses"),
    ],
)
def test_options_reject_bad_values_naming_them(dbt: Any, raw: str, message: str) -> None:
    with pytest.raises(DbtError, match=message):
        _options(dbt, raw)


def test_spec_needs_key_columns_and_a_block_size_the_protocol_allows(dbt: Any) -> None:
    relation = "api.Relation.create(database='d', schema='shop', identifier='orders')"
    options = "changefeed._feed_options({'mode': 'outbox'})"
    with pytest.raises(DbtError, match=r"the feed of .*orders.* has no key columns"):
        dbt.render("{{ changefeed._feed_spec(" + relation + ", " + options + ", []) }}", "postgres")
    for bits in ("7", "61", "true"):
        with pytest.raises(DbtError, match="block_bits must be a whole number in \\[8, 60\\]"):
            dbt.render("{{ changefeed._feed_check_block_bits(" + bits + ") }}", "postgres")
    assert dbt.render("{{ changefeed._feed_check_block_bits(36) }}", "postgres") == ""


def test_relation_accepts_strings_mappings_and_dotted_names(dbt: Any) -> None:
    rendered = dbt.render_many(
        [
            "{{ changefeed._feed_relation('shop.orders') }}",
            "{{ changefeed._feed_relation('otherdb.shop.orders') }}",
            "{{ changefeed._feed_relation({'schema': 'my.schema', 'table': 'or.ders'}) }}",
        ],
        "postgres",
    )
    assert rendered[0].endswith('"shop"."orders"')
    assert rendered[1] == '"otherdb"."shop"."orders"'
    assert rendered[2].endswith('"my.schema"."or.ders"')


def test_relation_objects_pass_through_unchanged(dbt: Any) -> None:
    # A model's `this`: must not be re-parsed (dbt Relations also pass `is mapping`).
    rendered = dbt.render(
        "{{ changefeed._feed_relation(api.Relation.create(database='d', schema='s.x',"
        " identifier='t.y')) }}",
        "postgres",
    )
    assert rendered == '"d"."s.x"."t.y"'


@pytest.mark.parametrize("relation", ["'orders'", "'a.b.c.d'", "'a..b'", "{'schema': 'x'}", "42"])
def test_relation_rejects_what_it_cannot_resolve(dbt: Any, relation: str) -> None:
    with pytest.raises(DbtError, match="changefeed: relation"):
        dbt.render("{{ changefeed._feed_relation(" + relation + ") }}", "postgres")


def _name(dbt: Any, feed_id: str, kind: str, limit: int, unit: str) -> str:
    snippet = (
        "{{ changefeed._feed_object_name({'feed_id': "
        + repr(feed_id)
        + "}, "
        + repr(kind)
        + f", {limit}, '{unit}') }}}}"
    )
    return str(dbt.render(snippet, "postgres"))


def test_short_names_keep_the_mssql_changefeed_style(dbt: Any) -> None:
    assert _name(dbt, "shop.orders", "feed", 63, "bytes") == "feed:shop.orders"


@pytest.mark.parametrize(("unit", "limit"), [("bytes", 63), ("utf16", 128)])
def test_long_names_are_shortened_within_the_limit_deterministically(
    dbt: Any, unit: str, limit: int
) -> None:
    # Multi-byte characters: the byte rule must never split one.
    feed_id = "schéma." + "ø" * 150
    digest = hashlib.md5(feed_id.encode("utf-8")).hexdigest()[:8]
    first = _name(dbt, feed_id, "update_state", limit, unit)
    again = _name(dbt, feed_id, "update_state", limit, unit)
    assert first == again
    measured = _measure(first, unit)
    assert measured <= limit
    # Longest fitting prefix: one more character would not fit.
    assert measured > limit - (2 if unit == "bytes" else 1)
    assert first.startswith("update_state:schéma.ø")
    assert first.endswith("~" + digest)
    first.encode("utf-8").decode("utf-8")  # valid UTF-8: nothing was split


def _measure(name: str, unit: str) -> int:
    return len(name.encode("utf-8")) if unit == "bytes" else len(name.encode("utf-16-le")) // 2


def test_utf16_counts_characters_outside_the_bmp_twice(dbt: Any) -> None:
    # SQL Server's sysname is nvarchar(128): an emoji takes two of its 128 units.
    feed_id = "s." + "\U0001f600" * 70
    name = _name(dbt, feed_id, "feed", 128, "utf16")
    assert _measure(name, "utf16") <= 128
    assert len(name) < 128 - 40  # code points: far fewer than the 128 a naive count allows
    assert name.endswith("~" + hashlib.md5(feed_id.encode("utf-8")).hexdigest()[:8])


def test_long_names_sharing_a_prefix_do_not_collide(dbt: Any) -> None:
    base = "s." + "x" * 80
    one = _name(dbt, base + "a", "state", 63, "bytes")
    two = _name(dbt, base + "b", "state", 63, "bytes")
    assert one != two
    assert one[:-9] == two[:-9]  # same prefix, different md5 suffix


def test_name_rules_reject_bad_units_and_impossible_limits(dbt: Any) -> None:
    with pytest.raises(DbtError, match="name length unit must be 'bytes' or 'utf16'"):
        _name(dbt, "s.t", "state", 63, "words")
    with pytest.raises(DbtError, match="object kind 'barrier_acquire' is too long"):
        _name(dbt, "s." + "t" * 40, "barrier_acquire", 20, "utf16")


def test_setup_feed_validates_before_touching_the_database(dbt: Any) -> None:
    with pytest.raises(DbtError, match="mode must be one of blocking, outbox; got: sideways"):
        dbt.run_operation(
            "changefeed.setup_feed",
            {"relation": "public.no_such_table", "mode": "sideways"},
            target="postgres",
        )
