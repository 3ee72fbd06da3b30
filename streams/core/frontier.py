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

The frontier is built in layers, one module each, every layer on the one below:

* `streams.core.frontier_model`: host state and queue item shapes, queue keys,
  tiers, `Politeness`, `Dispatch`, `Decision` (re-exported here);
* `streams.core.frontier_robots`: robots.txt rules and the politeness wait;
* `streams.core.frontier_store`: the tables, the host-state cache and write-back,
  the per-partition wake-up heaps and counts (`HostStore`);
* `streams.core.frontier_queues`: the tiered queues, holes and lazy re-tier moves
  (`TieredQueues`);
* `streams.core.frontier_leases`: busy hosts, leases, adoption after a rebalance,
  and claims (`Leases`);
* here: `Frontier`, which queues new URLs, applies completions and makes fetches due.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from streams.core.frontier_leases import Leases
from streams.core.frontier_model import (
    FETCHED_ALREADY,
    MAX_ERROR_BACKOFF,
    MAX_RETRIES,
    PARK_AFTER_ERRORS,
    ROBOTS_MAX_TRIES,
    ROBOTS_PENDING,
    ROBOTS_READY,
    ROBOTS_UNAVAILABLE,
    ROBOTS_UNKNOWN,
    TIER_WEIGHTS,
    TIERS,
    Decision,
    Dispatch,
    HostState,
    PartitionQueue,
    Politeness,
    QueueItem,
    authority_of,
    copy_state,
    pending,
    queue_key,
    tier_for,
    tried,
)
from streams.core.frontier_queues import LAZY_MOVES

__all__ = [
    "FETCHED_ALREADY",
    "LAZY_MOVES",
    "MAX_ERROR_BACKOFF",
    "MAX_RETRIES",
    "PARK_AFTER_ERRORS",
    "ROBOTS_MAX_TRIES",
    "ROBOTS_PENDING",
    "ROBOTS_READY",
    "ROBOTS_UNAVAILABLE",
    "ROBOTS_UNKNOWN",
    "TIERS",
    "TIER_WEIGHTS",
    "Decision",
    "Dispatch",
    "Frontier",
    "HostState",
    "Politeness",
    "QueueItem",
    "authority_of",
    "pending",
    "queue_key",
    "tier_for",
]

#: Page URLs a frontier remembers having dispatched (`Frontier._dispatched`): ~100 bytes
#: each, so at most ~7 MB.
RECENT_DISPATCHES = 1 << 16


class Frontier(Leases):
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
        super().__init__(hosts, queue, policy, partition_of, clock, write_back, lazy_moves)
        self.pages_dispatched = 0
        #: `fetched_already(url)`: does a page store hold a capture of `url`? Asked of
        #: each page queued without ``again`` when its turn comes (`enqueue`); None:
        #: not asked. (Not the URL registry's state: a fetch recorded there whose
        #: page never reached the store, its parse message lost with the broker, must
        #: be fetched again, or its links are never followed.)
        self.fetched_already: Callable[[str], bool] | None = None
        #: Pages this frontier dispatched, with the time of their last dispatch (at
        #: most RECENT_DISPATCHES, then forgotten): a second copy of one in its host's
        #: queue is not fetched, even before the first copy's page reaches a store (a
        #: restarted worker fetched one URL twice 167 ms apart so); nor is a second
        #: copy of a hand-off refetch once one went (`_done_already`). A lost fetch
        #: done again is marked ``again`` and ``tried`` (`frontier_model.tried`).
        self._dispatched: dict[str, float] = {}
        #: (tier, sequence) of the URL the last enqueue() queued: the URL registry keeps
        #: it in the URL's state, so a later re-tier finds the item without a scan.
        self.last_slot: tuple[int, int] = (0, 0)

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
        unless_stored_since: float | None = None,
        again: bool = False,
    ) -> Decision | None:
        """Append a URL (already canonical and new) to its host's queue, in its tier.

        ``kind`` ("page" or "sitemap") travels with the item to the fetch request.
        Returns the decision not to, when the host is over one of its trap budgets
        (``within_budget`` False: queue it anyway, for a page fetched once already
        whose body was lost on the way to the page store).

        ``unless_stored_since`` (a time): when its turn comes, the URL is not fetched
        if a page store holds a capture of it fetched at or after that time (the
        frontier's `stored_since`), and a ``fetched-already`` decision is logged: a
        refetch after a hand-off miss whose capture another path stored meanwhile.

        ``again``: a page to fetch again (a recrawl, a re-feed, a resume). Any other
        page is not fetched when its turn comes if a page store holds it (the
        frontier's `fetched_already`): a second copy of a URL in its host's queue,
        after a kill kept the queue's record of it and lost the registry's.
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
            state = copy_state(state)
        tier = tier_for(priority, depth, inlinks)
        tail = int(state["tails"][tier])
        item: QueueItem = {"url": url, "depth": depth, "priority": priority, "tier": tier}
        if kind != "page":  # hook (sitemaps): only non-pages carry it, items stay small
            item["kind"] = kind
        if unless_stored_since is not None:
            item["unless_stored"] = unless_stored_since
        if again:
            item["again"] = 1
        self.queue[queue_key(authority, tier, tail)] = item
        state["tails"][tier] = tail + 1
        self._put(authority, state)
        self._count(authority, 1)
        self.last_slot = (tier, tail)
        if not state["busy"]:
            pq = self._pq(authority)
            self._schedule(pq, authority, max(self.clock(), float(state["next"])))
        return None

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
        reason: str = "",
    ) -> list[Decision]:
        """Release a host after its fetch finished, and set when it may be asked again.

        A robots.txt fetch the address guard refused (outcome "blocked": a private or
        loopback address without --allow-private) ends the host at once: asking again
        cannot help, and its URLs are logged as blocked with the guard's reason.

        ``dispatched_at`` names the dispatch the fetch answered (0: not said); the
        completion of an earlier dispatch must not release the host while the current
        one is in flight.
        """
        state = self._get(host)
        if state is None or not state.get("busy"):
            return []  # a late duplicate completion (lease expired and re-dispatched)
        if dispatched_at and float(state["busy"]) != dispatched_at:
            return []  # the answer to a dispatch before the one in flight now
        state = copy_state(state)
        self._busy.pop(host, None)
        self._started.pop(host, None)
        if self._adopted.pop(host, None) is not None:
            self.adopted_completed += 1  # the fetch in flight at the adoption: done once
        self.in_flight = max(0, self.in_flight - 1)
        inflight: QueueItem = state.get("inflight") or {}
        busy_since = float(state["busy"])
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
        if kind == "robots" and outcome == "blocked":
            state["robots"] = ROBOTS_UNAVAILABLE
            state["blocked"] = (reason or "address refused by the guard")[:300]
            wait = 0.0
            decisions.extend(self._drain(host, state, "blocked", state["blocked"]))
        elif kind == "robots":
            # Apply the new rules first: the robots.txt fetch was a request to the host
            # too, so its own Crawl-delay already spaces the first page from it.
            retry = self._robots.answered(state, status, body, finished_at)
            wait = max(self._robots.politeness_wait(state, elapsed_ms), retry)
            if state["robots"] == ROBOTS_UNAVAILABLE:
                decisions.extend(
                    self._drain(host, state, "robots-unavailable", "robots.txt unreachable")
                )
        else:
            wait = self._robots.politeness_wait(state, elapsed_ms)
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
            retried = tried(inflight, busy_since) if inflight else inflight
            decision, requeued_at = self._retry_later(
                host, state, retried, status, retry_after, wait
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
        pq = self._partitions.setdefault(partition, PartitionQueue())
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
                state = self._release_adopted(authority, copy_state(state), now, stored=stored)
            if float(state.get("next", 0.0)) > now:
                self._schedule(pq, authority, float(state["next"]))
                continue
            dispatch = self._next_fetch(authority, copy_state(state), now, decisions)
            if dispatch is not None:
                dispatches.append(dispatch)
        return dispatches, decisions

    def _done_already(self, item: QueueItem) -> str:
        """Why a queued page is not fetched ("": it is): a refetch whose capture got
        stored meanwhile, or a page not marked ``again`` that a page store holds (see
        `enqueue`)."""
        if item.get("kind", "page") != "page":
            return ""
        since = item.get("unless_stored")
        if since is not None:
            url = str(item["url"])
            stored_since = self.stored_since
            if stored_since is not None and stored_since(url, float(since)):
                return f"a capture fetched at or after {float(since):.3f} is stored"
            # Link-extract re-feeds a URL each time it reads the message again (a
            # restarted worker read one six times): once a copy went, the others wait
            # for nothing but a second fetch of the page.
            went = self._dispatched.get(url)
            if went is not None and went >= float(since) and went > float(item.get("tried", -1)):
                return f"refetched already at {went:.3f}: another copy of this refetch"
            return ""
        if item.get("again"):
            return ""
        if item["url"] in self._dispatched:
            return "dispatched already: a second copy in the host's queue"
        fetched_already = self.fetched_already
        if fetched_already is None:
            return ""
        if fetched_already(str(item["url"])):
            return "stored already: a second copy in the host's queue"
        return ""

    def _refetch_hold(self, item: QueueItem) -> float:
        """When a hand-off refetch may go: `Politeness.refetch_hold` after the fetch of
        the capture it replaces (0.0 for any other item)."""
        since = item.get("unless_stored")
        if not since or item.get("kind", "page") != "page":
            return 0.0
        return float(since) + self.policy.refetch_hold

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

    def _over_budget(self, state: HostState) -> tuple[str, str] | None:
        """(outcome, reason) when a host may take no more URLs: a trap budget is spent."""
        policy = self.policy
        if policy.max_host_pages and int(state.get("pages", 0)) >= policy.max_host_pages:
            return "host-budget", f"host page budget of {policy.max_host_pages} spent"
        if policy.max_host_queue and pending(state) >= policy.max_host_queue:
            return "host-queue-full", f"{policy.max_host_queue} URLs already queued for the host"
        return None

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
            blocked = state.get("blocked")
            decisions.extend(
                self._drain(authority, state, "blocked", str(blocked))
                if blocked
                else self._drain(authority, state, "robots-unavailable", "robots.txt unreachable")
            )
            self._put(authority, state)
            return None
        rules = self._robots.rules_for(state)
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
            why = self._done_already(item)
            if why:
                self._unqueue(key)
                depth = int(item["depth"])
                decisions.append(Decision(item["url"], authority, FETCHED_ALREADY, why, depth))
                continue
            hold = self._refetch_hold(item)
            if hold > now:
                # back to the head of its tier; the host waits for it (`refetch_hold`)
                if self._push_front(authority, state, item) != key:
                    self._unqueue(key)  # it lay elsewhere: a lazy re-tier move's old key
                state["next"] = max(float(state.get("next", 0.0)), hold)
                self._schedule(self._pq(authority), authority, hold)
                break
            self.pages_dispatched += 1
            state["pages"] = int(state.get("pages", 0)) + 1
            self._mark_busy(authority, state, now, item, key)
            kind = item.get("kind", "page")  # hook (sitemaps)
            if kind == "page":
                dispatched = self._dispatched
                if len(dispatched) >= RECENT_DISPATCHES:
                    dispatched.clear()  # cheaper than LRU bookkeeping on the hot path
                dispatched[item["url"]] = now
            return Dispatch(item["url"], authority, kind, int(item["depth"]), now, slot)
        self._put(authority, state)
        return None
