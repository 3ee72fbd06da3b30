#!/usr/bin/env bash
# The project's test command (README, and .ci/run on a fresh clone): installs what the
# tests need, checks lint and types, runs the whole suite on the embedded Tansu broker
# and the broker-facing tests again on a one-node Apache Kafka.
set -euo pipefail
cd "$(dirname "$0")/.."

# Apache Kafka needs Java 17+, and its jars come with Maven (streams/kafka_local.py).
if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
fi

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
.venv/bin/seine broker kafka --fetch-only

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy streams tests topology

# The whole suite on Tansu (two processes, each with its own broker), then the
# crawl, resume, multi-worker, fault, replay and observe tests on Apache Kafka.
.venv/bin/pytest -q -n 2 --dist loadscope
.venv/bin/pytest -q -n 2 --dist loadscope --broker kafka \
    tests/integration/test_crawl_pipeline.py \
    tests/integration/test_resume.py \
    tests/integration/test_recovery.py \
    tests/integration/test_faults.py \
    tests/integration/test_replay.py \
    tests/integration/test_observe.py
