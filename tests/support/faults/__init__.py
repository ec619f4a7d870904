"""Helpers of the PostgreSQL fault-injection suite (tests/pg_faults)."""
