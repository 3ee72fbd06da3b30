"""What `seine crawl` changes when it runs its own broker, and what it leaves alone."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from streams.cli.brokers import EMBEDDED_TUNING, broker_for
from streams.kafka.producer import Deliveries, StageProducer
from streams.settings import Settings, load_settings
from tests.integration.conftest import read_topic


def test_embedded_broker_drops_standbys_unless_asked(tmp_path: Path) -> None:
    """Workers of an embedded broker share one machine: a standby only doubles table work."""
    assert Settings().kafka.standby_replicas == 1  # a cluster keeps Faust's warm copies
    assert EMBEDDED_TUNING["standby_replicas"] == 0
    plain = load_settings(environ={}, overrides={"data_dir": str(tmp_path / "a")})
    asked = load_settings(
        environ={"SEINE_STANDBY_REPLICAS": "2"}, overrides={"data_dir": str(tmp_path / "b")}
    )
    with broker_for(plain) as effective:
        assert effective.kafka.bootstrap
        assert effective.kafka.standby_replicas == 0
        # the command's workers share the partitions by index: no group join
        assert (effective.kafka.members, effective.kafka.member_index) == (1, 0)
    with broker_for(plain, workers=2) as effective:
        assert effective.kafka.members == 2
    with broker_for(asked) as effective:
        assert effective.kafka.standby_replicas == 2


def test_a_flush_sends_lingering_changelog_records_at_once(broker: Any) -> None:
    """Changelog records may linger (Settings.kafka.changelog_linger_ms, off by default) only
    because the flush before a commit or a rebalance sends them at once instead of
    waiting out the linger: librdkafka's flush does, so the commit is not held back."""
    topic = f"linger-{uuid.uuid4().hex[:8]}-changelog"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(20)
    producer = StageProducer(broker.bootstrap, changelog_linger_ms=60_000)
    try:
        producer.produce_changelog(topic, b"key", b"value", 0)
        started = time.monotonic()
        asyncio.run(producer.flush(timeout=30.0))
        assert time.monotonic() - started < 10.0
        assert producer.pending() == 0
        [message] = read_topic(broker.bootstrap, topic, 1)
        assert (message.key(), message.value()) == (b"key", b"value")
    finally:
        producer.close(5)


def test_a_flush_s_own_messages_are_awaited_without_the_lingering_changelogs(broker: Any) -> None:
    """The fetch stage's wait before its completions (`StageProducer.wait`) returns once
    its own messages are acknowledged, while a changelog record lingers on."""
    topic = f"awaited-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, 1, 1), NewTopic(topic + "-changelog", 1, 1)]
    ).values():
        future.result(20)
    producer = StageProducer(broker.bootstrap, changelog_linger_ms=60_000)
    try:
        producer.produce_changelog(topic + "-changelog", b"key", b"value", 0)
        awaited = Deliveries()
        for n in range(3):
            producer.produce(topic, f"page {n}".encode(), 0, awaited=awaited)
        started = time.monotonic()
        asyncio.run(producer.wait(awaited, timeout=30.0))
        assert time.monotonic() - started < 10.0
        assert (awaited.waiting, awaited.failed) == (0, 0)
        assert producer.pending() >= 1  # the changelog record, lingering
        values = [m.value() for m in read_topic(broker.bootstrap, topic, 3)]
        assert values == [b"page 0", b"page 1", b"page 2"]
    finally:
        producer.close(5)
