"""fetch: perform the frontier's due fetches; report every outcome.

The agent never waits for a fetch: it starts a task per request (bounded by a
semaphore, which is the stage's back-pressure) and moves on, so one slow host
never delays the others. Each finished fetch adds, to a lingering outbox, its
completion for the frontier (which releases the host), its crawl-log record,
the page for the parser, or a redirect target for url-filter.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import topology
from streams.core.fetching import Fetcher, FetchResult
from streams.core.urls import resolve
from streams.stages.context import Outbox, StageContext, crawl_log_record
from streams.stages.url_filter import REDIRECT_VIA_PREFIX

log = logging.getLogger("seine.fetch")


class FetchStage:
    def __init__(self, ctx: StageContext, fetcher: Fetcher, max_in_flight: int) -> None:
        self.ctx = ctx
        self.fetcher = fetcher
        self.out: Outbox = ctx.outbox()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, partition: int, batch: dict[str, Any]) -> None:
        for request in batch["requests"]:
            self.ctx.counters.fetch_in_flight += 1
            await self._slots.acquire()
            task = asyncio.ensure_future(self._run(partition, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, partition: int, request: dict[str, Any]) -> None:
        try:
            try:
                result = await self.fetcher.fetch(request["url"], request["kind"])
            except Exception as exc:  # the fetcher folds errors, but never let one escape
                log.exception("fetch of %s failed unexpectedly", request["url"])
                result = FetchResult(url=request["url"], outcome="error", reason=repr(exc))
            self._report(partition, request, result)
        finally:
            self.ctx.counters.fetch_in_flight -= 1
            self._slots.release()

    def _report(self, partition: int, request: dict[str, Any], result: FetchResult) -> None:
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
        if kind != "page":
            return
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
                        "via": REDIRECT_VIA_PREFIX + request["url"],
                    },
                )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.fetcher.close()
