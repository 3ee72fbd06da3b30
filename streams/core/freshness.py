"""Freshness: when to fetch a URL again, from how often it was seen to change.

Pure logic (no Kafka), over one mapping ``records`` (URL → revisit record; a plain
dict in unit tests, the ``revisits`` Faust table in the crawl, written only while
handling an event of the URL's host partition, so the table follows the host):

* every fetched page gets a record: its content fingerprint, its validators (ETag,
  Last-Modified) for a conditional GET next time, and a revisit *interval*;
* when a revisit finds the content changed, the interval halves; when it finds it
  unchanged (same fingerprint, or a 304 Not Modified) the interval doubles; always
  within ``[min_interval, max_interval]``. This is the simplest estimator of a
  page's change rate that converges: a page that changes every hour ends up
  visited about every hour, one that never changes drifts to the maximum;
* a heap per partition, in memory, of (next visit time, URL) for URLs scheduled
  for a revisit, rebuilt from the records when a partition is first seen
  (`adopt`). It costs about 100 bytes per tracked URL, and exists only when the
  crawl revisits (``seine crawl --recrawl``) or when a URL was re-fed explicitly.

Why not the frontier: the frontier's queues hold URLs due *now*, in FIFO order per
host; a revisit waits hours or days and must not hold a host's queue. Due revisits
are handed to the frontier like new URLs and so stay polite.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]

#: Change outcomes `observe` reports.
FIRST = "first"
CHANGED = "changed"
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class RevisitPolicy:
    """Bounds of the revisit interval, in seconds."""

    min_interval: float = 3600.0
    max_interval: float = 30 * 86400.0
    #: The interval after the first fetch, before any change was observed.
    initial_interval: float = 86400.0

    def __post_init__(self) -> None:
        if not 0 < self.min_interval <= self.max_interval:
            raise ValueError(
                f"revisit intervals need 0 < min ({self.min_interval:g}) "
                f"<= max ({self.max_interval:g})"
            )

    def clamp(self, interval: float) -> float:
        return min(self.max_interval, max(self.min_interval, interval))


def _header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    name = name.lower()
    for key, value in headers:
        if key.lower() == name:
            value = value.strip()
            return value or None
    return None


def validators(headers: Iterable[tuple[str, str]]) -> tuple[str | None, str | None]:
    """(ETag, Last-Modified) of a response, as sent, or None each."""
    headers = list(headers)
    return _header(headers, "etag"), _header(headers, "last-modified")


def observe(
    policy: RevisitPolicy,
    previous: Mapping[str, Any] | None,
    *,
    fingerprint: str,
    etag: str | None,
    last_modified: str | None,
    depth: int,
    now: float,
) -> tuple[Record, str]:
    """The record after a full (2xx) fetch, and whether the content changed.

    A weak ETag is kept too: If-None-Match compares weakly (RFC 9110 §13.1.2).
    """
    if previous is None:
        interval, change = policy.clamp(policy.initial_interval), FIRST
    elif previous.get("fp") != fingerprint:
        interval, change = policy.clamp(float(previous["interval"]) / 2.0), CHANGED
    else:
        interval, change = policy.clamp(float(previous["interval"]) * 2.0), UNCHANGED
    visits = int(previous.get("visits", 0)) if previous else 0
    changes = int(previous.get("changes", 0)) if previous else 0
    record: Record = {
        "fp": fingerprint,
        "etag": etag,
        "lm": last_modified,
        "interval": interval,
        "last": now,
        "next": now + interval,
        "visits": visits + 1,
        "changes": changes + (change == CHANGED),
        "depth": depth,
    }
    return record, change


def not_modified(policy: RevisitPolicy, previous: Mapping[str, Any], now: float) -> Record:
    """The record after a 304: unchanged, so the interval grows; validators are kept."""
    interval = policy.clamp(float(previous["interval"]) * 2.0)
    record = dict(previous)
    record.update(
        interval=interval,
        last=now,
        next=now + interval,
        visits=int(previous.get("visits", 0)) + 1,
    )
    return record


def conditional_headers(record: Mapping[str, Any] | None) -> dict[str, str]:
    """If-None-Match / If-Modified-Since for a refetch of a URL with this record."""
    if not record:
        return {}
    headers: dict[str, str] = {}
    if record.get("etag"):
        headers["If-None-Match"] = str(record["etag"])
    if record.get("lm"):
        headers["If-Modified-Since"] = str(record["lm"])
    return headers


#: :meth:`RevisitSchedule.fetched`'s default ``previous``: read the record itself.
UNREAD: Any = object()


@dataclass
class _Heap:
    heap: list[tuple[float, str]] = field(default_factory=list)
    #: URL → its current scheduled time; heap entries that disagree are stale.
    at: dict[str, float] = field(default_factory=dict)


class RevisitSchedule:
    """Revisit records for the partitions this worker owns, and when each URL is due.

    ``track_all``: schedule every fetched URL for a revisit (``--recrawl``). Without
    it records are still kept (a later recrawl or a re-feed gets conditional GETs
    and the change history), but only explicitly re-fed URLs are scheduled.
    """

    def __init__(
        self,
        records: MutableMapping[str, Any],
        policy: RevisitPolicy,
        partition_of: Callable[[str], int],
        *,
        track_all: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.records = records
        self.policy = policy
        self.partition_of = partition_of
        self.track_all = track_all
        self.clock = clock
        self._heaps: dict[int, _Heap] = {}
        self._adopted: set[int] = set()
        #: Counters for progress lines and tests.
        self.changed = 0
        self.unchanged = 0
        self.not_modified = 0

    # -- recovery -------------------------------------------------------------------

    def knows_partition(self, partition: int) -> bool:
        return partition in self._adopted

    def adopt(self, partition: int, items: Iterable[tuple[str, Record]]) -> None:
        """Rebuild a partition's heap from its records (only when every URL is tracked)."""
        self._adopted.add(partition)
        heap = self._heaps.setdefault(partition, _Heap())
        if not self.track_all:
            return
        for url, record in items:
            if isinstance(record, dict) and self.partition_of(url) == partition:
                self._schedule(heap, url, float(record.get("next", 0.0)))

    # -- inputs ---------------------------------------------------------------------

    def fetched(
        self,
        url: str,
        *,
        fingerprint: str,
        headers: Iterable[tuple[str, str]],
        depth: int,
        now: float | None = None,
        stored: tuple[str, float] | None = None,
        previous: Record | None = UNREAD,
        simhash: int | None = None,
    ) -> str:
        """A page was fetched whole (2xx): update its record; returns first/changed/unchanged.

        ``simhash``: the text's simhash as parse took it, kept (``sh``) for the
        page's document when it is rebuilt from the page store.

        ``stored``: the (payload digest, fetch time) of the capture the page store now
        holds for the URL, so that the same capture read again after a rebalance is not
        stored twice, and a refetch of the same bytes is stored as a revisit.
        ``previous``: the URL's record as :meth:`record` gave it, when the caller has
        just read it and nothing wrote it since (link-extract reads it first to see
        whether the capture is stored already): one table read a page instead of two.
        """
        now = self.clock() if now is None else now
        etag, last_modified = validators(headers)
        record, change = observe(
            self.policy,
            self.record(url) if previous is UNREAD else previous,
            fingerprint=fingerprint,
            etag=etag,
            last_modified=last_modified,
            depth=depth,
            now=now,
        )
        if stored is not None:
            record["digest"], record["captured"] = stored
        if simhash is not None:
            record["sh"] = simhash
        self.records[url] = record
        if change == CHANGED:
            self.changed += 1
        elif change == UNCHANGED:
            self.unchanged += 1
        self._after_visit(url, record)
        return change

    def unmodified(self, url: str, now: float | None = None) -> Record | None:
        """A conditional GET answered 304: the page is unchanged; None if it has no record."""
        previous = self.record(url)
        if previous is None:
            return None
        record = not_modified(self.policy, previous, self.clock() if now is None else now)
        self.records[url] = record
        self.not_modified += 1
        self._after_visit(url, record)
        return record

    def refeed(self, url: str, *, when_due: bool, now: float | None = None) -> bool:
        """A URL re-fed for a recrawl: True if it should be fetched now.

        ``when_due``: honour its revisit time (fetch now only if it has no record
        or its time has come; else schedule it for then). Otherwise: now.
        """
        now = self.clock() if now is None else now
        record = self.record(url)
        if not when_due or record is None or float(record.get("next", 0.0)) <= now:
            return True
        self._schedule(self._heap(url), url, float(record["next"]))
        return False

    def forget_validators(self, url: str) -> None:
        """Drop a URL's ETag and Last-Modified, so its next fetch is unconditional: a
        fetch whose body was lost before it was stored is redone, and must not be
        answered 304 against the capture stored before it."""
        record = self.record(url)
        if record is not None and (record.get("etag") or record.get("lm")):
            self.records[url] = {**record, "etag": None, "lm": None}

    def headers_for(self, url: str) -> dict[str, str]:
        """Conditional-GET headers for a fetch of `url` (empty for a URL never fetched)."""
        return conditional_headers(self.record(url))

    def record(self, url: str) -> Record | None:
        """The revisit record of `url`; None if it has none (a value that is not a
        record, such as url-seen's 1, means: seen, never fetched whole)."""
        value = self.records.get(url)
        return value if isinstance(value, dict) else None

    # -- output ---------------------------------------------------------------------

    def due(self, partition: int, limit: int = 1000) -> list[tuple[str, int]]:
        """(URL, depth) of up to `limit` revisits due now in one partition.

        With every URL tracked, each is rescheduled one interval later as a fallback,
        so a revisit whose fetch fails (and so never updates the record) is tried
        again rather than forgotten; the fetch's own record update replaces it.
        """
        heap = self._heaps.get(partition)
        if heap is None:
            return []
        now = self.clock()
        out: list[tuple[str, int]] = []
        while heap.heap and heap.heap[0][0] <= now and len(out) < limit:
            at, url = heapq.heappop(heap.heap)
            if heap.at.get(url) != at:
                continue  # stale entry
            del heap.at[url]
            record = self.record(url) or {}
            out.append((url, int(record.get("depth", 0))))
            if self.track_all:
                interval = float(record.get("interval", self.policy.initial_interval))
                self._schedule(heap, url, now + self.policy.clamp(interval))
        return out

    def next_wake(self, partition: int) -> float | None:
        heap = self._heaps.get(partition)
        while heap is not None and heap.heap:
            at, url = heap.heap[0]
            if heap.at.get(url) == at:
                return at
            heapq.heappop(heap.heap)  # drop stale entries so the timer does not spin
        return None

    def partitions(self) -> list[int]:
        return list(self._heaps)

    def scheduled(self, partition: int | None = None) -> int:
        """URLs waiting for a revisit (in one partition, or all)."""
        heaps = self._heaps.values() if partition is None else [self._heaps.get(partition)]
        return sum(len(h.at) for h in heaps if h is not None)

    # -- internals ------------------------------------------------------------------

    def _heap(self, url: str) -> _Heap:
        return self._heaps.setdefault(self.partition_of(url), _Heap())

    def _after_visit(self, url: str, record: Record) -> None:
        if self.track_all:
            self._schedule(self._heap(url), url, float(record["next"]))

    @staticmethod
    def _schedule(heap: _Heap, url: str, at: float) -> None:
        heap.at[url] = at
        heapq.heappush(heap.heap, (at, url))
