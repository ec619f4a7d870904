"""Helpers of the test suite (no tests here)."""
