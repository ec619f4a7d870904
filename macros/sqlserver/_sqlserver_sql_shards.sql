{#-
  [shards:<feed>] (protocol section 9): the feed's shards, in order: those with a state row
  and, in outbox mode, those with unmoved outbox rows. The reader role may execute it but
  may not read the state or the outbox, and a reader that is not told its shards (the Spark
  source without its `shards` option) must find them all.
-#}
{% macro _sqlserver_sql_shards(c) -%}
{%- set n = c.n -%}
create or alter procedure {{ n.shards.sql }}
as
begin
    -- changefeed protocol {{ c.version }} (docs/protocol.md section 9)
    set nocount on;
    set transaction isolation level read committed;
    select st.shard_id
    from {{ n.state.sql }} as st
{%- if c.mode == 'outbox' %}
    union
    -- readpast: an outbox row still locked belongs to a transaction that has not committed
    -- (or to a mover publishing it, whose shard then has a state row); waiting for it could
    -- take a whole application transaction (readcommittedlock: readpast needs locking reads
    -- under RCSI).
    select o.shard_id
    from {{ n.outbox.sql }} as o with (readcommittedlock, readpast)
{%- endif %}
    order by shard_id;
end
{%- endmacro %}
