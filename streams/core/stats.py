"""Crawl statistics as plain data: what the dashboard, /metrics and `seine status` show.

No Kafka or web imports: a worker folds its own crawl-log records into a
`CrawlTally` as it sends them, and `seine status` folds the crawl-log *topic*
into the same class, so both tell the same story from the same records. A
worker's view is a JSON-able snapshot; `merge_snapshots` sums the snapshots of
several workers into the view of the whole crawl (every worker owns disjoint
partitions, so its counts add up).
"""

from __future__ import annotations

import bisect
import math
import time
import types
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: Crawl-log outcomes that are errors (fetch failures and refusals of the fetcher).
ERROR_OUTCOMES = ("error", "http-error", "blocked", "dns-error")
#: Crawl-log outcomes whose URLs `seine replay` re-feeds unless told otherwise.
REPLAY_OUTCOMES = ("fetched",)
#: Upper bounds (seconds) of the fetch latency histogram, as Prometheus buckets.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Seconds of pages/s history a worker keeps (the dashboard chart's width).
HISTORY_SECONDS = 600
#: Characters of an error reason kept as its group (reasons carry URLs and numbers).
REASON_CHARS = 60


#: Outcomes of a page that went as it should: not a reason to report.
PLAIN_OUTCOMES = frozenset(
    {
        "fetched",
        "robots",
        "unchanged",
        "duplicate",
        "near-duplicate",
        "redirect",
        "sitemap",
        "handoff-miss",
    }
)
#: Distinct (outcome, reason) rows a tally keeps; later new rows count as "other".
MAX_REASON_ROWS = 500


def refusal_group(reason: str) -> str:
    """A refusal's reason without what names the instance (numbers, URLs):
    "host page budget of 700 spent" and "... of 900 ..." are one row."""
    words = [w for w in (reason or "").split() if not any(ch.isdigit() for ch in w)]
    words = [w for w in words if "://" not in w]
    return (" ".join(words) or "(no reason)")[:REASON_CHARS]


def top_reasons(reasons: Mapping[str, int], limit: int = 5) -> str:
    """The summary's "why" line: the most frequent rows, "N× outcome: reason"."""
    rows = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return "; ".join(f"{n}× {row}" for row, n in rows)


def reason_group(reason: str) -> str:
    """The part of an error reason that names the kind of failure, not the instance:
    "connect timeout after 5.0s to http://x/" and the same for y are one row."""
    text = (reason or "").strip() or "(no reason)"
    head = text.split(": ", 1)[0] if ": " in text[:REASON_CHARS] else text
    words = [w for w in head.split() if not any(ch.isdigit() for ch in w) and "/" not in w]
    return (" ".join(words) or text)[:REASON_CHARS]


class RateHistory:
    """Events per whole second over the last `seconds` seconds (a ring of counts)."""

    def __init__(self, seconds: int = HISTORY_SECONDS) -> None:
        self.seconds = seconds
        self._counts: dict[int, int] = {}

    def add(self, at: float, n: int = 1) -> None:
        second = int(at)
        self._counts[second] = self._counts.get(second, 0) + n
        if len(self._counts) > self.seconds + 60:
            cutoff = max(self._counts) - self.seconds
            for key in [k for k in self._counts if k < cutoff]:
                del self._counts[key]

    def series(self, now: float, seconds: int | None = None) -> list[list[int]]:
        """[[second, count], ...] for every second of the window, oldest first; the
        current (incomplete) second is left out so the last point is not a dip."""
        span = self.seconds if seconds is None else seconds
        end = int(now)
        return [[s, self._counts.get(s, 0)] for s in range(end - span, end)]


def merge_series(many: Iterable[list[list[int]]]) -> list[list[int]]:
    """Sum per-second series of several workers, second by second."""
    total: Counter[int] = Counter()
    for series in many:
        for second, count in series:
            total[int(second)] += int(count)
    return [[s, total[s]] for s in sorted(total)]


class LatencyHistogram:
    """Cumulative-bucket histogram of seconds, shaped like Prometheus's."""

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def to_dict(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "counts": list(self.counts), "sum": self.sum}


class CrawlTally:
    """Everything countable in crawl-log records: outcomes, HTTP statuses, bytes, error
    reasons, fetch latency, pages per second, per-host fetches."""

    def __init__(self, history_seconds: int = HISTORY_SECONDS) -> None:
        self.records = 0
        self.outcomes: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        #: "outcome: reason" of every error and refusal (not PLAIN_OUTCOMES), grouped
        self.reasons: Counter[str] = Counter()
        self.hosts: Counter[str] = Counter()
        self.bytes = 0
        self.latency = LatencyHistogram()
        self.pages = RateHistory(history_seconds)
        self.first_at: float | None = None
        self.last_at: float | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        """Fold one crawl-log record (the `crawl_log` schema)."""
        self.records += 1
        outcome = str(record.get("outcome", ""))
        self.outcomes[outcome] += 1
        at = float(record.get("at") or 0.0)
        if at:
            self.first_at = at if self.first_at is None else min(self.first_at, at)
            self.last_at = at if self.last_at is None else max(self.last_at, at)
        if outcome in ERROR_OUTCOMES:
            row = f"{outcome}: {reason_group(str(record.get('reason', '')))}"
            self.errors[row] += 1
            self._count_reason(row)
        elif outcome not in PLAIN_OUTCOMES:
            self._count_reason(f"{outcome}: {refusal_group(str(record.get('reason', '')))}")
        if record.get("stage") != "fetch":
            return
        status = int(record.get("status") or 0)
        self.statuses[str(status) if status else outcome] += 1
        self.bytes += int(record.get("bytes") or 0)
        self.hosts[str(record.get("host", ""))] += 1
        elapsed = float(record.get("elapsed_ms") or 0.0)
        if status or elapsed:
            self.latency.observe(elapsed / 1000.0)
        if outcome == "fetched" and at:
            self.pages.add(at)

    def _count_reason(self, row: str) -> None:
        if row not in self.reasons and len(self.reasons) >= MAX_REASON_ROWS:
            row = "other"
        self.reasons[row] += 1

    @property
    def fetched(self) -> int:
        return self.outcomes.get("fetched", 0)

    def duplicate_rate(self) -> float:
        """Share of fetched pages whose content had been seen before."""
        fetched = self.fetched
        return self.outcomes.get("duplicate", 0) / fetched if fetched else 0.0

    def snapshot(self, now: float, history_seconds: int = 120) -> dict[str, Any]:
        return {
            "records": self.records,
            "outcomes": dict(self.outcomes),
            "statuses": dict(self.statuses),
            "errors": dict(self.errors),
            "bytes": self.bytes,
            "latency": self.latency.to_dict(),
            "pages_per_second": self.pages.series(now, history_seconds),
            "top_hosts": self.hosts.most_common(10),
            "first_at": self.first_at,
            "last_at": self.last_at,
        }


def recent_rate(series: list[list[int]], seconds: int = 10) -> float:
    """Mean events per second over the last `seconds` points of a series."""
    tail = series[-seconds:]
    return sum(count for _, count in tail) / len(tail) if tail else 0.0


def _add_counts(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        into[key] = into.get(key, 0) + value


def merge_snapshots(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """One view of the whole crawl from each worker's `SeineApp.snapshot()`.

    Counters add up (workers own disjoint partitions); per-second series add up
    second by second; hosts are the busiest over all workers; lag adds up per stage;
    the Bloom fill ratio is the mean over workers weighted by their filters' bits.
    """
    if not snapshots:
        return {"workers": 0}
    merged: dict[str, Any] = {"workers": len(snapshots), "at": max(s["at"] for s in snapshots)}
    for key in (
        "outcomes",
        "statuses",
        "errors",
        "lag",
        "stage_events",
        "stage_items",
        "stage_errors",
    ):
        total: dict[str, Any] = {}
        for snap in snapshots:
            _add_counts(total, snap.get(key, {}))
        merged[key] = total
    for key in (
        "bytes",
        "queued",
        "in_flight",
        "pages_stored",
        "dead_letters",
        "page_store_bytes",
        "bloom_bits",
        "bloom_bits_set",
        "bloom_items",
    ):
        merged[key] = sum(s.get(key, 0) for s in snapshots)
    bits = merged["bloom_bits"]
    merged["bloom_fill_ratio"] = merged["bloom_bits_set"] / bits if bits else 0.0
    merged["pages_per_second"] = merge_series(s.get("pages_per_second", []) for s in snapshots)
    latency = LatencyHistogram()
    for snap in snapshots:
        hist = snap.get("latency") or {}
        for i, count in enumerate(hist.get("counts", [])[: len(latency.counts)]):
            latency.counts[i] += count
        latency.sum += float(hist.get("sum", 0.0))
    merged["latency"] = latency.to_dict()
    hosts = [h for s in snapshots for h in s.get("hosts", [])]
    merged["hosts"] = busiest(hosts)
    merged["links"] = sorted(
        (link for s in snapshots for link in s.get("links", [])),
        key=lambda link: (-link["clicks"], link["code"]),
    )[:10]
    merged["started_at"] = min(s.get("started_at", merged["at"]) for s in snapshots)
    merged["duplicate_rate"] = duplicate_rate(merged["outcomes"])
    return merged


def duplicate_rate(outcomes: Mapping[str, int]) -> float:
    fetched = outcomes.get("fetched", 0)
    return outcomes.get("duplicate", 0) / fetched if fetched else 0.0


def busiest(hosts: list[dict[str, Any]], n: int = 10) -> list[dict[str, Any]]:
    """The `n` hosts with the longest queues (ties: the one due first)."""
    return sorted(hosts, key=lambda h: (-h["queued"], h.get("next_at") or math.inf, h["host"]))[:n]


def consumer_lag(highwater: int | None, position: int | None) -> int:
    """Messages not yet consumed: the log end offset minus the consumer's next offset."""
    if highwater is None:
        return 0
    return max(0, highwater - (position or 0))


def stage_breakdown(
    cpu_s: Mapping[str, float],
    items: Mapping[str, int],
    messages: Mapping[str, int],
    worker_cpu_s: float,
    elapsed_s: float,
) -> str:
    """One line per crawl: each stage's items/s, messages and share of the worker's CPU.

    Why: the next bottleneck of the pipeline should be visible from any crawl run
    with ``--log-level info``, without a profiler. ``cpu_s`` is the
    event-loop thread's time inside each stage's agent; the rest of the worker's CPU
    (HTTP client, Kafka consumer and producer threads, Faust, timers) is "other".
    """
    elapsed = max(elapsed_s, 1e-6)
    total = max(worker_cpu_s, 1e-6)
    parts = []
    for stage in sorted(cpu_s, key=lambda s: -cpu_s[s]):
        n = items.get(stage, 0)
        per_item = f", {1e6 * cpu_s[stage] / n:.0f} µs/item" if n else ""
        parts.append(
            f"{stage} {100 * cpu_s[stage] / total:.1f}% ({cpu_s[stage]:.1f} s, "
            f"{n / elapsed:.0f} items/s in {messages.get(stage, 0)} msgs{per_item})"
        )
    rest = max(0.0, worker_cpu_s - sum(cpu_s.values()))
    parts.append(f"other {100 * rest / total:.1f}% ({rest:.1f} s)")
    return "; ".join(parts)


class HostCycle:
    """Where a host's time between two fetches goes (one request in flight per host).

    Each completion the frontier handles closes a cycle that its dispatch opened: the
    request's way to the fetch stage (start of the fetch minus dispatch), the fetch
    itself, and the completion's way back to the frontier (handled minus finished).
    With no politeness delay, hosts / cycle is the crawl's pace whatever the CPU has to
    spare: the bench crawl's 200 hosts ran at ~800 pages/s on a ~250 ms cycle while
    the event loops were ~70% busy (docs/ARCHITECTURE.md, "Fetching"). The times are
    wall-clock seconds (`time.time()`, as `dispatched_at` and `finished_at` are), so a
    completion from another machine's clock may be off by their skew.
    """

    __slots__ = ("back_s", "count", "fetch_s", "to_fetch_s")

    def __init__(self) -> None:
        self.count = 0
        self.to_fetch_s = 0.0
        self.fetch_s = 0.0
        self.back_s = 0.0

    def observe(
        self, handled_at: float, dispatched_at: float, finished_at: float, elapsed_ms: float
    ) -> None:
        if dispatched_at <= 0.0:  # unknown (dispatched_at left out), or a tick's
            return
        fetch = elapsed_ms / 1000.0
        self.count += 1
        self.to_fetch_s += max(0.0, finished_at - fetch - dispatched_at)
        self.fetch_s += fetch
        self.back_s += max(0.0, handled_at - finished_at)

    def describe(self) -> str:
        """One line: the mean cycle and its three parts, in milliseconds."""
        n = max(self.count, 1)
        to_fetch, fetch, back = (1000 * x / n for x in (self.to_fetch_s, self.fetch_s, self.back_s))
        return (
            f"{to_fetch + fetch + back:.0f} ms on average over {self.count} fetches = "
            f"{to_fetch:.0f} to the fetch's start + {fetch:.0f} fetching + "
            f"{back:.0f} back to the frontier"
        )


@types.coroutine
def cpu_timed(awaitable: Awaitable[T], account: Callable[[float], None]) -> Generator[Any, Any, T]:
    """Run `awaitable` as it would run, adding to `account` the thread CPU time of each
    of its steps (from one suspension to the next), not of what runs while it waits.

    Why: a fetch runs as its own task, a few steps between awaits (connect, send, read
    the head, read the body, report), so no stage's unit of work holds it and its CPU
    showed as "other" in the stage breakdown. A step costs two `thread_time` calls
    here (~1 µs)."""
    steps = awaitable.__await__()
    send: Any = None
    thrown: BaseException | None = None
    while True:
        started = time.thread_time()
        try:
            yielded = steps.throw(thrown) if thrown is not None else steps.send(send)
        except StopIteration as stop:
            account(time.thread_time() - started)
            return cast(T, stop.value)
        except BaseException:
            account(time.thread_time() - started)
            raise
        account(time.thread_time() - started)
        try:
            send, thrown = (yield yielded), None
        except BaseException as exc:  # a cancellation, thrown into the awaitable
            send, thrown = None, exc
