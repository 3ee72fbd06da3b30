"""A fetch started at its dispatch (`FetchStage.start_dispatched`).

The frontier of a worker hands the requests it dispatches straight to the fetch stage
of the same worker, which starts them without any message; a request it refuses goes
through the fetch topic instead (the frontier's agent sends it), and must then start
from its message. A real loopback server counts what each case asks of it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from streams.core.records import FetchRequest
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.stages.context import Counters, Outbox
from streams.stages.fetch import FetchStage


class _Context:
    """What FetchStage asks of its StageContext up to reporting a fetch."""

    def __init__(self) -> None:
        self.counters = Counters()

    def outbox(self, *, frontier_after_delivery: bool = False) -> Outbox:
        return Outbox(self, frontier_after_delivery=frontier_after_delivery)  # type: ignore[arg-type]

    def host_partition(self, host: str) -> int:
        return 0


@asynccontextmanager
async def _server(hold: asyncio.Event | None = None) -> AsyncIterator[tuple[int, Counter[str]]]:
    """A loopback HTTP server counting the paths asked; `hold` keeps answers back."""
    asked: Counter[str] = Counter()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        asked[head.split(b" ")[1].decode()] += 1
        if hold is not None:
            await hold.wait()
        body = b"<html><body>hello</body></html>"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], asked
    finally:
        server.close()
        await server.wait_closed()


def _request(port: int, path: str, dispatched_at: float = 1.0) -> FetchRequest:
    return {
        "url": f"http://127.0.0.1:{port}{path}",
        "host": f"127.0.0.1:{port}",
        "kind": "page",
        "depth": 0,
        "dispatched_at": dispatched_at,
    }


async def _until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _stage(
    max_in_flight: int = 4, claim: Callable[[str, float], bool] | None = None
) -> tuple[_Context, Fetcher, FetchStage]:
    ctx = _Context()
    fetcher = Fetcher(FetchConfig(allow_private=True))
    stage = FetchStage(ctx, fetcher, max_in_flight, claim=claim)  # type: ignore[arg-type]
    return ctx, fetcher, stage


def test_a_request_started_at_dispatch_is_fetched_once() -> None:
    async def scenario() -> None:
        async with _server() as (port, asked):
            ctx, fetcher, stage = _stage()
            stage.local_partitions.add(3)
            request = _request(port, "/a")
            assert await stage.start_dispatched(3, request)
            await _until(lambda: asked["/a"] == 1, "the fetch")
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetch to end")
            # its page, completion and crawl-log record wait in the stage's outbox
            assert stage.out.pending == 3, stage.out.pending
            # a later dispatch of the same URL is another request, fetched again
            await stage.submit(3, {"requests": [_request(port, "/a", dispatched_at=2.0)]})
            await _until(lambda: asked["/a"] == 2, "the later dispatch's fetch")
            assert stage.started_at_dispatch == 1
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetches to end")
            await fetcher.close()

    asyncio.run(scenario())


def test_nothing_starts_early_for_a_partition_this_worker_does_not_hold() -> None:
    async def scenario() -> None:
        async with _server() as (port, asked):
            ctx, fetcher, stage = _stage()
            stage.local_partitions.add(0)
            request = _request(port, "/b")
            assert not await stage.start_dispatched(1, request)
            assert ctx.counters.fetch_in_flight == 0 and stage.started_at_dispatch == 0
            # its message is then the way the fetch starts, wherever it is read
            await stage.submit(1, {"requests": [request]})
            await _until(lambda: asked["/b"] == 1, "the fetch from the message")
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetch to end")
            await fetcher.close()

    asyncio.run(scenario())


def test_a_full_stage_does_not_make_the_frontier_wait() -> None:
    async def scenario() -> None:
        hold = asyncio.Event()
        async with _server(hold) as (port, asked):
            ctx, fetcher, stage = _stage(max_in_flight=1)
            stage.local_partitions.add(0)
            assert await stage.start_dispatched(0, _request(port, "/slow"))
            await _until(lambda: asked["/slow"] == 1, "the first fetch to reach the server")
            # no slot: refused at once (wait_for would time out if it waited for one)
            queued = _request(port, "/next", dispatched_at=2.0)
            assert not await asyncio.wait_for(stage.start_dispatched(0, queued), 1.0)
            hold.set()
            await stage.submit(0, {"requests": [queued]})  # its message starts it
            await _until(lambda: asked["/next"] == 1, "the second fetch")
            assert stage.started_at_dispatch == 1
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetches to end")
            await fetcher.close()

    asyncio.run(scenario())


def test_the_frontier_claim_decides_whether_it_starts() -> None:
    async def scenario() -> None:
        async with _server() as (port, asked):
            allowed: set[tuple[str, float]] = set()
            ctx, fetcher, stage = _stage(claim=lambda host, at: (host, at) in allowed)
            stage.local_partitions.add(0)
            request = _request(port, "/c")
            assert not await stage.start_dispatched(0, request)  # not the current dispatch
            assert ctx.counters.fetch_in_flight == 0 and not asked
            allowed.add((request["host"], request["dispatched_at"]))
            assert await stage.start_dispatched(0, request)
            await _until(lambda: asked["/c"] == 1, "the claimed fetch")
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetch to end")
            await fetcher.close()

    asyncio.run(scenario())


def test_a_revoked_partition_starts_nothing_early_any_more() -> None:
    async def scenario() -> None:
        async with _server() as (port, asked):
            ctx, fetcher, stage = _stage()
            stage.local_partitions.update({0, 1})
            assert await stage.start_dispatched(1, _request(port, "/before", 1.0))
            await _until(lambda: asked["/before"] == 1, "the fetch before the rebalance")
            stage.forget_partitions({1})
            assert stage.local_partitions == {0}
            assert not await stage.start_dispatched(1, _request(port, "/later", 3.0))
            assert await stage.start_dispatched(0, _request(port, "/kept", 4.0))
            await _until(lambda: asked["/kept"] == 1, "the held partition's fetch")
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetches to end")
            assert "/later" not in asked and stage.started_at_dispatch == 2
            await fetcher.close()

    asyncio.run(scenario())


def test_the_fetches_count_their_items_and_cpu_to_the_fetch_stage() -> None:
    """Most fetches start without a message, and run as tasks no stage's unit of work
    holds: the stage breakdown gets their count and (one in CPU_SAMPLE_EVERY timed)
    their CPU from the stage itself."""
    from streams.stages.fetch import CPU_SAMPLE_EVERY

    async def scenario() -> None:
        async with _server() as (port, asked):
            ctx, fetcher, stage = _stage(max_in_flight=CPU_SAMPLE_EVERY)
            stage.local_partitions.add(0)
            assert await stage.start_dispatched(0, _request(port, "/early"))
            later = [_request(port, f"/{i}", float(i + 2)) for i in range(CPU_SAMPLE_EVERY - 1)]
            await stage.submit(0, {"requests": later})
            await _until(lambda: sum(asked.values()) == CPU_SAMPLE_EVERY, "the fetches")
            await _until(lambda: ctx.counters.fetch_in_flight == 0, "the fetches to end")
            assert ctx.counters.stage_items["fetch"] == CPU_SAMPLE_EVERY
            assert ctx.counters.stage_cpu["fetch"] > 0
            await fetcher.close()

    asyncio.run(scenario())
