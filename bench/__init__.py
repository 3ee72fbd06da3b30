"""Benchmarks: each runs Seine and its peer (Scrapy, SQLite, ...) in one invocation and
prints the ratio; BENCHMARKS.md has the current figures and the command of each.
Scripts here may import streams/, topology/ and tests/ helpers; nothing imports bench/
but tests that reuse a harness (tests/integration/test_kafka_faults.py).
"""
