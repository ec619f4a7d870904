{#- Revenue per hour (charges minus refunds), over every run of payments_hourly. -#}
{{ config(materialized='view') }}

select hour, sum(payments) as payments, sum(revenue) as revenue
from {{ ref('payments_hourly') }}
group by hour
