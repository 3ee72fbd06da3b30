"""A cluster that is not what the crawl expects: one clear line and exit 2, no
traceback, and nothing created or lost (runs on Tansu or Kafka, pytest --broker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker, free_port
from streams.kafka.local import KafkaCluster, quiet_config
from streams.ops.exits import EXIT_BROKER_LOST
from streams.store.storeset import open_stores
from tests.integration.conftest import REPO, crawl_env, run_seine


def test_a_bootstrap_no_broker_answers_is_one_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    done = run_seine(
        ["crawl", "http://a.test/", "--bootstrap", address, "--data-dir", str(tmp_path)],
        env=crawl_env("nobroker"),
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("seine")]
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and address in lines[0] and "no Kafka broker" in lines[0], lines


def test_a_topic_with_another_partition_count_is_named(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    app_id = f"mm{uuid.uuid4().hex[:8]}"
    topic = f"{app_id}.frontier"
    admin = AdminClient(quiet_config(broker.bootstrap))
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    args = ["crawl", "http://a.test/", "--bootstrap", broker.bootstrap]
    done = run_seine(
        [*args, "--data-dir", str(tmp_path), "--partitions", "4"],
        env=crawl_env(app_id),
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert f"topic {topic} has 3 partitions" in done.stderr
    assert "--partitions 3" in done.stderr
    # nothing was created beside it: the crawl refused before its first topic
    topics = admin.list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(app_id) and t != topic]


def test_a_cluster_gone_mid_crawl_stops_in_one_line_and_a_rerun_continues(
    tmp_path: Path,
) -> None:
    spec = WebSpec(hosts=6, pages_per_host=30, seed=23)
    env = {  # this test brings its own Apache Kafka, whatever --broker says
        **os.environ,
        "SEINE_APP_ID": f"gone{uuid.uuid4().hex[:8]}",
        "SEINE_SESSION_TIMEOUT": "6",  # Kafka's minimum
        "SEINE_REBALANCE_TIMEOUT": "6",
        "SEINE_HEARTBEAT_INTERVAL": "1",
        "SEINE_LOG_LEVEL": "error",
        "SEINE_BROKER_LOST_TIMEOUT": "10",
    }
    cluster = KafkaCluster(tmp_path / "kafka", 1).start()
    try:
        with start_server_process(spec, tmp_path / "requests.jsonl", tmp_path / "web") as web:
            args = ["crawl", *web.seeds, "--data-dir", str(tmp_path / "data")]
            args += ["--partitions", "2", "--allow-private", "--until-idle", "--delay", "0.2"]
            for host, addr in web.resolve.items():
                args += ["--resolve", f"{host}={addr}"]
            cmd = [sys.executable, "-m", "streams.cli", *args]
            first = subprocess.Popen(
                [*cmd, "--bootstrap", cluster.bootstrap],
                env=env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            log = tmp_path / "requests.jsonl"
            deadline = time.monotonic() + 120
            while not log.exists() or len(read_request_log(log)) < 40:
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline, "the crawl fetched too little"
                time.sleep(0.2)  # polling the server's log, bounded by the deadline
            gone_at = cluster.bootstrap
            cluster.stop()  # the whole cluster goes away mid-crawl
            _, stderr = first.communicate(timeout=120)
            assert first.returncode == EXIT_BROKER_LOST, stderr[-2000:]
            assert "Traceback" not in stderr
            lines = [ln for ln in stderr.splitlines() if ln.startswith("seine: lost")]
            assert len(lines) == 1 and gone_at in lines[0], stderr[-2000:]

            cluster.start()  # the same cluster, back (its topics kept on disk)
            again = run_seine([*args, "--bootstrap", cluster.bootstrap], env=env, timeout=240)
            assert again.returncode == 0, again.stderr[-2000:] + crash_logs(tmp_path / "data")
            expected = set(web.web.reachable_allowed())
    finally:
        cluster.stop()
    with open_stores(tmp_path / "data") as store:
        stored = set(store.urls())
        assert not stored - expected, sorted(stored - expected)[:5]
        # nothing lost: the frontier's tables may come back torn (each changelog
        # keeps its own prefix of what the worker wrote before it stopped), and the
        # frontier neither forgets a dispatched page nor a queued one for it
        assert stored == expected, sorted(expected - stored)[:5]
        # each page kept once as a response; a page in flight at the loss may have a
        # revisit record of its second fetch beside it
        for url in stored:
            records = [c for s in store.stores for c in s.captures(url)]
            assert records, url


def crash_logs(root: Path) -> str:
    """The tracebacks of crashed workers under `root`: stderr gives one line each."""
    return "".join(f"\n{path}:\n{path.read_text()}" for path in sorted(root.rglob("crash.log")))
