"""The body hand-off: parse keeps each page's body in memory for link-extract.

Why: a page's body (~8 KB of HTML, most of every message about it) used to cross the
broker four times: fetch → parse, parse → content-dedup, each simhash band hop, and
content-dedup → link-extract. Only link-extract needs it again (to store the page),
and parse and link-extract are both keyed by host with the same partition count, so
Faust's assignor gives partition N of both topics to the same worker. parse puts the
body here and sends the rest of the parsed page on (with its payload digest and
length); link-extract takes the body back by (URL, payload digest).

The key cannot confuse two fetches of a URL: a refetch with other bytes has another
digest, and one with the same bytes needs only the same bytes.

When link-extract does not find a body (a rebalance moved the partition between
parse and link-extract, or the worker restarted), the page is fetched again
(streams/stages/link_extract.py): nothing is lost, it costs a fetch.

The bound is in bytes of body. A full cache does not push out bodies link-extract is
still to take (under a backlog parse can run far ahead of link-extract, and every
body pushed out would be a refetch): it evicts only entries older than ``max_age``
seconds (stale ones: a page whose parsed message went to another worker after a
rebalance, or to the dead letters, is never taken here), and when that frees too
little, `put` refuses and parse sends that body inline, as before the hand-off.

Pure and synchronous (one worker's event loop is its only user): no Kafka here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

#: What an entry costs besides its body (key strings, the dict slot, the bytes header):
#: counted so a flood of tiny bodies is bounded too.
ENTRY_OVERHEAD = 200


@dataclass
class HandoffStats:
    """Counters for the worker's stats and the crawl summary."""

    put: int = 0
    taken: int = 0
    #: Bodies refused because the cache was full of younger entries (sent inline).
    refused: int = 0
    #: Entries older than max_age dropped to make room (never taken here).
    evicted: int = 0
    #: Entries dropped because link-extract did not need the body (a duplicate, the
    #: same capture read again).
    discarded: int = 0
    #: Bodies link-extract asked for and did not find (each such page is fetched again).
    missed: int = 0


#: Hand-off refetches a cache remembers (`HandoffCache.note_refetch`).
RECENT_REFETCHES = 1 << 14


class HandoffCache:
    """Bodies by (URL, payload digest), bounded in bytes.

    ``max_bytes`` 0 disables it: `enabled` is False and parse sends bodies inline, as
    before the hand-off existed. ``max_age``: seconds after which an entry not taken
    yet may be evicted to make room for a new one.
    """

    def __init__(
        self,
        max_bytes: int,
        max_age: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"hand-off cache bound must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        #: (URL, digest) -> (body, when put); oldest first
        self._entries: OrderedDict[tuple[str, str], tuple[bytes, float]] = OrderedDict()
        self._bytes = 0
        self.stats = HandoffStats()
        #: URL -> fetch time of the capture a miss here is fetching again (at most
        #: RECENT_REFETCHES): see `refetching`
        self._refetching: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held, counting each entry's overhead."""
        return self._bytes

    def put(self, url: str, digest: str, body: bytes) -> bool:
        """Keep `body` for link-extract; False when it cannot be kept (the cache is off,
        or full of entries younger than max_age): the caller then sends it inline."""
        cost = len(body) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            if self.enabled:
                self.stats.refused += 1
            return False
        key = (url, digest)
        if key in self._entries:  # the same page parsed twice (redelivered): one entry
            self._entries[key] = (body, self.clock())
            self._entries.move_to_end(key)
            return True
        if self._bytes + cost > self.max_bytes:
            self._evict_old(self._bytes + cost - self.max_bytes)
            if self._bytes + cost > self.max_bytes:
                self.stats.refused += 1
                return False
        self._entries[key] = (body, self.clock())
        self._bytes += cost
        self.stats.put += 1
        return True

    def _evict_old(self, needed: int) -> None:
        """Drop entries older than max_age, oldest first, until `needed` bytes are free."""
        horizon = self.clock() - self.max_age
        entries = self._entries
        freed = 0
        while entries and freed < needed:
            key, (body, at) = next(iter(entries.items()))
            if at > horizon:
                break
            del entries[key]
            cost = len(body) + ENTRY_OVERHEAD
            self._bytes -= cost
            freed += cost
            self.stats.evicted += 1

    def take(self, url: str, digest: str) -> bytes | None:
        """The body parse kept for this page, removed from the cache; None (counted as a
        miss) when it is not here."""
        entry = self._entries.pop((url, digest), None)
        if entry is None:
            self.stats.missed += 1
            return None
        self._bytes -= len(entry[0]) + ENTRY_OVERHEAD
        self.stats.taken += 1
        return entry[0]

    def peek(self, url: str, digest: str) -> bytes | None:
        """The body if held, left in place (for a dead letter that must keep it)."""
        entry = self._entries.get((url, digest))
        return None if entry is None else entry[0]

    def discard(self, url: str, digest: str) -> None:
        """Forget a body link-extract does not need (a duplicate; a capture stored already)."""
        entry = self._entries.pop((url, digest), None)
        if entry is not None:
            self._bytes -= len(entry[0]) + ENTRY_OVERHEAD
            self.stats.discarded += 1

    def note_refetch(self, url: str, fetched_at: float) -> None:
        """A miss of the capture fetched at `fetched_at` is being fetched again."""
        if len(self._refetching) >= RECENT_REFETCHES:
            self._refetching.clear()  # a bound, not an LRU: misses come after restarts
        self._refetching[url] = fetched_at

    def refetching(self, url: str) -> float | None:
        """The fetch time of the capture a refetch of `url` replaces (None: no refetch
        of it is known here), forgotten once asked: when that capture got stored
        meanwhile (its fetch result read again after the miss), the refetch's page is
        nothing new, not a revisit to record."""
        return self._refetching.pop(url, None)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
