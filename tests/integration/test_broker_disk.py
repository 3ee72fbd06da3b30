"""The embedded broker with `--broker-storage disk`: Tansu's s3 engine on streams.objectstore.

A real Tansu and a real object store process on loopback: messages produced come back
in order, batches every committing group has consumed are deleted from disk, and the
segments directory is gone after stop. (The crawl itself on disk storage is measured by
bench/load.py --broker-storage disk; a crawl here would cost the suite ~40 s.)
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.broker import EmbeddedBroker


def _batches(segments: Path, topic: str) -> list[Path]:
    return sorted(segments.rglob(f"topics/{topic}/partitions/*/records/*.batch"))


def test_disk_storage_round_trip_and_trim(tmp_path: Path) -> None:
    segments = tmp_path / "segments"
    topic = f"stage-{uuid.uuid4().hex[:8]}"
    kept = f"log-{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker(storage="disk", segments_dir=segments, trim_topics=f"^{topic}$") as broker:
        assert len(broker.pids) == 2
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        created = admin.create_topics([NewTopic(topic, 2, 1), NewTopic(kept, 1, 1)])
        for future in created.values():
            future.result(20)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 0,
                "max.in.flight.requests.per.connection": 1,
            }
        )
        sent: dict[int, list[bytes]] = {0: [], 1: []}
        for i in range(60):  # flushed in tens: several batches per partition
            value = f"m{i}".encode() * 50
            producer.produce(topic, value, partition=i % 2)
            producer.produce(kept, value, partition=0)
            sent[i % 2].append(value)
            if i % 10 == 9:
                assert producer.flush(20) == 0
        before = _batches(segments, topic)
        assert len(before) >= 6 and len(_batches(segments, kept)) >= 6

        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "g",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign(
            [TopicPartition(topic, p, 0) for p in (0, 1)] + [TopicPartition(kept, 0, 0)]
        )
        got: dict[int, list[bytes]] = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 60 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() or message.topic() != topic:
                continue
            got[message.partition() or 0].append(message.value() or b"")
        assert got == sent  # all, in order per partition
        consumer.commit(
            offsets=[TopicPartition(topic, p, 30) for p in (0, 1)] + [TopicPartition(kept, 0, 60)],
            asynchronous=False,
        )
        deadline = time.monotonic() + 10
        while len(_batches(segments, topic)) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # all but each partition's last batch (its end is unknown until the next one)
        assert len(_batches(segments, topic)) == 2
        assert len(_batches(segments, kept)) >= 6  # not a stage topic: kept
        consumer.close()
    assert not segments.exists()
