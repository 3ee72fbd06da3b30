"""A cluster that is not what the crawl expects: one clear line and exit 2, no
traceback, and nothing created or lost (runs on Tansu or Kafka, pytest --broker)."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from streams.broker import EmbeddedBroker, free_port
from streams.kafka_local import quiet_config
from tests.integration.conftest import crawl_env, run_seine


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
