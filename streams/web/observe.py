"""Watching a crawl: the dashboard at `/`, `/stats.json` and Prometheus `/metrics`.

    GET /                   the dashboard (one static HTML page, no asset from outside)
    GET /stats.json         this worker's snapshot (?scope=crawl: every worker's, summed)
    GET /metrics            this worker's metrics in Prometheus text format

A worker knows only its own partitions, so `/metrics` is per worker, as
Prometheus expects (it scrapes each worker and sums). The dashboard asks for
`scope=crawl`: the worker it is served from fetches `/stats.json` of every other
worker of the crawl (their web servers are in Faust's assignment map, the same
map `/pages` and short links route by) and adds them up with
`streams.core.stats.merge_snapshots`; the page says how many workers answered.
A snapshot costs a few milliseconds (Bloom popcount, a walk over the click
counts), so it is cached for a short while: polling clients cannot load a worker.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from faust.web import View
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

import topology
from streams.core.stats import consumer_lag, merge_snapshots
from streams.web.search import register_search

log = logging.getLogger("seine.observe")

ROUTED_HEADER = "X-Seine-Routed-For"
#: Seconds a snapshot is reused (the dashboard polls every second).
SNAPSHOT_TTL = 0.5
#: Click-count entries looked at for the top short links (a bounded walk).
MAX_CLICK_SCAN = 100_000


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


class Observer:
    """Builds this worker's snapshot and serves the dashboard views."""

    def __init__(self, seine: Any) -> None:
        self.seine = seine
        self.app = seine.app
        app_id = seine.settings.app_id
        self.stage_of_topic = {
            topology.topic_name(app_id, spec): spec.name for spec in topology.TOPICS
        }
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._store_bytes: tuple[float, int] = (0.0, 0)
        self._links: tuple[float, list[dict[str, Any]]] = (0.0, [])
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SeineCollector(self))

    # -- the snapshot ---------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        if self._cached is not None and now - self._cached[0] < SNAPSHOT_TTL:
            return self._cached[1]
        seine = self.seine
        c = seine.ctx.counters
        snap: dict[str, Any] = {
            "at": now,
            "started_at": c.started_at,
            "worker": str(self.app.conf.canonical_url),
            **c.tally.snapshot(now),
            "queued": seine.frontier.queued,
            "in_flight": seine.frontier.in_flight,
            "pages_stored": c.pages_stored,
            "dead_letters": c.dead_letters,
            "stage_events": dict(c.done),
            "stage_items": dict(c.stage_items),
            "stage_errors": dict(c.stage_errors),
            "lag": self._lag(),
            "hosts": seine.frontier.busiest_hosts(10),
            "links": self._top_links(now),
            "page_store_bytes": self._page_store_bytes(now),
        }
        snap.update(self._bloom())
        self._cached = (now, snap)
        return snap

    def _lag(self) -> dict[str, int]:
        """Per stage: messages on this worker's partitions not yet read."""
        lag: dict[str, int] = {}
        try:
            consumer = self.app.consumer
            assigned = self.app.assignor.assigned_actives()
        except Exception:  # not started, or rebalancing
            return lag
        read = getattr(consumer, "_read_offset", {})
        for tp in assigned:
            stage = self.stage_of_topic.get(tp.topic)
            if stage is None:
                continue
            try:
                highwater = consumer.highwater(tp)
            except Exception:
                continue
            last = read.get(tp)
            lag[stage] = lag.get(stage, 0) + consumer_lag(
                highwater, None if last is None else last + 1
            )
        return lag

    def _bloom(self) -> dict[str, Any]:
        filters = getattr(self.seine.ctx.seen_filters, "filters", {}) or {}
        set_bits = total_bits = items = 0
        for bloom in list(filters.values()):
            s, t = bloom.bits()
            set_bits += s
            total_bits += t
            items += len(bloom)
        return {
            "bloom_bits": total_bits,
            "bloom_bits_set": set_bits,
            "bloom_items": items,
            "bloom_fill_ratio": set_bits / total_bits if total_bits else 0.0,
        }

    def _page_store_bytes(self, now: float) -> int:
        if now - self._store_bytes[0] >= 5.0:
            self._store_bytes = (now, _dir_bytes(Path(self.seine.store.path)))
        return self._store_bytes[1]

    def _top_links(self, now: float) -> list[dict[str, Any]]:
        """The most clicked short links of this worker's partitions (read-only walk of
        the click-count table, bounded, refreshed every few seconds)."""
        if now - self._links[0] < 3.0:
            return self._links[1]
        links = getattr(self.app, "shortlinks", None)
        top: list[dict[str, Any]] = []
        if links is not None:
            try:
                counts = []
                for i, (code, clicks) in enumerate(links.clicks.items()):
                    if i >= MAX_CLICK_SCAN:
                        break
                    counts.append((int(clicks or 0), str(code)))
                for clicks, code in heapq.nlargest(10, counts):
                    link = links.codes.get(code) or {}
                    top.append({"code": code, "url": link.get("url", ""), "clicks": clicks})
            except Exception:  # tables not ready (rebalance): show none this time
                log.debug("short-link clicks not readable now", exc_info=True)
        self._links = (now, top)
        return top

    # -- the whole crawl ------------------------------------------------------

    def peers(self) -> list[str]:
        """Web servers of the other workers of this crawl (from Faust's assignment)."""
        urls = getattr(self.app.assignor, "_external_tps_url", None) or {}
        me = str(self.app.conf.canonical_url).rstrip("/")
        return sorted({str(u).rstrip("/") for u in urls.values()} - {me})

    async def crawl_snapshot(self) -> dict[str, Any]:
        mine = self.snapshot()
        peers = self.peers()

        async def ask(base: str) -> dict[str, Any] | None:
            try:
                async with self.app.http_client.get(
                    base + "/stats.json",
                    headers={ROUTED_HEADER: "stats"},
                    timeout=aiohttp.ClientTimeout(total=2),
                ) as response:
                    if response.status != 200:
                        return None
                    return dict(await response.json())
            except (aiohttp.ClientError, TimeoutError, ValueError, RuntimeError):
                return None  # RuntimeError: the client session closed (shutting down)

        answers = await asyncio.gather(*(ask(p) for p in peers))
        snaps = [mine, *(a for a in answers if a is not None)]
        merged = merge_snapshots(snaps)
        merged["scope"] = "crawl"
        merged["workers_expected"] = 1 + len(peers)
        return merged


class SeineCollector(Collector):
    """Prometheus metrics, read from the worker's snapshot at scrape time."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    def collect(self) -> Any:
        snap = self.observer.snapshot()
        fetched = CounterMetricFamily(
            "seine_pages_fetched",
            "Fetches by HTTP status (or by outcome when there was no response).",
            labels=["status"],
        )
        for status, n in sorted(snap["statuses"].items()):
            fetched.add_metric([status], n)
        yield fetched
        outcomes = CounterMetricFamily(
            "seine_crawl_outcomes", "Crawl-log records by outcome.", labels=["outcome"]
        )
        for outcome, n in sorted(snap["outcomes"].items()):
            outcomes.add_metric([outcome], n)
        yield outcomes
        yield CounterMetricFamily(
            "seine_fetched_bytes", "Body bytes fetched (decoded).", value=snap["bytes"]
        )
        latency = snap["latency"]
        cumulative, buckets = 0, []
        for bound, count in zip(
            [*latency["buckets"], float("inf")], latency["counts"], strict=True
        ):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        yield HistogramMetricFamily(
            "seine_fetch_latency_seconds",
            "Time from request to complete body, per fetch.",
            buckets=buckets,
            sum_value=latency["sum"],
        )
        events = CounterMetricFamily(
            "seine_stage_events", "Messages fully handled, per stage.", labels=["stage"]
        )
        for stage, n in sorted(snap["stage_events"].items()):
            events.add_metric([stage], n)
        yield events
        # A fetch started at its dispatch has no message: a stage's work is its items.
        items = CounterMetricFamily(
            "seine_stage_items",
            "Items (URLs, requests, pages) handled, per stage.",
            labels=["stage"],
        )
        for stage, n in sorted(snap.get("stage_items", {}).items()):
            items.add_metric([stage], n)
        yield items
        errors = CounterMetricFamily(
            "seine_stage_errors",
            "Messages a stage could not process (sent to dead-letters), per stage.",
            labels=["stage"],
        )
        for stage, n in sorted(snap["stage_errors"].items()):
            errors.add_metric([stage], n)
        yield errors
        lag = GaugeMetricFamily(
            "seine_consumer_lag", "Messages not yet read, per stage.", labels=["stage"]
        )
        for stage, n in sorted(snap["lag"].items()):
            lag.add_metric([stage], n)
        yield lag
        for name, doc, value in (
            ("seine_frontier_queued", "URLs waiting in the frontier's host queues.", "queued"),
            ("seine_fetch_in_flight", "Fetches dispatched and not yet completed.", "in_flight"),
            (
                "seine_urlseen_bloom_fill_ratio",
                "Share of url-seen Bloom filter bits set (over all partitions here).",
                "bloom_fill_ratio",
            ),
            (
                "seine_urlseen_bloom_items",
                "URLs added to the url-seen Bloom filters.",
                "bloom_items",
            ),
            (
                "seine_page_store_bytes",
                "Bytes on disk of this worker's page store.",
                "page_store_bytes",
            ),
            (
                "seine_pages_stored",
                "Pages written to the page store by this worker.",
                "pages_stored",
            ),
        ):
            yield GaugeMetricFamily(name, doc, value=snap[value])


def dashboard_html() -> bytes:
    return resources.files("streams.web").joinpath("static/dashboard.html").read_bytes()


def register_observe(seine: Any) -> Observer:
    """Add `/`, `/stats.json`, `/metrics` and `/search` to the worker's web server."""
    observer = Observer(seine)
    page = dashboard_html()

    class Dashboard(View):
        async def get(self, request: Any, **kwargs: Any) -> Any:
            return web.Response(
                body=page,
                content_type="text/html",
                charset="utf-8",
                headers={"Cache-Control": "no-cache"},
            )

    class Stats(View):
        async def get(self, request: Any, **kwargs: Any) -> Any:
            if request.query.get("scope") == "crawl" and ROUTED_HEADER not in request.headers:
                return web.json_response(await observer.crawl_snapshot())
            return web.json_response({**observer.snapshot(), "scope": "worker"})

    class Metrics(View):
        async def get(self, request: Any, **kwargs: Any) -> Any:
            return web.Response(
                body=generate_latest(observer.registry),
                headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            )

    register_search(seine, observer.peers)
    seine.app.page("/")(Dashboard)
    seine.app.page("/stats.json")(Stats)
    seine.app.page("/metrics")(Metrics)
    return observer
