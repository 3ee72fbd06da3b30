"""How long a worker waits for its partitions on the embedded Tansu: a consumer-group
join against the static shares `seine crawl` uses there
(streams/kafka/patches/static_members.py, docs/decisions/0045).

Starts an embedded broker, creates a 4-partition topic, and times, for 1 and 2
consumers started together, `start()` to holding partitions: joining a group (the
session timeout `seine crawl` uses: 2 s alone, 4 s with several), then `assign()` of
the consumer's share. Prints the ratio.

    .venv/bin/python bench/group_join.py
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.kafka.broker import EmbeddedBroker

PARTITIONS = 4


async def until_assigned(consumer: AIOKafkaConsumer, deadline: float) -> None:
    while not consumer.assignment():
        if time.monotonic() > deadline:
            raise TimeoutError("no partitions within the deadline")
        await asyncio.sleep(0.002)


async def joined(bootstrap: str, topic: str, group: str, session_ms: int) -> float:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=min(1000, session_ms // 4),
    )
    began = time.monotonic()
    await consumer.start()
    try:
        await until_assigned(consumer, began + 30)
        return time.monotonic() - began
    finally:
        await consumer.stop()


async def assigned(bootstrap: str, topic: str, group: str, index: int, members: int) -> float:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    began = time.monotonic()
    await consumer.start()
    try:
        share = [TopicPartition(topic, p) for p in range(PARTITIONS) if p % members == index]
        consumer.assign(share)
        await until_assigned(consumer, began + 30)
        return time.monotonic() - began
    finally:
        await consumer.stop()


async def compare(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("join", PARTITIONS, 1)])
    await admin.close()
    for members, session_ms in ((1, 2000), (2, 4000)):
        group = f"group-{members}"
        joins = await asyncio.gather(
            *(joined(bootstrap, "join", group, session_ms) for _ in range(members))
        )
        static = f"static-{members}"
        shares = await asyncio.gather(
            *(assigned(bootstrap, "join", static, i, members) for i in range(members))
        )
        slowest_join, slowest_share = max(joins), max(shares)
        print(
            f"{members} consumer(s), session timeout {session_ms / 1000:.0f} s: "
            f"group join {', '.join(f'{t:.3f}' for t in joins)} s; "
            f"static share {', '.join(f'{t:.3f}' for t in shares)} s; "
            f"slowest {slowest_join / slowest_share:.0f}x faster static"
        )


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with EmbeddedBroker() as broker:
        asyncio.run(compare(broker.bootstrap))


if __name__ == "__main__":
    main()
