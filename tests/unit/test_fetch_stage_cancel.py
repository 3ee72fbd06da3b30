"""The fetch stage's bookkeeping when a rebalance cancels its fetches.

A fetch holds a slot of the stage's semaphore and one count of `fetch_in_flight`
(which keeps the worker from reporting itself idle) until its task ends, however it
ends: also when it is cancelled before it ever ran, which is what a rebalance right
after a fetch batch arrived does. Before the fix the count was given back in the
coroutine's `finally`, which a task cancelled before its first step never reaches: the
fault test then saw a worker keep one fetch "in flight" for good.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from streams.core.records import FetchBatch
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher
from streams.stages.context import Counters, Outbox
from streams.stages.fetch import FetchStage


class _Context:
    """What FetchStage asks of its StageContext before a fetch reports anything."""

    def __init__(self) -> None:
        self.counters = Counters()

    def outbox(self, *, frontier_after_delivery: bool = False) -> Outbox:
        return Outbox(self, frontier_after_delivery=frontier_after_delivery)  # type: ignore[arg-type]


def _batch(url: str) -> FetchBatch:
    return {
        "requests": [
            {"url": url, "host": "127.0.0.1", "kind": "page", "depth": 0, "dispatched_at": 1.0}
        ]
    }


async def _until(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def test_a_fetch_cancelled_before_it_ran_gives_back_its_slot_and_count() -> None:
    async def scenario() -> None:
        ctx = _Context()
        fetcher = Fetcher(FetchConfig(allow_private=True))
        stage = FetchStage(ctx, fetcher, max_in_flight=2)  # type: ignore[arg-type]
        # submit starts the task but does not yield to it (a free slot is taken at once)
        await stage.submit(0, _batch("http://127.0.0.1:9/never"))
        assert ctx.counters.fetch_in_flight == 1
        assert await stage.cancel({0}) == 1  # the rebalance: before the task's first step
        await _until(lambda: ctx.counters.fetch_in_flight == 0, "the in-flight count back to 0")
        assert not stage._slots.locked() and stage._slots._value == 2
        await fetcher.close()

    asyncio.run(scenario())


def test_a_fetch_cancelled_while_it_waits_on_the_server_gives_back_its_slot_and_count() -> None:
    async def scenario() -> None:
        connected = asyncio.Event()
        release = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connected.set()  # read the request, never answer it
            await release.wait()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ctx = _Context()
        fetcher = Fetcher(FetchConfig(allow_private=True))
        stage = FetchStage(ctx, fetcher, max_in_flight=1)  # type: ignore[arg-type]
        await stage.submit(0, _batch(f"http://127.0.0.1:{port}/slow"))
        await asyncio.wait_for(connected.wait(), 10)
        assert ctx.counters.fetch_in_flight == 1 and stage._slots.locked()
        assert await stage.cancel({0}) == 1
        await _until(lambda: ctx.counters.fetch_in_flight == 0, "the in-flight count back to 0")
        assert not stage._slots.locked()
        release.set()
        await fetcher.close()
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
