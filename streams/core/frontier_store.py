"""The frontier's host states and partitions: tables, write-back cache, wake-up heaps.

`HostStore` is the base the frontier is built on (`streams.core.frontier`): the two
tables (``hosts``, ``queue``), host states read through a cache and written back
once per event (`flush`), and per partition the heap of hosts with work and the
count of URLs queued. The tiered queues (`streams.core.frontier_queues`), the leases
and adoption (`streams.core.frontier_leases`) and the frontier itself build on it.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Callable, MutableMapping

from streams.core.frontier_model import (
    HostState,
    PartitionQueue,
    Politeness,
    QueueItem,
    pending,
)
from streams.core.frontier_robots import RobotsState

#: Host states the frontier keeps in memory besides writing them (`HostStore._get`).
HOST_CACHE_SIZE = 1 << 14


class HostStore:
    """Host states and per-partition scheduling for every partition this worker owns."""

    def __init__(
        self,
        hosts: MutableMapping[str, HostState],
        queue: MutableMapping[str, QueueItem],
        policy: Politeness,
        partition_of: Callable[[str], int],
        clock: Callable[[], float] = time.time,
        write_back: bool = False,
    ) -> None:
        #: Hold changed host states until flush() (the stage does; plain dicts need not).
        self.write_back = write_back
        self.hosts = hosts
        self.queue = queue
        self.policy = policy
        #: A host's partition, memoised: it is asked on every enqueue and completion.
        self.partition_of = functools.lru_cache(maxsize=1 << 16)(partition_of)
        self.clock = clock
        self._partitions: dict[int, PartitionQueue] = {}
        #: robots.txt rules per origin, and the politeness wait they set.
        self._robots = RobotsState(policy)
        #: Host states changed while handling the current event, written to `hosts` once
        #: each by flush(): a host's state changes several times in one event (enqueue,
        #: completion, dispatch), and every table write is a changelog record.
        self._dirty: dict[str, HostState] = {}
        #: Host states as last written or read (see `_get`), at most HOST_CACHE_SIZE.
        self._cache: dict[str, HostState] = {}
        #: URLs waiting in queues of hosts this worker owns, per partition (for idle
        #: detection and progress; per partition so that a revoked one can be forgotten).
        self._queued: dict[int, int] = {}

    @property
    def queued(self) -> int:
        """URLs waiting in the queues of every partition this worker holds."""
        return sum(self._queued.values())

    def _count(self, authority: str, n: int) -> None:
        partition = self.partition_of(authority)
        self._queued[partition] = self._queued.get(partition, 0) + n

    # -- write-back of host states ------------------------------------------------

    def _get(self, authority: str) -> HostState | None:
        """The host's state: changed in this event, else as this frontier last wrote or
        read it, else from `hosts`.

        The frontier is the only writer of `hosts`, and every write goes through
        `_put`/`flush`, which keep the cache, so a cached state is the table's (states
        are copied before they are changed, never changed in place once written). A
        table read is a RocksDB get and a JSON decode of the whole state, robots.txt
        body included, and a host is read at every event that touches it: enqueue,
        re-tier, completion, dispatch. What another worker may have written while it
        owned a partition is dropped with the partition (`forget`, at every rebalance).
        """
        state = self._dirty.get(authority)
        if state is not None:
            return state
        state = self._cache.get(authority)
        if state is not None:
            return state
        state = self.hosts.get(authority)
        if state is not None:
            self._remember(authority, state)
        return state

    def _remember(self, authority: str, state: HostState) -> None:
        cache = self._cache
        if len(cache) >= HOST_CACHE_SIZE and authority not in cache:
            cache.clear()  # cheaper than LRU bookkeeping on the hot path
        cache[authority] = state

    def _put(self, authority: str, state: HostState) -> None:
        if self.write_back:
            self._dirty[authority] = state
        else:
            self.hosts[authority] = state
            self._remember(authority, state)

    def flush(self) -> int:
        """Write every host state changed since the last flush; returns how many.

        Call at the end of handling each event, while that event is current (the
        table writes go to its partition's changelog).
        """
        dirty, self._dirty = self._dirty, {}
        for authority, state in dirty.items():
            self.hosts[authority] = state
            self._remember(authority, state)
        return len(dirty)

    # -- partitions ---------------------------------------------------------------

    def knows_partition(self, partition: int) -> bool:
        return partition in self._partitions

    def forget(self, partition: int) -> None:
        """Drop what memory holds of a partition this worker no longer owns (or must
        re-read): its heap, counts and cached host states (the layers above drop what
        they hold of it too). The tables keep the state; the next owner, or this worker
        when the partition comes back, adopts it from them."""
        self._partitions.pop(partition, None)
        self._queued.pop(partition, None)
        for authority in [a for a in self._dirty if self.partition_of(a) == partition]:
            del self._dirty[authority]
        self._robots.clear()  # rebuilt from host states on demand; another owner may refresh
        self._cache.clear()  # the next owner may write them; re-read from the table

    def next_wake(self, partition: int) -> float | None:
        pq = self._partitions.get(partition)
        if pq is None or not pq.heap:
            return None
        return pq.heap[0][0]

    def partitions(self) -> list[int]:
        return list(self._partitions)

    def _pq(self, authority: str) -> PartitionQueue:
        return self._partitions.setdefault(self.partition_of(authority), PartitionQueue())

    def _schedule(self, pq: PartitionQueue, authority: str, at: float) -> None:
        current = pq.scheduled.get(authority)
        if current is not None and current <= at:
            return
        pq.scheduled[authority] = at
        heapq.heappush(pq.heap, (at, authority))

    def _has_work(self, state: HostState) -> bool:
        """URLs wait for the host: `pending`, or, while holes are counted, any slot
        between a head and its tail. The holes are counted, not recorded: a kill that
        loses a re-tier move held in memory can leave the count one over, and a URL
        then waited in its slot while `pending` said 0 (the cluster-gone test lost a
        page so). Such slots are read; an empty one passes as a hole (`_pop_next`)."""
        if pending(state) > 0:
            return True
        if not state.get("holes"):
            return False
        return any(int(t) > int(h) for h, t in zip(state["heads"], state["tails"], strict=True))
