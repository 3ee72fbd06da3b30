"""The frontier: per-host FIFO queues, robots.txt state and the politeness clock.

Pure logic over two mappings, so the same code runs on plain dicts in unit tests
and on Faust tables (RocksDB + changelog) in the frontier stage:

* ``hosts``: authority ("host[:port]") → host state (a small JSON-able dict),
* ``queue``: ``authority \\x00 tier \\x00 sequence`` → queued URL item.

A host's queue is split into ``TIERS`` priority tiers (the front queues; 0 is the
most important); each tier is the key range between the host's ``heads[tier]`` and
``tails[tier]`` sequence numbers, so enqueue and dequeue are single-key writes and
the queues live on disk, not in memory. When a host may be asked again, its next
URL comes from a tier chosen by smooth weighted round robin over its non-empty
tiers (``TIER_WEIGHTS``, 8:4:2:1): higher tiers go first, lower ones are never
starved. In memory there is only, per partition, a heap of hosts that have work,
ordered by the time they may next be asked (their *wake time*); the host is the
back queue.

Trap budgets: a host's page budget (``max_host_pages``) and the most URLs one host
may have queued (``max_host_queue``); what goes over either is logged, not queued.

Politeness rules, all enforced here and nowhere else:

* at most one request in flight per host (``busy``); the host is released only by
  the fetch stage's completion message, or by lease expiry if that message was lost;
* the next request waits ``max(delay, min(robots Crawl-delay, cap), k × last
  response time)`` after the previous one finished, and at least ``Retry-After``
  on 429/503;
* robots.txt is fetched before any page of the host, and every page is checked
  against it when it leaves the queue (RFC 9309: 4xx → allow all, 5xx or
  unreachable → disallow, retried with backoff, and the host parked at last).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from streams.core.robots import RobotsRules

log = logging.getLogger("seine.frontier")

HostState = dict[str, Any]
QueueItem = dict[str, Any]

ROBOTS_UNKNOWN = "unknown"
ROBOTS_PENDING = "pending"
ROBOTS_READY = "ready"
ROBOTS_UNAVAILABLE = "unavailable"

#: Consecutive connection errors after which a host is parked (its queue dropped, logged).
PARK_AFTER_ERRORS = 8
MAX_ERROR_BACKOFF = 300.0
ROBOTS_MAX_TRIES = 3
#: Times a page answered 429/503 goes back to its queue before it is given up.
MAX_RETRIES = 3


#: The authority of a URL in canonical form: lower-case scheme and host, no userinfo, a
#: port without leading zeros; what it matches, urlsplit would answer the same.
_PLAIN_AUTHORITY = re.compile(r"https?://([a-z0-9._-]+)(:[1-9][0-9]{0,4})?(?=[/?#]|\Z)")


def authority_of(url: str) -> str:
    """``host[:port]`` of an absolute URL, lower-cased: the unit of politeness.

    A URL in canonical form (every URL the frontier queues) is read by a regex,
    a third of urlsplit's cost; anything else, an out-of-range port included, goes
    to urlsplit (unit-tested to agree)."""
    m = _PLAIN_AUTHORITY.match(url)
    if m is not None:
        port = m[2]
        if port is None:
            return m[1]
        if int(port[1:]) <= 65535:
            return url[m.start(1) : m.end(2)]
    return _authority_by_urlsplit(url)


def _authority_by_urlsplit(url: str) -> str:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


#: Host states the frontier keeps in memory besides writing them (:meth:`Frontier._get`).
HOST_CACHE_SIZE = 1 << 14

#: Queue keys a re-tier emptied that this frontier remembers (see `Frontier._holes`).
HOLES_SIZE = 1 << 16

#: Re-tier moves a frontier keeps in memory at once (see `Frontier._lazy`); past it a
#: move is written to the queue table at once.
LAZY_MOVES = 1 << 16

#: Front tiers (0 = most important) and the weighted-round-robin share of each.
TIERS = 4
TIER_WEIGHTS = (8, 4, 2, 1)


def queue_key(authority: str, tier: int, seq: int) -> str:
    """The queue key: a host's tiers are adjacent ranges, each in FIFO order."""
    return f"{authority}\x00{tier}\x00{seq:012d}"


def tier_for(priority: int = 0, depth: int = 0, inlinks: int = 1) -> int:
    """The front tier of a URL: shallow, prioritised and well-linked URLs rank higher.

    Depth sets the base (0-1 → tier 1, 2-4 → 2, deeper → 3); each point of seed
    priority lifts it one tier (a negative priority lowers it), and so does each
    doubling of the in-link count (2-3 links → one tier, 4-7 → two). Tier 0 is only
    reached with a lift, so it holds what someone or the link graph said matters.
    """
    base = 1 if depth <= 1 else 2 if depth <= 4 else 3
    lift = priority + max(0, int(inlinks).bit_length() - 1)
    return min(TIERS - 1, max(0, base - lift))


def pending(state: HostState) -> int:
    """URLs queued for a host, over all its tiers.

    Asked for every dispatch and enqueue: two C-level sums, not a generator of
    per-tier differences (half the cost; the same answer, as each count is an int)."""
    heads, tails = state["heads"], state["tails"]
    if len(heads) != len(tails):
        raise ValueError(f"a host state with {len(heads)} heads and {len(tails)} tails")
    return sum(map(int, tails)) - sum(map(int, heads))


def _copy(state: HostState) -> HostState:
    """A host state to change: its per-tier lists are copied too, never shared."""
    out = dict(state)
    for name in ("heads", "tails", "wrr"):
        out[name] = list(state[name])
    return out


@dataclass
class Politeness:
    """The knobs of the politeness clock."""

    delay: float = 0.0
    max_crawl_delay: float = 30.0
    response_time_factor: float = 0.0
    user_agent: str = "SeineBot"
    fetch_lease: float = 120.0
    robots_retry: float = 60.0
    #: A page answered 429/503 is asked again later only if the host's wait is at most
    #: this long (a server asking for minutes is not worth holding the crawl open for).
    max_retry_wait: float = 10.0
    #: How long fetched robots.txt rules are trusted (RFC 9309: not more than 24 hours).
    robots_ttl: float = 86400.0
    max_pages: int = 0
    #: Pages one host may be asked for in all (0: no limit); the rest is logged "host-budget".
    max_host_pages: int = 0
    #: URLs one host may have queued at once (0: no limit); more is logged "host-queue-full".
    max_host_queue: int = 0
    #: Seconds an adoption waits for the completion of a fetch that was in flight
    #: (`Frontier.adopt`) before it does that fetch again.
    adopt_grace: float = 3.0


@dataclass
class Dispatch:
    """A fetch the frontier made due: the fetch stage performs it and answers with a completion."""

    url: str
    host: str
    kind: str  # "page" or "robots"
    depth: int
    dispatched_at: float
    #: The queue slot (tier, sequence) the page was served from (None: robots.txt, or
    #: a lease's re-dispatch): the URL registry keeps it (`Frontier.accounts_for`).
    slot: tuple[int, int] | None = None


@dataclass
class Decision:
    """A URL the frontier decided not to fetch, for the crawl log."""

    url: str
    host: str
    outcome: str
    reason: str
    depth: int = 0
    #: The URL went back to its queue (a 429/503 retried): still queued, not given up.
    requeued: bool = False


@dataclass
class _PartitionQueue:
    heap: list[tuple[float, str]] = field(default_factory=list)
    scheduled: dict[str, float] = field(default_factory=dict)


class Frontier:
    """Per-host queues and scheduling for every partition this worker owns."""

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
        #: Hold changed host states until flush() (the stage does; plain dicts need not).
        self.write_back = write_back
        #: At most this many re-tier moves held in memory (0: every move is written).
        self.lazy_moves = lazy_moves
        self.hosts = hosts
        self.queue = queue
        self.policy = policy
        #: A host's partition, memoised: it is asked on every enqueue and completion.
        self.partition_of = functools.lru_cache(maxsize=1 << 16)(partition_of)
        self.clock = clock
        self._partitions: dict[int, _PartitionQueue] = {}
        self._rules: dict[str, RobotsRules] = {}
        #: Host states changed while handling the current event, written to `hosts` once
        #: each by flush(): a host's state changes several times in one event (enqueue,
        #: completion, dispatch), and every table write is a changelog record.
        self._dirty: dict[str, HostState] = {}
        #: Host states as last written or read (see `_get`), at most HOST_CACHE_SIZE.
        self._cache: dict[str, HostState] = {}
        #: Queue keys this frontier emptied by a re-tier move and whose tier's head has
        #: not reached them yet (at most HOLES_SIZE; forgotten with any partition): when
        #: the head gets there, the key is skipped without a table read (a miss costs a
        #: RocksDB get, and a crawl leaves ~2 holes a page). No write can fill a hole:
        #: enqueues and moves write at a tier's tail, past it, and a 429/503 puts its page
        #: back where that page was popped, which held the page, not a hole.
        self._holes: set[str] = set()
        #: Re-tier moves not written to `queue` ("lazy moves"): new queue key → (the
        #: item as moved, the key where the item still lies in `queue`). A move costs a
        #: queue read and the host state's tail (written once per message anyway)
        #: instead of a delete and a put, each a RocksDB write and a changelog record
        #: (~2.3 moves a page). The item is served from here when its tier's head
        #: reaches the new key, and its old key deleted then, the one write a dispatch
        #: costs anyway; if the old tier's head reaches the old key first, the move is
        #: written then (`_take`), so no queued item ever lies below its tier's head.
        #: Lost with the worker or the partition (`forget`): the new key then reads as
        #: an empty slot and the item is served at its old key, so every URL is still
        #: fetched once and only its promotion is lost.
        self._lazy: dict[str, tuple[QueueItem, str]] = {}
        #: The other way round: old key of each lazy move → its new key. The old key
        #: still holds the item in `queue`, but it is no longer there for this frontier.
        self._moved: dict[str, str] = {}
        #: Lazy moves written out because the old tier's head reached the old key first.
        self.moves_materialized = 0
        #: Fetches in flight at an adoption whose pages were stored already (`adopt`).
        self.adopted_stored = 0
        #: Fetches in flight at an adoption whose completion came within the grace
        #: (`adopt`): each one not done twice.
        self.adopted_completed = 0
        #: Busy hosts an adoption found, until their completion comes: when the grace
        #: for it runs out (`due` then does the fetch again).
        self._adopted: dict[str, float] = {}
        #: The adoption's `stored_since`, asked again when a grace runs out.
        self._stored_since: Callable[[str, float], bool] | None = None
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
        #: URLs waiting in queues of hosts this worker owns, per partition (for idle
        #: detection and progress; per partition so that a revoked one can be forgotten).
        self._queued: dict[int, int] = {}
        #: Fetches dispatched and not yet completed.
        self.in_flight = 0
        self.pages_dispatched = 0
        #: (tier, sequence) of the URL the last enqueue() queued: the URL registry keeps
        #: it in the URL's state, so a later re-tier finds the item without a scan.
        self.last_slot: tuple[int, int] = (0, 0)

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
        pq = self._partitions.setdefault(partition, _PartitionQueue())
        now = self.clock()
        self._stored_since = stored_since
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
                    state = self._release_adopted(authority, _copy(state), now, stored=True)
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
        inflight, stored_since = state.get("inflight"), self._stored_since
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
            requeued_at = self._push_front(authority, state, inflight)  # the lost fetch, first
        self._settle(state, requeued_at)
        if state.get("robots") == ROBOTS_PENDING:
            # a refresh of known rules keeps them (and is asked again at once)
            refreshing = float(state.get("robots_expires") or 0.0) > 0.0
            state["robots"] = ROBOTS_READY if refreshing else ROBOTS_UNKNOWN
        state["busy"] = 0.0
        state["inflight"] = None
        state["next"] = max(
            float(state.get("next", 0.0)),
            now + self._politeness_wait(state, float(state.get("last_ms", 0.0))),
        )
        self._put(authority, state)
        return state

    def _upgrade(self, authority: str, state: HostState) -> HostState:
        """A host state from before the tiers (one FIFO range of `authority\x00seq`
        keys): its queued URLs move, in order, into the tier each belongs in."""
        state = dict(state)
        head, tail = int(state.pop("head", 0)), int(state.pop("tail", 0))
        state["heads"], state["tails"], state["wrr"] = [0] * TIERS, [0] * TIERS, [0] * TIERS
        state.setdefault("pages", int(state.get("fetched", 0)))
        for seq in range(head, tail):
            item = self.queue.pop(f"{authority}\x00{seq:012d}", None)
            if item is None:
                continue
            tier = tier_for(int(item.get("priority", 0)), int(item.get("depth", 0)))
            at = state["tails"][tier]
            self.queue[queue_key(authority, tier, at)] = {**item, "tier": tier}
            state["tails"][tier] = at + 1
        self._put(authority, state)
        return state

    def knows_partition(self, partition: int) -> bool:
        return partition in self._partitions

    def forget(self, partition: int) -> None:
        """Drop what memory holds of a partition this worker no longer owns (or must
        re-read): its heap, leases and counts. The tables keep the state; the next
        owner, or this worker when the partition comes back, adopts it from them."""
        self._partitions.pop(partition, None)
        self._queued.pop(partition, None)
        self._oldest_lease.pop(partition, None)
        for authority in [a for a, _ in self._busy_hosts(partition)]:
            del self._busy[authority]
            self._started.pop(authority, None)
            self._adopted.pop(authority, None)
            self.in_flight = max(0, self.in_flight - 1)
        for authority in [a for a in self._dirty if self.partition_of(a) == partition]:
            del self._dirty[authority]
        self._rules.clear()  # rebuilt from host states on demand; another owner may refresh
        self._cache.clear()  # the next owner may write them; re-read from the table
        self._holes.clear()  # the next owner makes and fills its own
        if self._lazy:
            # Their items lie at their old keys still, above their tiers' heads (see
            # `_take`): whoever adopts the partition serves them there.
            lazy, moved, partition_of = self._lazy, self._moved, self.partition_of
            for new_key in [k for k in lazy if partition_of(k.split("\x00", 1)[0]) == partition]:
                del moved[lazy.pop(new_key)[1]]

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

    # -- inputs -------------------------------------------------------------------

    def enqueue(
        self,
        url: str,
        depth: int = 0,
        priority: int = 0,
        *,
        inlinks: int = 1,
        kind: str = "page",
        within_budget: bool = True,
    ) -> Decision | None:
        """Append a URL (already canonical and new) to its host's queue, in its tier.

        ``kind`` ("page" or "sitemap") travels with the item to the fetch request.
        Returns the decision not to, when the host is over one of its trap budgets
        (``within_budget`` False: queue it anyway, for a page fetched once already
        whose body was lost on the way to the page store).
        """
        authority = authority_of(url)
        state = self._get(authority)
        if state is None:
            scheme = urlsplit(url).scheme or "http"
            state = {
                "origin": f"{scheme}://{authority}",
                "heads": [0] * TIERS,
                "tails": [0] * TIERS,
                "wrr": [0] * TIERS,
                "pages": 0,
                "next": 0.0,
                "busy": 0.0,
                "inflight": None,
                "robots": ROBOTS_UNKNOWN,
                "robots_body": None,
                "robots_tries": 0,
                "robots_expires": 0.0,
                "errors": 0,
                "last_ms": 0.0,
                "fetched": 0,
            }
        else:
            over = self._over_budget(state) if within_budget else None
            if over is not None:
                return Decision(url, authority, over[0], over[1], depth)
            state = _copy(state)
        tier = tier_for(priority, depth, inlinks)
        tail = int(state["tails"][tier])
        item: QueueItem = {"url": url, "depth": depth, "priority": priority, "tier": tier}
        if kind != "page":  # hook (sitemaps): only non-pages carry it, items stay small
            item["kind"] = kind
        self.queue[queue_key(authority, tier, tail)] = item
        state["tails"][tier] = tail + 1
        self._put(authority, state)
        self._count(authority, 1)
        self.last_slot = (tier, tail)
        if not state["busy"]:
            pq = self._pq(authority)
            self._schedule(pq, authority, max(self.clock(), float(state["next"])))
        return None

    def retier(self, url: str, tier: int, seq: int, new_tier: int) -> tuple[int, int] | None:
        """Move a still-queued URL from slot (tier, seq) of its host's queue to the tail
        of `new_tier` (its in-link count rose); returns the new slot, or None when the
        item is not there any more (dispatched, drained, moved) or would not move up,
        and for a page a 429/503 sent back to the head of its tier (its registry state
        names no slot since, so url-seen asks no move for it).

        The old slot is left empty: a hole in a tier's key range is skipped when the
        head reaches it, so it stays counted (``queued``, ``pending``) until then.
        The move is held in memory (`_lazy`), the item left in the table at its old
        key, unless `lazy_moves` are held already: then it is written, a delete and a put.
        """
        authority = authority_of(url)
        state = self._get(authority)
        if state is None or not 0 <= new_tier < tier < TIERS:
            return None
        if not int(state["heads"][tier]) <= seq < int(state["tails"][tier]):
            return None
        old_key = queue_key(authority, tier, seq)
        lazy = self._lazy
        entry = lazy.get(old_key)
        if entry is not None:
            item, where = entry  # moved before: it still lies at `where` in the table
        elif old_key in self._moved or old_key in self._holes:
            return None  # emptied by a move (its item lies there still if lazy)
        else:
            found = self.queue.get(old_key)
            if found is None:
                return None
            item, where = found, old_key
        if item.get("url") != url or item.get("retries"):
            # another URL's item (never seen), or a page a 429/503 put back at the head
            # of its tier to go first: left where it is
            return None
        state = _copy(state)
        tail = int(state["tails"][new_tier])
        new_key = queue_key(authority, new_tier, tail)
        moved = {**item, "tier": new_tier}
        if entry is not None:
            del lazy[old_key]
            lazy[new_key] = (moved, where)
            self._moved[where] = new_key
        elif len(lazy) < self.lazy_moves:
            lazy[new_key] = (moved, where)
            self._moved[where] = new_key
        else:
            del self.queue[old_key]
            self.queue[new_key] = moved
        state["tails"][new_tier] = tail + 1
        self._put(authority, state)
        self._count(authority, 1)  # the hole, until the head passes it
        self._hole(old_key)
        return new_tier, tail

    def accounts_for(self, url: str, tier: int, seq: int) -> bool:
        """Whether the host's queue, as this frontier serves it, accounts for `url`
        queued in slot (tier, seq) (what the URL registry's ``queued`` state names, and
        its ``fetching`` state, the slot it was served from): the host state knows that
        enqueue (the slot is below its tier's tail) and the slot does not hold another
        URL's item. A slot its head has passed was served; an empty one is a hole a
        move left (a lazy move lost with a restart leaves the item at its old key,
        where it is served).

        False means the enqueue was lost while the registry kept it: after the whole
        cluster went away, recovery replays each table's changelog over the local
        RocksDB, and a host state whose last changelog records never reached the
        broker comes back older than the queue item and the registry state written
        beside it, so the item lies past the tail, where the next enqueue writes
        another URL over it. The frontier message that queued it is read again (its
        offset was never committed), and must queue it again, not drop it as known.
        """
        authority = authority_of(url)
        state = self._get(authority)
        if state is None or not 0 <= tier < TIERS or "tails" not in state:
            return False
        if seq >= int(state["tails"][tier]):
            return False  # the host state never heard of that enqueue
        key = queue_key(authority, tier, seq)
        if seq < int(state["heads"][tier]):
            # served (dispatched, decided or skipped) already; but a dispatched item
            # stays until its fetch ends, and one of another URL there took the slot
            # after the host state came back older
            item = self.queue.get(key)
            return item is None or item.get("url") == url
        entry = self._lazy.get(key)
        if entry is not None:
            return entry[0].get("url") == url
        if key in self._moved or key in self._holes:
            return True  # this frontier moved the item on from here
        item = self.queue.get(key)
        return item is None or item.get("url") == url

    def complete(
        self,
        host: str,
        kind: str,
        status: int,
        outcome: str,
        elapsed_ms: float,
        finished_at: float,
        retry_after: float | None = None,
        body: bytes | None = None,
        dispatched_at: float = 0.0,
    ) -> list[Decision]:
        """Release a host after its fetch finished, and set when it may be asked again.

        ``dispatched_at`` names the dispatch the fetch answered (0: not said); the
        completion of an earlier dispatch must not release the host while the current
        one is in flight.
        """
        state = self._get(host)
        if state is None or not state.get("busy"):
            return []  # a late duplicate completion (lease expired and re-dispatched)
        if dispatched_at and float(state["busy"]) != dispatched_at:
            return []  # the answer to a dispatch before the one in flight now
        state = _copy(state)
        self._busy.pop(host, None)
        self._started.pop(host, None)
        if self._adopted.pop(host, None) is not None:
            self.adopted_completed += 1  # the fetch in flight at the adoption: done once
        self.in_flight = max(0, self.in_flight - 1)
        inflight: QueueItem = state.get("inflight") or {}
        state_url = str(inflight.get("url") or f"{state['origin']}/robots.txt")
        state_depth = int(inflight.get("depth", 0))
        state["busy"] = 0.0
        state["inflight"] = None
        state["last_ms"] = elapsed_ms
        decisions: list[Decision] = []
        connection_failed = status == 0
        throttled = status in (429, 503) and kind == "page"
        if not throttled:
            self._settle(state)  # (before a drain, which would read the item again)
        if kind == "robots":
            # Apply the new rules first: the robots.txt fetch was a request to the host
            # too, so its own Crawl-delay already spaces the first page from it.
            retry = self._robots_done(state, status, body, finished_at)
            wait = max(self._politeness_wait(state, elapsed_ms), retry)
            if state["robots"] == ROBOTS_UNAVAILABLE:
                decisions.extend(
                    self._drain(host, state, "robots-unavailable", "robots.txt unreachable")
                )
        else:
            wait = self._politeness_wait(state, elapsed_ms)
            state["fetched"] = int(state.get("fetched", 0)) + 1
            if connection_failed:
                state["errors"] = int(state.get("errors", 0)) + 1
                wait = max(wait, min(MAX_ERROR_BACKOFF, 2.0 ** state["errors"]))
                if state["errors"] >= PARK_AFTER_ERRORS:
                    decisions.extend(
                        self._drain(
                            host, state, "host-parked", f"{state['errors']} errors in a row"
                        )
                    )
            else:
                state["errors"] = 0
        if throttled:
            if retry_after is not None:
                wait = max(wait, min(retry_after, MAX_ERROR_BACKOFF))
            decision, requeued_at = self._retry_later(
                host, state, inflight, status, retry_after, wait
            )
            decisions.append(decision)
            self._settle(state, requeued_at)
        elif connection_failed and kind == "page" and state["errors"] < PARK_AFTER_ERRORS:
            decisions.append(
                Decision(
                    state_url,
                    host,
                    "backoff",
                    f"{state['errors']} connection errors in a row: host waits {wait:g} s",
                    state_depth,
                )
            )
        state["next"] = finished_at + wait
        self._put(host, state)
        if self._has_work(state):
            self._schedule(self._pq(host), host, max(self.clock(), state["next"]))
        return decisions

    # -- output -------------------------------------------------------------------

    def due(self, partition: int) -> tuple[list[Dispatch], list[Decision]]:
        """Every fetch that may start now in one partition: at most one per host."""
        pq = self._partitions.setdefault(partition, _PartitionQueue())
        now = self.clock()
        dispatches: list[Dispatch] = []
        decisions: list[Decision] = []
        while pq.heap and pq.heap[0][0] <= now:
            wake, authority = heapq.heappop(pq.heap)
            if pq.scheduled.get(authority) != wake:
                continue  # stale heap entry
            del pq.scheduled[authority]
            state = self._get(authority)
            if state is None:
                continue
            if state.get("busy"):
                deadline = self._adopted.get(authority)
                if deadline is None:
                    continue
                if deadline > now:
                    self._schedule(pq, authority, deadline)
                    continue
                # the grace for the completion of the fetch in flight at the adoption
                # ran out: that fetch is lost (`adopt`)
                self._busy.pop(authority, None)
                self._started.pop(authority, None)
                self.in_flight = max(0, self.in_flight - 1)
                stored = self._stored_already(state)
                state = self._release_adopted(authority, _copy(state), now, stored=stored)
            if float(state.get("next", 0.0)) > now:
                self._schedule(pq, authority, float(state["next"]))
                continue
            dispatch = self._next_fetch(authority, _copy(state), now, decisions)
            if dispatch is not None:
                dispatches.append(dispatch)
        return dispatches, decisions

    def expire_leases(self, partition: int) -> list[Dispatch]:
        """Re-dispatch fetches whose completion never came (a lost message, a dead task)."""
        now = self.clock()
        lease = self.policy.fetch_lease
        oldest = self._oldest_lease.get(partition)
        if oldest is None or now - oldest < lease:
            return []  # no lease of the partition can have run out (see _note_lease)
        again: list[Dispatch] = []
        oldest = math.inf
        for authority, state in list(self._busy_hosts(partition)):
            busy = float(state["busy"])
            if now - busy < lease:
                oldest = min(oldest, busy)
                continue
            item = state.get("inflight") or {}
            kind = "robots" if state.get("robots") == ROBOTS_PENDING else item.get("kind", "page")
            url = item.get("url") or f"{state['origin']}/robots.txt"
            state = _copy(state)
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

    def next_wake(self, partition: int) -> float | None:
        pq = self._partitions.get(partition)
        if pq is None or not pq.heap:
            return None
        return pq.heap[0][0]

    def partitions(self) -> list[int]:
        return list(self._partitions)

    def budget_exhausted(self) -> bool:
        return bool(self.policy.max_pages) and self.pages_dispatched >= self.policy.max_pages

    def busiest_hosts(self, n: int = 10, scan: int = 5000) -> list[dict[str, Any]]:
        """The `n` hosts with the longest queues and when each may next be asked, for
        the dashboard. Only hosts with work or a fetch in flight are looked at (at most
        `scan` of them: one state read each), so a big crawl's answer is a sample."""
        seen: set[str] = set()
        rows: list[dict[str, Any]] = []
        candidates = [*self._busy]
        for pq in self._partitions.values():
            candidates.extend(pq.scheduled)
        for authority in candidates:
            if authority in seen or len(seen) >= scan:
                continue
            seen.add(authority)
            state = self._get(authority)
            if state is None:
                continue
            rows.append(
                {
                    "host": authority,
                    "queued": pending(state),
                    "next_at": float(state.get("next", 0.0)),
                    "busy": bool(state.get("busy")),
                    "fetched": int(state.get("fetched", 0)),
                }
            )
        return heapq.nlargest(n, rows, key=lambda row: (row["queued"], -row["next_at"]))

    # -- internals ----------------------------------------------------------------

    def _pq(self, authority: str) -> _PartitionQueue:
        return self._partitions.setdefault(self.partition_of(authority), _PartitionQueue())

    def _schedule(self, pq: _PartitionQueue, authority: str, at: float) -> None:
        current = pq.scheduled.get(authority)
        if current is not None and current <= at:
            return
        pq.scheduled[authority] = at
        heapq.heappush(pq.heap, (at, authority))

    def _has_work(self, state: HostState) -> bool:
        return pending(state) > 0

    def _over_budget(self, state: HostState) -> tuple[str, str] | None:
        """(outcome, reason) when a host may take no more URLs: a trap budget is spent."""
        policy = self.policy
        if policy.max_host_pages and int(state.get("pages", 0)) >= policy.max_host_pages:
            return "host-budget", f"host page budget of {policy.max_host_pages} spent"
        if policy.max_host_queue and pending(state) >= policy.max_host_queue:
            return "host-queue-full", f"{policy.max_host_queue} URLs already queued for the host"
        return None

    def _push_front(self, authority: str, state: HostState, item: QueueItem) -> str:
        """Put an item back at the head of its tier (a lost or throttled fetch goes
        first); returns its queue key."""
        tier = min(TIERS - 1, max(0, int(item.get("tier", TIERS - 1))))
        head = int(state["heads"][tier]) - 1
        key = queue_key(authority, tier, head)
        self.queue[key] = item
        state["heads"][tier] = head
        self._count(authority, 1)
        return key

    def _pop_next(
        self, authority: str, state: HostState
    ) -> tuple[QueueItem | None, str, tuple[int, int]]:
        """The host's next URL, from the tier smooth weighted round robin picks, the
        queue key where its item lies still, and the slot (tier, sequence) its head
        passed: the item is left in ``queue`` (see `_mark_busy`), the caller deletes
        it (`_unqueue`) unless it dispatches it.

        Each non-empty tier earns its weight; the richest is served and pays the sum
        of the weights in play. Over any run the tiers are served in proportion to
        their weights (8:4:2:1 of 15), and a lower tier waits at most one cycle.
        """
        heads, tails, credit = state["heads"], state["tails"], state["wrr"]
        best, total = -1, 0
        for tier in range(TIERS):
            if int(tails[tier]) > int(heads[tier]):
                credit[tier] += TIER_WEIGHTS[tier]
                total += TIER_WEIGHTS[tier]
                if best < 0 or credit[tier] > credit[best]:
                    best = tier
            else:
                credit[tier] = 0  # an empty tier neither saves up nor owes
        if best < 0:
            return None, "", (0, 0)
        credit[best] -= total
        seq = int(heads[best])
        heads[best] = seq + 1
        self._count(authority, -1)
        item, key = self._take(queue_key(authority, best, seq), keep=True)
        return item, key, (best, seq)

    def _take(self, key: str, keep: bool = False) -> tuple[QueueItem | None, str]:
        """Pop a queue item; a hole this frontier made is skipped without a read.
        Returns the item and the key where it lies in ``queue``: with ``keep`` it is
        left there (`_pop_next`), else deleted (and the key is "").

        A lazy move's item comes from memory, and its old key is deleted (the one
        write a pop here would cost). When the old tier's head reaches the old key of
        a lazy move still waiting, the move is written out first (the item put at its
        new key, the old key deleted): after a restart the item must be where the
        table says, above its tier's head, or it would never be served."""
        lazy = self._lazy
        if lazy:
            entry = lazy.pop(key, None)
            if entry is not None:
                item, where = entry
                del self._moved[where]
                if not keep:
                    del self.queue[where]
                    return item, ""
                # still in its old tier, above that tier's head: when the head gets
                # there, or a re-tier asks for it, it is not there for this frontier
                self._hole(where)
                return item, where
            new_key = self._moved.pop(key, None)
            if new_key is not None:
                item, _ = lazy.pop(new_key)
                self.queue[new_key] = item
                del self.queue[key]
                self._holes.discard(key)
                self.moves_materialized += 1
                return None, ""
        holes = self._holes
        if key in holes:
            holes.discard(key)
            return None, ""
        if keep:
            found = self.queue.get(key)
            return found, key if found is not None else ""
        return self.queue.pop(key, None), ""

    def _hole(self, key: str) -> None:
        holes = self._holes
        if len(holes) >= HOLES_SIZE:
            holes.clear()  # those are read when the head gets there, as before
        holes.add(key)

    def _unqueue(self, key: str) -> None:
        """Delete a queue item `_pop_next` left in place."""
        if key:
            with contextlib.suppress(KeyError):  # (a table recovered without it)
                del self.queue[key]

    def _settle(self, state: HostState, requeued_at: str = "") -> None:
        """The host's fetch in flight is over: delete its queue item, left in ``queue``
        since the dispatch (`_mark_busy`), unless `requeued_at` is that very key (the
        page went back to the head of its tier, where it was: `_push_front`)."""
        key = state.pop("inflight_key", None)
        if key and key != requeued_at:
            self._unqueue(str(key))

    def _busy_hosts(self, partition: int) -> Iterable[tuple[str, HostState]]:
        for authority, state in self._busy.items():
            if self.partition_of(authority) == partition:
                yield authority, state

    def _politeness_wait(self, state: HostState, elapsed_ms: float) -> float:
        wait = self.policy.delay
        rules = self._rules_for(state)
        if rules is not None:
            crawl_delay = rules.crawl_delay(self.policy.user_agent)
            if crawl_delay:
                wait = max(wait, min(float(crawl_delay), self.policy.max_crawl_delay))
        if self.policy.response_time_factor:
            wait = max(wait, self.policy.response_time_factor * elapsed_ms / 1000.0)
        return wait

    def _robots_done(
        self, state: HostState, status: int, body: bytes | None, finished_at: float
    ) -> float:
        """Apply RFC 9309 to a robots.txt answer; returns extra wait before the next try."""
        self._rules.pop(state["origin"], None)
        if 300 <= status < 400:
            status = 0  # a redirect the fetcher could not resolve: unreachable
        if 200 <= status < 500:
            state["robots"] = ROBOTS_READY
            # 4xx: robots.txt is unavailable, which means allow all
            state["robots_body"] = (body or b"").decode("utf-8", "replace") if status < 300 else ""
            state["robots_tries"] = 0
            state["robots_expires"] = finished_at + self.policy.robots_ttl
            return 0.0
        # 5xx, 3xx left unresolved, or a connection failure: retry later, and until then
        # disallow — unless this was the refresh of rules we have, which stay in force
        # (RFC 9309 2.4: a cached copy may outlive 24 hours while robots.txt is unreachable).
        tries = int(state.get("robots_tries", 0)) + 1
        state["robots_tries"] = tries
        backoff = self.policy.robots_retry * (2 ** (tries - 1))
        if float(state.get("robots_expires") or 0.0) > 0.0:
            state["robots"] = ROBOTS_READY
            state["robots_expires"] = finished_at + min(backoff, self.policy.robots_ttl)
            return 0.0
        if tries >= ROBOTS_MAX_TRIES:
            state["robots"] = ROBOTS_UNAVAILABLE
            return 0.0
        state["robots"] = ROBOTS_UNKNOWN
        return backoff

    def _retry_later(
        self,
        host: str,
        state: HostState,
        item: QueueItem,
        status: int,
        retry_after: float | None,
        wait: float,
    ) -> tuple[Decision, str]:
        """A 429/503 means "not now", not "no": the page goes back to the head of its
        host's queue (a few times at most, and only for a short wait), and the crawl log
        says how long the host waits. Returns the decision and the queue key the page
        went back to ("" if given up)."""
        told = f", Retry-After {retry_after:g} s" if retry_after is not None else ""
        why = f"HTTP {status}{told}: host waits {wait:g} s"
        retries = int(item.get("retries", 0)) + 1
        url, depth = str(item.get("url", "")), int(item.get("depth", 0))
        if not item or retries > MAX_RETRIES or wait > self.policy.max_retry_wait:
            return Decision(url, host, "backoff", f"{why}, page given up", depth), ""
        again = dict(item)
        again["retries"] = retries
        requeued_at = self._push_front(host, state, again)
        return (
            Decision(
                url,
                host,
                "backoff",
                f"{why}, page retried ({retries}/{MAX_RETRIES})",
                depth,
                requeued=True,
            ),
            requeued_at,
        )

    def _rules_for(self, state: HostState) -> RobotsRules | None:
        if state.get("robots") != ROBOTS_READY:
            return None
        origin = state["origin"]
        rules = self._rules.get(origin)
        if rules is None:
            body = state.get("robots_body") or ""
            rules = RobotsRules.parse(body) if body else RobotsRules.allow_all()
            self._rules[origin] = rules
        return rules

    def _drain(self, host: str, state: HostState, outcome: str, reason: str) -> list[Decision]:
        """Decide every URL queued for a host (parked, robots.txt unreachable, page
        budget spent). Moves held in memory are settled on the way (`_take`): the
        tiers go highest first, so a move's new key comes before its old one."""
        decisions = []
        for tier in range(TIERS):
            head, tail = int(state["heads"][tier]), int(state["tails"][tier])
            for seq in range(head, tail):
                item, _ = self._take(queue_key(host, tier, seq))
                if item:
                    decisions.append(
                        Decision(item["url"], host, outcome, reason, int(item["depth"]))
                    )
            self._count(host, head - tail)
            state["heads"][tier] = tail
        return decisions

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

    def _next_fetch(
        self, authority: str, state: HostState, now: float, decisions: list[Decision]
    ) -> Dispatch | None:
        if self.budget_exhausted():
            return None  # not even robots.txt: a host beyond the budget is never contacted
        robots = state.get("robots")
        if robots == ROBOTS_READY and float(state.get("robots_expires") or 0.0) <= now:
            robots = ROBOTS_UNKNOWN  # the rules expired: ask again before the next page
        if robots == ROBOTS_UNKNOWN:
            state["robots"] = ROBOTS_PENDING
            self._mark_busy(authority, state, now, None)
            return Dispatch(f"{state['origin']}/robots.txt", authority, "robots", 0, now)
        if robots == ROBOTS_UNAVAILABLE:
            decisions.extend(
                self._drain(authority, state, "robots-unavailable", "robots.txt unreachable")
            )
            self._put(authority, state)
            return None
        rules = self._rules_for(state)
        while self._has_work(state):
            if self.budget_exhausted():
                self._put(authority, state)
                return None  # leave the queue for a later run with a bigger budget
            over = self._over_budget(state)
            if over is not None and over[0] == "host-budget":
                decisions.extend(self._drain(authority, state, *over))
                break
            item, key, slot = self._pop_next(authority, state)
            if item is None:
                continue
            if rules is not None and not rules.allowed(item["url"], self.policy.user_agent):
                self._unqueue(key)
                decisions.append(
                    Decision(
                        item["url"],
                        authority,
                        "robots-disallowed",
                        "disallowed by robots.txt",
                        int(item["depth"]),
                    )
                )
                continue
            self.pages_dispatched += 1
            state["pages"] = int(state.get("pages", 0)) + 1
            self._mark_busy(authority, state, now, item, key)
            kind = item.get("kind", "page")  # hook (sitemaps)
            return Dispatch(item["url"], authority, kind, int(item["depth"]), now, slot)
        self._put(authority, state)
        return None
