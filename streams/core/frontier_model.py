"""The frontier's vocabulary: host states, queue keys, tiers, and its policy and results.

What every part of the frontier (`streams.core.frontier` and the modules it is built
from) and its callers share: the shapes of the two tables' values, the key of a queue
slot, the front tier of a URL, the politeness knobs (`Politeness`) and what the
frontier hands out (`Dispatch`, `Decision`). Plain functions and dataclasses, kept
apart from the `Frontier` class so that its parts can import them without a cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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


def tried(item: QueueItem, dispatched_at: float) -> QueueItem:
    """A dispatched item going back to its queue (a lost or throttled fetch): a
    hand-off refetch is stamped with its dispatch, which was this copy's own, so it
    does not count as another copy of the refetch having gone
    (`Frontier._done_already`). Other items stay as they are (small)."""
    if "unless_stored" not in item:
        return item
    return {**item, "tried": dispatched_at}


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
    """URLs queued for a host, over all its tiers: the slots between heads and tails,
    less the holes a re-tier left in them (``holes``; skipped when a head gets there).

    Asked for every dispatch and enqueue: two C-level sums, not a generator of
    per-tier differences (half the cost; the same answer, as each count is an int)."""
    heads, tails = state["heads"], state["tails"]
    if len(heads) != len(tails):
        raise ValueError(f"a host state with {len(heads)} heads and {len(tails)} tails")
    return sum(map(int, tails)) - sum(map(int, heads)) - int(state.get("holes", 0))


def copy_state(state: HostState) -> HostState:
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
    #: Seconds after a capture's fetch before the refetch of a hand-off miss of it may
    #: go (`Frontier.enqueue`'s ``unless_stored_since``): after a restart or a
    #: rebalance the fetch result that carried its body is often read again by the
    #: worker and stores that very capture a moment later; fetched at once, the refetch
    #: stored the page a second time. A consumer group adds its session timeout
    #: (`streams.app.refetch_hold`).
    refetch_hold: float = 10.0


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


#: The outcome of a queued refetch not done: a capture of it was stored meanwhile.
FETCHED_ALREADY = "fetched-already"


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
class PartitionQueue:
    """A partition's hosts with work, in a heap by the time each may next be asked."""

    heap: list[tuple[float, str]] = field(default_factory=list)
    scheduled: dict[str, float] = field(default_factory=dict)
