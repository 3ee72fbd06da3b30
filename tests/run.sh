#!/usr/bin/env bash
# The project's test command (README, and .ci/run on a fresh clone): installs what the
# tests need, checks lint and types, runs the whole suite on the embedded Tansu broker
# and the broker-facing tests again on a one-node Apache Kafka.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests drive besides Python: Apache Kafka needs Java 17+ and its jars come
# with Maven (streams/kafka/local.py); the dashboard test drives Chromium; the demo
# server's test also serves through nginx; the search-quality test crawls the Python
# docs of python3.11-doc.
missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v chromium >/dev/null || missing+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
[ -d /usr/share/doc/python3.11/html ] || missing+=(python3.11-doc)
if [ ${#missing[@]} -gt 0 ]; then
    echo "tests/run.sh: installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
.venv/bin/seine broker kafka --fetch-only

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy streams tests topology bench

# The whole suite on Tansu (three processes, each with its own broker: most tests
# wait on servers, brokers and politeness delays, so three keep 2 cores busier than
# two, 315 s against 391 s), then the
# crawl, resume, multi-worker, fault, replay and observe tests on Apache Kafka, then
# the faults on a 3-node Kafka alone: its three JVMs and four workers fill both
# cores, and beside other tests a worker's table recovery stalled (Faust: "no event
# received ... since recovery start") until the test's deadline. Two tests of
# test_bad_cluster.py bring their own broker (or none), so the first run covers them.
bad_cluster=tests/integration/test_bad_cluster.py
.venv/bin/pytest -q -n 3 --dist loadscope --ignore=tests/integration/test_kafka_faults.py
.venv/bin/pytest -q -n 2 --dist loadscope --broker kafka \
    --deselect "$bad_cluster::test_a_bootstrap_no_broker_answers_is_one_line" \
    --deselect "$bad_cluster::test_a_cluster_gone_mid_crawl_stops_in_one_line_and_a_rerun_continues" \
    tests/integration/test_crawl_pipeline.py \
    tests/integration/test_resume.py \
    tests/integration/test_recovery.py \
    tests/integration/test_faults.py \
    tests/integration/test_replay.py \
    tests/integration/test_observe.py \
    tests/integration/test_documents_crawl.py \
    "$bad_cluster" \
    tests/integration/test_topics_up_front.py \
    "tests/integration/test_worker_replaced.py::test_a_worker_killed_after_its_commits_is_replaced_and_the_crawl_ends" \
    "tests/integration/test_worker_replaced.py::test_a_stuck_worker_is_killed_and_started_again"
.venv/bin/pytest -q tests/integration/test_kafka_faults.py
