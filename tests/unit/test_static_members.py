"""The static_members patch: workers of one parent share the partitions by index with
no group join, each computing the whole group's assignment alone
(streams/kafka/patches/static_members.py). Every worker must come to the same shares:
together they cover every partition once, and a partition's table changelog stays
with the partition."""

from __future__ import annotations

from typing import Any

import faust
import pytest
from faust.assignor import PartitionAssignor

from streams.kafka.patches.static_members import assign_statically, member_url, share

PARTITIONS = {"hosts": 4, "pages": 4, "seeds": 1, "app-counts-changelog": 4}


class Cluster:
    """What the assignor reads of the cluster's metadata: partitions per topic."""

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(PARTITIONS[topic]))


def worker(index: int) -> faust.App:
    """The same app as worker `index` builds it on the embedded broker: its own web
    port, one table, no standby (a standby's changelog is read, not owned)."""
    app = faust.App(
        "app", broker="kafka://127.0.0.1:9", web_port=6066 + index, table_standby_replicas=0
    )
    app.Table("counts", partitions=4)
    return app


def shares(members: int) -> list[Any]:
    topics = set(PARTITIONS)
    out = []
    for index in range(members):
        app = worker(index)
        assignor = app.assignor
        assert isinstance(assignor, PartitionAssignor)
        url = str(app.conf.canonical_url)
        out.append(share(assignor, Cluster(), topics, url, members, index))
    return out


@pytest.mark.parametrize("members", [1, 2, 3, 4])
def test_the_workers_shares_cover_every_partition_once(members: int) -> None:
    owners: dict[tuple[str, int], int] = {}
    for index, own in enumerate(shares(members)):
        for topic, partitions in own.assignment:
            for partition in partitions:
                assert (topic, partition) not in owners, (topic, partition)
                owners[(topic, partition)] = index
    expected = {(t, p) for t, n in PARTITIONS.items() for p in range(n)}
    assert set(owners) == expected
    for partition in range(4):
        # co-partitioned: a partition's stage topics and table changelog go together
        holders = {owners[(t, partition)] for t in ("hosts", "pages", "app-counts-changelog")}
        assert len(holders) == 1


def test_each_worker_is_given_a_share() -> None:
    assert all(own.assignment for own in shares(4))


def test_the_shares_are_the_same_whichever_worker_computes_them() -> None:
    first = [sorted(own.assignment) for own in shares(2)]
    again = [sorted(own.assignment) for own in shares(2)]
    assert first == again


def test_a_share_is_accepted_by_the_workers_own_assignor() -> None:
    app = worker(1)
    assignor = app.assignor
    assert isinstance(assignor, PartitionAssignor)
    own = share(assignor, Cluster(), set(PARTITIONS), str(app.conf.canonical_url), 2, 1)
    assignor.on_assignment(own)  # checks the URL and the partitions it names
    assert assignor.assigned_actives()


def test_the_other_workers_addresses_follow_from_the_first_port() -> None:
    assert member_url("http://127.0.0.1:6067", 1, 0) == "http://127.0.0.1:6066"
    assert member_url("http://127.0.0.1:6067", 1, 3) == "http://127.0.0.1:6069"
    assert member_url("http://127.0.0.1:6067", 1, 1) == "http://127.0.0.1:6067"


def test_an_index_outside_the_members_is_refused() -> None:
    with pytest.raises(ValueError, match="member index 2"):
        assign_statically(2, 2)
