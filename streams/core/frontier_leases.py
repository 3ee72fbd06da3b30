"""The frontier's fetches in flight: leases, adoption after a rebalance, claims.

A host with a fetch in flight is *busy* until that fetch's completion comes, or its
lease runs out (`expire_leases`: the fetch is dispatched again). `Leases` (built on
`TieredQueues`, and built on by the frontier) keeps the busy hosts in memory, rebuilds
a partition from its host states when this worker is handed it (`adopt`: a fetch
that was in flight then gets a grace for its completion), drops it when it goes
(`forget`), and tells the fetch stage whether a fetch request is the one the
frontier waits for and may start (`is_current`, `claim`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, MutableMapping

from streams.core.frontier_model import (
    ROBOTS_PENDING,
    ROBOTS_READY,
    ROBOTS_UNKNOWN,
    Dispatch,
    HostState,
    PartitionQueue,
    Politeness,
    QueueItem,
    copy_state,
    pending,
    tried,
)
from streams.core.frontier_queues import LAZY_MOVES, TieredQueues

log = logging.getLogger("seine.frontier")


class Leases(TieredQueues):
    """Busy hosts and their leases, and adoption, for every partition this worker owns."""

    def __init__(
        self,
        hosts: MutableMapping[str, HostState],
        queue: MutableMapping[str, QueueItem],
        policy: Politeness,
        partition_of: Callable[[str], int],
        clock: Callable[[], float] = time.time,
        write_back: bool = False,
        lazy_moves: int = LAZY_MOVES,
    ) -> None:
        super().__init__(hosts, queue, policy, partition_of, clock, write_back, lazy_moves)
        #: Fetches in flight at an adoption whose pages were stored already (`adopt`).
        self.adopted_stored = 0
        #: Fetches in flight at an adoption whose completion came within the grace
        #: (`adopt`): each one not done twice.
        self.adopted_completed = 0
        #: Busy hosts an adoption found, until their completion comes: when the grace
        #: for it runs out (`due` then does the fetch again).
        self._adopted: dict[str, float] = {}
        #: `stored_since(url, t)`: is a page of `url` fetched at or after `t` stored?
        #: (the page stores; None: not known). Asked of a fetch in flight at an
        #: adoption, again when its grace runs out, and of a queued refetch
        #: (`Frontier.enqueue`, its ``unless_stored_since``).
        self.stored_since: Callable[[str, float], bool] | None = None
        #: Busy hosts are few (at most the fetches in flight), so their leases live in memory.
        self._busy: dict[str, HostState] = {}
        #: The dispatch (its ``dispatched_at``) whose request the fetch stage has started,
        #: per busy host: a request delivered twice is started once (``claim``).
        self._started: dict[str, float] = {}
        #: Requests delivered again while in flight, refused by claim().
        self.duplicate_requests = 0
        #: Per partition, a lower bound of its busy hosts' dispatch times: until the
        #: oldest lease could have run out, `expire_leases` need not look at them all
        #: (it is asked at every event, and there is a busy host per fetch in flight).
        self._oldest_lease: dict[int, float] = {}
        #: Fetches dispatched and not yet completed.
        self.in_flight = 0

    # -- recovery -----------------------------------------------------------------

    def adopt(
        self,
        partition: int,
        states: Iterable[tuple[str, HostState]],
        stored_since: Callable[[str, float], bool] | None = None,
    ) -> None:
        """Rebuild the in-memory heap of one partition from persisted host states.

        Called when a partition is first seen (worker start, or a rebalance handed it
        over). A host that was busy then stays busy with that fetch for
        `Politeness.adopt_grace` seconds: its completion may be on its way still. A
        fetch ends before its completion is sent, and the completion is sent only
        once the page is on the broker, so at a rebalance the frontier topic (or the
        fetch stage's outbox) holds the completions of fetches that are over; the
        new owner reads them right after the adoption. Released at once, as before,
        the host had its fetch done again and the completion that came next ignored
        (the fault harness saw every URL fetched twice at a rebalance come so).
        A completion within the grace releases the host as any completion does
        (counted in `adopted_completed`); after it, the fetch is taken as lost (its
        worker died, or cancelled it when the partition was revoked: ``forget``) and
        done again, first of its host's URLs and a politeness wait after the grace
        ran out (`_release_adopted`), a fetch request of it read again is refused
        meanwhile (``claim``).

        `stored_since(url, t)` says whether a page of `url` fetched at or after `t` is
        stored (the page store; None: not known). A fetch in flight whose page is
        stored already is not done again: its page went down the pipeline ahead of its
        completion, which the crash lost (the frontier's topic lags the pages' under
        load). Its host is released at once. Counted in `adopted_stored`.
        """
        pq = self._partitions.setdefault(partition, PartitionQueue())
        now = self.clock()
        if stored_since is not None:
            self.stored_since = stored_since
        for authority, state in states:
            if self.partition_of(authority) != partition:
                continue
            self._cache.pop(authority, None)  # the table's state is the one adopted
            if "heads" not in state:
                state = self._upgrade(authority, state)
            self._queued[partition] = self._queued.get(partition, 0) + pending(state)
            if state.get("busy"):
                dispatched_at = float(state["busy"])
                if self._stored_already(state):
                    state = self._release_adopted(authority, copy_state(state), now, stored=True)
                else:
                    # busy until its completion comes, or the grace runs out
                    self._remember(authority, state)
                    self._busy[authority] = state
                    self._started[authority] = dispatched_at  # its request: not again
                    self._note_lease(authority, dispatched_at)
                    self.in_flight += 1
                    deadline = now + self.policy.adopt_grace
                    self._adopted[authority] = deadline
                    self._schedule(pq, authority, deadline)
                    continue
            if self._has_work(state):
                self._schedule(pq, authority, max(now, float(state.get("next", 0.0))))
        self._partitions[partition] = pq

    def _stored_already(self, state: HostState) -> bool:
        """Whether the page of the busy host's fetch in flight is stored (`adopt`)."""
        inflight, stored_since = state.get("inflight"), self.stored_since
        if not inflight or state.get("robots") == ROBOTS_PENDING or stored_since is None:
            return False
        if stored_since(str(inflight.get("url", "")), float(state["busy"])):
            self.adopted_stored += 1  # fetched and stored: not again
            return True
        return False

    def _release_adopted(
        self, authority: str, state: HostState, now: float, *, stored: bool = False
    ) -> HostState:
        """Release a host that was busy at its adoption: its fetch is lost, and done
        again first of its URLs (not if `stored`: its page is stored already), the
        host asked again a politeness wait after `now`. The fetch has ended by now,
        yet when it ended is unknown, so the host's clock restarts from `now`.
        `state` is a copy this may change; returns it, written."""
        self._adopted.pop(authority, None)
        inflight = state.get("inflight")
        requeued_at = ""
        if inflight and not stored and state.get("robots") != ROBOTS_PENDING:
            # the lost fetch, first
            requeued_at = self._push_front(authority, state, tried(inflight, float(state["busy"])))
        self._settle(state, requeued_at)
        if state.get("robots") == ROBOTS_PENDING:
            # a refresh of known rules keeps them (and is asked again at once)
            refreshing = float(state.get("robots_expires") or 0.0) > 0.0
            state["robots"] = ROBOTS_READY if refreshing else ROBOTS_UNKNOWN
        state["busy"] = 0.0
        state["inflight"] = None
        state["next"] = max(
            float(state.get("next", 0.0)),
            now + self._robots.politeness_wait(state, float(state.get("last_ms", 0.0))),
        )
        self._put(authority, state)
        return state

    def forget(self, partition: int) -> None:
        """Drop what memory holds of a partition this worker no longer owns (or must
        re-read): its heap, leases and counts. The tables keep the state; the next
        owner, or this worker when the partition comes back, adopts it from them."""
        self._oldest_lease.pop(partition, None)
        for authority in [a for a, _ in self._busy_hosts(partition)]:
            del self._busy[authority]
            self._started.pop(authority, None)
            self._adopted.pop(authority, None)
            self.in_flight = max(0, self.in_flight - 1)
        super().forget(partition)  # its heap, counts, host states, holes and moves

    def is_current(self, host: str, dispatched_at: float) -> bool:
        """Is this the fetch the frontier is waiting for? A fetch request read again
        after a rebalance (its offset was not committed), or one the frontier has since
        re-dispatched (lease expiry, adoption), is not: performing it would put a
        second request to the host in flight."""
        state = self._busy.get(host)
        return state is not None and float(state.get("busy") or 0.0) == dispatched_at

    def claim(self, host: str, dispatched_at: float) -> bool:
        """May the fetch stage start this request now? Only if it is current
        (``is_current``) and not started already. A fetch request message can be
        delivered twice while its dispatch is still the one the frontier waits for (a
        consumer that seeks back to the committed offset after handing out the
        messages past it, at a rebalance): both copies are current, and performing
        both asked the host for the same URL twice within milliseconds."""
        if not self.is_current(host, dispatched_at):
            return False
        if self._started.get(host) == dispatched_at:
            self.duplicate_requests += 1
            log.info(
                "frontier: the request of %s dispatched at %.6f came again while it is "
                "in flight: not started twice",
                host,
                dispatched_at,
            )
            return False
        self._started[host] = dispatched_at
        return True

    # -- leases -------------------------------------------------------------------

    def _mark_busy(
        self, authority: str, state: HostState, now: float, item: QueueItem | None, key: str = ""
    ) -> None:
        """The host is busy with a fetch of `item` (None: robots.txt) from now.

        The item stays in ``queue`` at `key` until the fetch is over (`_settle`): the
        host state and the queue have changelogs of their own, and a worker killed
        after the dispatch's delete of the item reached the broker and before the host
        state naming the fetch did left the URL nowhere: its successor found the host
        idle and its head on an empty slot, which it skips (a 3-node Kafka fault run
        lost a seed page so). Left in place, the item is served again from there if
        the host state is lost, and the host state's ``inflight`` carries it if the
        delete at the fetch's end gets there first."""
        state["busy"] = now
        state["inflight"] = item
        if key:
            state["inflight_key"] = key
        else:
            state.pop("inflight_key", None)
        self._put(authority, state)
        self._busy[authority] = state
        self._note_lease(authority, now)
        self.in_flight += 1

    def expire_leases(self, partition: int) -> list[Dispatch]:
        """Re-dispatch fetches whose completion never came (a lost message, a dead task)."""
        now = self.clock()
        lease = self.policy.fetch_lease
        oldest = self._oldest_lease.get(partition)
        if oldest is None or now - oldest < lease:
            return []  # no lease of the partition can have run out (see _note_lease)
        again: list[Dispatch] = []
        oldest = math.inf
        for authority, held in list(self._busy_hosts(partition)):
            busy = float(held["busy"])
            if now - busy < lease:
                oldest = min(oldest, busy)
                continue
            # The host's state as it is now: `_busy` keeps the one its dispatch wrote,
            # and URLs queued for the host since moved its tails. Written back, that
            # old state left those URLs past the tails, never fetched.
            state = copy_state(self._get(authority) or held)
            item = state.get("inflight") or {}
            kind = "robots" if state.get("robots") == ROBOTS_PENDING else item.get("kind", "page")
            url = item.get("url") or f"{state['origin']}/robots.txt"
            state["busy"] = now
            self._put(authority, state)
            self._busy[authority] = state
            self._adopted.pop(authority, None)
            oldest = min(oldest, now)
            again.append(Dispatch(url, authority, kind, int(item.get("depth", 0)), now))
        if oldest == math.inf:
            del self._oldest_lease[partition]
        else:
            self._oldest_lease[partition] = oldest
        return again

    def _note_lease(self, authority: str, at: float) -> None:
        """A fetch of `authority` was dispatched `at`: keep its partition's bound (a
        host released since leaves the bound too old, which costs one needless scan;
        ``now - at`` grows as `at` falls, so a bound that has not run out proves that
        no busy host's lease has)."""
        partition = self.partition_of(authority)
        oldest = self._oldest_lease.get(partition)
        if oldest is None or at < oldest:
            self._oldest_lease[partition] = at

    def _busy_hosts(self, partition: int) -> Iterable[tuple[str, HostState]]:
        for authority, state in self._busy.items():
            if self.partition_of(authority) == partition:
                yield authority, state
