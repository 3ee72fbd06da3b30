"""Benchmarks: each runs Seine and its peer (Scrapy, SQLite, ...) in one invocation and
prints the ratio; BENCHMARKS.md has the current figures and the command of each.
Scripts here may import streams/, topology/ and tests/ helpers, and their own modules
here, named after the script (bench/faults_harness.py for bench/faults.py; those of
bench/crawl_throughput.py are bench/throughput_*.py); nothing else imports bench/ but
tests that reuse a harness (tests/integration/test_faults.py, test_kafka_faults.py).
"""
