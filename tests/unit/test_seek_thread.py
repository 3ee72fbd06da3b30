"""The seek_thread patch: a seek made from another thread than the aiokafka consumer's
changes the position at once and drops the buffered records on the consumer's thread
(streams/kafka/patches/seek_thread.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

from streams.kafka.patches.seek_thread import drop_records_on_fetcher_thread


class Records(dict):  # type: ignore[type-arg]
    """The fetcher's buffer, noting the thread each removal ran on."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.removed_on: list[int] = []

    def pop(self, key: Any, *default: Any) -> Any:
        self.removed_on.append(threading.get_ident())
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        self.removed_on.append(threading.get_ident())
        super().__delitem__(key)


class Subscriptions:
    def __init__(self) -> None:
        self.positions: dict[str, int] = {}

    def seek(self, tp: str, offset: int) -> None:
        self.positions[tp] = offset


def fetcher(loop: asyncio.AbstractEventLoop) -> Any:
    stub = Fetcher.__new__(Fetcher)
    stub._loop = loop
    stub._records = Records({"tp": "buffered"})
    stub._subscriptions = Subscriptions()
    stub._wait_consume_future = None
    return stub


def test_a_seek_from_another_thread_drops_the_records_on_the_fetchers_thread() -> None:
    drop_records_on_fetcher_thread()
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        stub = fetcher(loop)
        waiting = threading.Event()
        woken = asyncio.run_coroutine_threadsafe(_waiter(stub, waiting), loop)
        assert waiting.wait(timeout=5) and not woken.done()
        stub.seek_to("tp", 42)  # from this thread, as Faust's seek does
        assert stub._subscriptions.positions == {"tp": 42}  # the position: at once
        assert woken.result(timeout=5) is None  # the waiter woke on the loop
        assert stub._records == {} and stub._records.removed_on == [runner.ident]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=5)
        loop.close()


async def _waiter(stub: Any, waiting: threading.Event) -> None:
    """What `fetched_records` does with nothing buffered: wait to be woken."""
    stub._wait_consume_future = asyncio.get_running_loop().create_future()
    waiting.set()
    await stub._wait_consume_future


def test_a_seek_on_the_fetchers_thread_is_aiokafkas_own() -> None:
    drop_records_on_fetcher_thread()

    async def seek_here() -> Any:
        stub = fetcher(asyncio.get_running_loop())
        stub.seek_to("tp", 7)
        return stub

    stub = asyncio.run(seek_here())
    assert stub._subscriptions.positions == {"tp": 7}
    assert stub._records == {} and stub._records.removed_on == [threading.get_ident()]
