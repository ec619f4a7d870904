{#-
  The current state of every order: its newest row in order_updates. A view, because
  a parquet consumer only ever adds partitions (with Delta or Iceberg, order_updates
  itself could merge on order_id instead).
-#}
{{ config(materialized='view') }}

select order_id, shard_id, status, amount, updated_at, ulid as last_event
from (
    select u.*, row_number() over (partition by order_id order by ulid desc) as newest
    from {{ ref('order_updates') }} as u
) as latest
where newest = 1
