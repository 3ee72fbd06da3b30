"""fetch: perform the frontier's due fetches; report every outcome.

The agent never waits for a fetch: it starts a task per request (bounded by a
semaphore, which is the stage's back-pressure) and moves on, so one slow host
never delays the others. Each finished fetch adds, to a lingering outbox, its
completion for the frontier (which releases the host), its crawl-log record,
the page for the parser, or a redirect target for url-filter.

Sitemaps: a robots.txt answer yields the sitemaps it names (and /sitemap.xml when
probing is on); a fetched sitemap yields its pages and, from an index, more
sitemaps. All go to url-filter like links (scope, canonical form, url-seen), the
sitemaps marked ``kind = "sitemap"`` so the frontier hands them back here as such.
A page with a revisit record is fetched with a conditional GET; a 304 is logged
as "unchanged" and stores nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import topology
from streams.core.freshness import RevisitSchedule
from streams.core.provenance import Via
from streams.core.records import FetchBatch, FetchRequest
from streams.core.sitemaps import (
    SitemapConfig,
    SitemapReading,
    read_sitemap,
    robots_discoveries,
)
from streams.core.stats import cpu_timed
from streams.core.urls import resolve
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import FetchResult
from streams.stages import documents
from streams.stages.context import Outbox, StageContext, crawl_log_record

log = logging.getLogger("seine.fetch")

#: Statuses that say a page is gone: its document is deleted.
GONE = frozenset({404, 410})

#: One fetch in this many is timed for the stage breakdown (`cpu_timed`): two
#: `thread_time` calls (system calls) a step, ~10 steps a fetch, is ~1% of a page's
#: CPU when every fetch is timed, an eighth of that so.
CPU_SAMPLE_EVERY = 8


class FetchStage:
    """The fetch stage of one worker: a task per request, bounded by max_in_flight."""

    name = "fetch"
    decode = True
    #: it counts its items itself: the requests it starts, most without a message
    count_items = False

    def __init__(
        self,
        ctx: StageContext,
        fetcher: Fetcher,
        max_in_flight: int,
        *,
        sitemaps: SitemapConfig | None = None,
        revisits: RevisitSchedule | None = None,
        claim: Callable[[str, float], bool] | None = None,
    ) -> None:
        self.ctx = ctx
        #: (host, dispatched_at) → may this request start now? Only the dispatch the
        #: frontier waits for, once (``Frontier.claim``). Any other is skipped: read again
        #: after a rebalance, re-dispatched since, or delivered twice.
        self.claim = claim
        #: Requests skipped (see claim).
        self.stale_skipped = 0
        self.fetcher = fetcher
        self.sitemaps = sitemaps if sitemaps is not None else SitemapConfig(enabled=False)
        self.revisits = revisits
        # a fetch's completion goes to the frontier only once its page is on the broker
        self.out: Outbox = ctx.outbox(frontier_after_delivery=True)
        self._slots = asyncio.Semaphore(max_in_flight)
        #: Fetches running, with the partition each belongs to.
        self._tasks: dict[asyncio.Task[None], int] = {}
        #: Fetch partitions this worker holds: a frontier dispatch of one of these
        #: may start here at once (:meth:`start_dispatched`).
        self.local_partitions: set[int] = set()
        #: Requests started at their dispatch.
        self.started_at_dispatch = 0

    async def start_dispatched(self, partition: int, request: FetchRequest) -> bool:
        """Start a request the frontier of this worker has just dispatched, without
        sending it through the fetch topic: under load a hop through the broker took
        50-100 ms, a third of a host's cycle (dispatch, fetch, completion back at the
        frontier), and one request in flight per host makes that cycle the crawl's
        pace. Only a request this returns False for goes to the fetch topic (the way
        when another worker holds the partition). Nothing is lost by not sending the
        others: the caller starts a request only once the frontier's table records
        naming its dispatch are acknowledged, so after a kill the successor's tables
        know of every request that started, its frontier re-dispatches the one each
        host had in flight, and it would skip an older request's message anyway.

        Called while the frontier's event is current: the revisit record read here is
        in the same partition. Starts nothing (False) when the partition is not held
        here, no slot is free (the frontier's event never waits), or the frontier
        does not let it (``claim``)."""
        if partition not in self.local_partitions or self._slots.locked():
            return False
        if self.claim is not None and not self.claim(request["host"], request["dispatched_at"]):
            return False
        await self._slots.acquire()  # free (checked above): does not suspend
        self.started_at_dispatch += 1
        self._start(partition, request, self._revisit_headers(request))
        return True

    def forget_partitions(self, partitions: set[int]) -> None:
        """A rebalance takes these fetch partitions away: start nothing of them early."""
        self.local_partitions -= partitions

    def _revisit_headers(self, request: FetchRequest) -> dict[str, str] | None:
        if self.revisits is None or request["kind"] != "page":
            return None
        # read while a fetch or frontier event of the request's partition is current:
        # the record is in that partition
        return self.revisits.headers_for(request["url"]) or None

    def _start(self, partition: int, request: FetchRequest, headers: dict[str, str] | None) -> None:
        """Run the fetch as its own task; its slot is already taken."""
        counters = self.ctx.counters
        counters.fetch_in_flight += 1
        counters.stage_items["fetch"] += 1
        timed = counters.stage_items["fetch"] % CPU_SAMPLE_EVERY == 0
        task = asyncio.ensure_future(
            self._timed_run(partition, request, headers)
            if timed
            else self._run(partition, request, headers)
        )
        self._tasks[task] = partition
        task.add_done_callback(self._task_done)

    async def step(self, partition: int, batch: FetchBatch, out: Outbox) -> None:
        """The agent's step: what a fetch produces goes to the stage's own lingering
        outbox, not to the agent's (`out` stays empty)."""
        await self.submit(partition, batch)

    async def submit(self, partition: int, batch: FetchBatch) -> None:
        for request in batch["requests"]:
            headers = self._revisit_headers(request)
            await self._slots.acquire()
            # asked after the wait for a slot: a rebalance may have come meanwhile
            if self.claim is not None and not self.claim(request["host"], request["dispatched_at"]):
                self.stale_skipped += 1
                log.debug(
                    "fetch: request for %s (dispatched at %.6f, partition %d) skipped: "
                    "not the frontier's current dispatch, or already started",
                    request["url"],
                    request["dispatched_at"],
                    partition,
                )
                self._slots.release()
                continue
            self._start(partition, request, headers)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """Give back the fetch's slot and its in-flight count.

        Here and not in a ``finally`` of :meth:`_run`: a task cancelled before it first
        ran (a rebalance's :meth:`cancel` right after :meth:`submit` started it) never
        enters its coroutine, so a ``finally`` there never runs, and the worker kept
        one fetch "in flight" for good (never idle; the fault test saw it) and one slot
        fewer. A done callback runs for every task, however it ended."""
        self._tasks.pop(task, None)
        self.ctx.counters.fetch_in_flight -= 1
        self._slots.release()

    async def cancel(self, partitions: set[int], timeout: float = 5.0) -> int:
        """Stop the fetches of partitions this worker is losing, and wait (bounded) for
        them to end: the next owner re-dispatches them, and must find the hosts quiet.
        A cancelled fetch reports nothing; its host's completion comes from the redo."""
        doomed = [task for task, p in self._tasks.items() if p in partitions]
        for task in doomed:
            task.cancel()
        if doomed:
            await asyncio.wait(doomed, timeout=timeout)
        return len(doomed)

    async def _timed_run(
        self, partition: int, request: FetchRequest, headers: dict[str, str] | None
    ) -> None:
        """:meth:`_run`, its CPU time counted to the fetch stage (`cpu_timed`) for the
        CPU_SAMPLE_EVERY fetches it stands for. The fetch is created here, so a task
        cancelled before it first ran leaves nothing behind."""
        await cpu_timed(self._run(partition, request, headers), self._count_cpu)

    def _count_cpu(self, seconds: float) -> None:
        self.ctx.counters.stage_cpu["fetch"] += seconds * CPU_SAMPLE_EVERY

    async def _run(
        self, partition: int, request: FetchRequest, headers: dict[str, str] | None = None
    ) -> None:
        reading: SitemapReading | None = None
        try:
            result = await self.fetcher.fetch(request["url"], request["kind"], headers)
            if result.outcome == "sitemap":
                # up to 50 MB of XML: parse off the event loop
                reading = await asyncio.to_thread(
                    read_sitemap, request["url"], request["depth"], result.body, self.sitemaps
                )
                if reading.invalid:
                    result.outcome = "sitemap-invalid"
                result.reason = "; ".join(r for r in (result.reason, reading.reason) if r)
        except Exception as exc:  # the fetcher folds errors, but never let one escape
            log.exception("fetch of %s failed unexpectedly", request["url"])
            result = FetchResult(url=request["url"], outcome="error", reason=repr(exc))
        self._report(partition, request, result)
        if reading is not None:
            result.body = b""  # logged; the entries are all that is needed further
            self._follow_sitemap(request, reading)

    def _report(self, partition: int, request: FetchRequest, result: FetchResult) -> None:
        ctx, out = self.ctx, self.out
        kind = request["kind"]
        ctx.counters.bytes_fetched += len(result.body)
        out.add_frontier(
            partition,
            "completions",
            {
                "url": request["url"],
                "host": request["host"],
                "kind": kind,
                "status": result.status,
                "outcome": result.outcome,
                "elapsed_ms": result.elapsed_ms,
                "finished_at": result.fetched_at + result.elapsed_ms / 1000.0,
                "retry_after": result.retry_after,
                "body": result.body if kind == "robots" else None,
                "dispatched_at": request["dispatched_at"],
                "reason": result.reason or "",
            },
        )
        out.log(
            crawl_log_record(
                request["url"],
                "fetch",
                result.outcome,
                host=request["host"],
                status=result.status,
                reason=result.reason,
                nbytes=len(result.body),
                elapsed_ms=result.elapsed_ms,
                depth=request["depth"],
                url_id=request.get("url_id", 0),
            )
        )
        if kind == "robots":
            sitemaps = robots_discoveries(request["url"], result.status, result.body, self.sitemaps)
            for url in sitemaps:
                self._discovered(url, 1, "sitemap", request["url"])
            return
        if result.outcome == "redirect" and kind == "sitemap" and result.location:
            target = resolve(request["url"], result.location)
            if target:
                self._discovered(target, request["depth"], "sitemap", request["url"])
            return
        if kind != "page":
            return
        if result.status in GONE or (result.outcome == "redirect" and result.location):
            # its document, if one was sent, goes (a deletion of an id never sent is
            # a no-op for an index)
            documents.send_deletion(ctx, out, request["url"])
        if result.outcome == "fetched":
            out.add(
                topology.PARSE,
                partition,
                {
                    "url": request["url"],
                    "status": result.status,
                    "headers": [{"name": k, "value": v} for k, v in result.headers],
                    "body": result.body,
                    "fetched_at": result.fetched_at,
                    "elapsed_ms": result.elapsed_ms,
                    "ip": result.ip,
                    "depth": request["depth"],
                    "truncated": result.truncated,
                },
            )
        elif result.outcome == "redirect" and result.location:
            target = resolve(request["url"], result.location)
            if target:
                out.add(
                    topology.URL_FILTER,
                    ctx.url_partition(target),
                    {
                        "url": target,
                        # one level deeper, so an endless redirect chain meets --max-depth
                        "depth": request["depth"] + 1,
                        "priority": 0,
                        # marked as a redirect: url-filter lets the target's host form
                        # become the site's canonical one (example.com → www.example.com)
                        "via": Via.REDIRECT + request["url"],
                    },
                )

    def _follow_sitemap(self, request: FetchRequest, reading: SitemapReading) -> None:
        """A sitemap's entries: its pages at its own depth (the sitemap hop is free),
        the sitemaps an index lists one level deeper (read_sitemap bounds that)."""
        depth, via = request["depth"], request["url"]
        for url in reading.sitemaps:
            self._discovered(url, depth + 1, "sitemap", via)
        for url in reading.pages:
            self._discovered(url, depth, "page", via)

    def _discovered(self, url: str, depth: int, kind: str, via: str) -> None:
        self.out.add(
            topology.URL_FILTER,
            self.ctx.url_partition(url),
            {"url": url, "depth": depth, "priority": 0, "via": via, "kind": kind},
        )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.fetcher.close()
