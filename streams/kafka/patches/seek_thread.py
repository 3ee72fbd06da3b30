"""Patch: aiokafka's fetcher drops a partition's buffered records on its own thread.

Faust runs the aiokafka consumer in a thread of its own, yet its `seek` calls the
consumer's `seek` from the worker's event loop thread. aiokafka's `Fetcher.seek_to`
then deletes the partition's buffered fetch result from `_records` while the
consumer's thread may be walking that dict in `fetched_records` (a list of its keys
first, then each one read): the read raised `KeyError(TopicPartition(...))` (seen
once in ~25 runs of a worker's SIGKILL, on `url-filter` partition 2), the consumer
thread's fetch loop died with it, and the worker lived on consuming nothing until
its test's deadline.

`drop_records_on_fetcher_thread` keeps the position change immediate (the
subscription state's attribute write is what a seek is) and hands the dict change
and the waiter's wake-up to the fetcher's loop (`call_soon_threadsafe`), which runs
them between two turns of `fetched_records`. Buffered records of the old position
are not handed out meanwhile: a fetch result checks the partition's position before
each read and yields nothing once it moved.

Broker-independent. Checked on aiokafka 0.14.0 (faust-streaming 0.15.3).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.consumer.fetcher import Fetcher


def _on_fetcher_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False


def drop_records_on_fetcher_thread() -> None:
    original = Fetcher.seek_to
    if getattr(original, "_seine_wrapped", False):
        return

    def seek_to(self: Any, tp: Any, offset: int) -> None:
        loop = self._loop
        if loop.is_closed() or _on_fetcher_thread(loop):
            original(self, tp, offset)
            return
        self._subscriptions.seek(tp, offset)

        def forget_buffered() -> None:
            self._records.pop(tp, None)
            self._notify(self._wait_consume_future)

        loop.call_soon_threadsafe(forget_buffered)

    seek_to._seine_wrapped = True  # type: ignore[attr-defined]
    Fetcher.seek_to = seek_to  # type: ignore[method-assign]
