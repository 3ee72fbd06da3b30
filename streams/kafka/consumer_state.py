"""Where a worker's consumer stands on each partition it reads, for a stalled crawl.

When a multi-worker crawl stops with a message sent and never handled, the
question is where that message is: not yet fetched (the fetch position short of
the broker's high watermark), fetched and not handed to the agent (Faust's read
offset short of the position), or passed over (everything at the high watermark,
the commit too). Each worker's status file carries, for every partition of a
consumed topic it holds that is not caught up, the offsets of each step, so the
supervisor can print them next to its stall warning.

This reads Faust's and aiokafka's bookkeeping (private attributes of
faust-streaming 0.15 and aiokafka 0.12) without changing anything; whatever it
cannot read it reports as an error entry rather than fail the status write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from streams.core.stall import Refetches, first_skipped


def lagging_partitions(app: Any, topics: Iterable[str]) -> list[dict[str, Any]]:
    """The assigned partitions of `topics` whose records are not all handed on.

    Per partition: the high watermark of the last fetch response (`high`, the
    offset the next record will get), aiokafka's fetch `position`, Faust's last
    offset handed to the stream (`read`), its last commit (`committed`), and
    whether Faust or aiokafka hold the partition paused.
    """
    wanted = set(topics)
    try:
        consumer = app.consumer
        kafka = consumer._thread._consumer
        if kafka is None:
            return []
        subscription = kafka._subscription.subscription
        if subscription is None:
            return []
        assignment = subscription.assignment
        active = consumer._active_partitions
        paused_by_faust = consumer._paused_partitions
        buffered = consumer._buffered_partitions
        out: list[dict[str, Any]] = []
        for tp in sorted(consumer.assignment()):
            if tp.topic not in wanted:
                continue
            state = assignment.state_value(tp)
            if state is None:
                continue
            high = state.highwater
            position = state._position  # None until the position is known
            read = consumer._read_offset.get(tp)
            committed = consumer._committed_offset.get(tp)
            handed = read + 1 if read is not None else committed
            paused = bool(state.paused) or tp in paused_by_faust
            behind = high is not None and (
                position is None or position < high or (handed is not None and handed < position)
            )
            # a commit held behind what was handed on: a message in between never acked
            # (Faust's read offset is the next one to read right after a seek)
            held = committed is not None and read is not None and committed < read
            if not (paused or behind or held):
                continue
            out.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "high": high,
                    "position": position,
                    "read": read,
                    "committed": committed,
                    "paused": paused,
                    "buffered": tp in buffered,
                    "active": active is None or tp in active,
                }
            )
        return out
    except Exception as exc:  # diagnostics only: never break the status write
        return [{"error": f"{type(exc).__name__}: {exc}"}]


def describe(worker: str, entries: list[dict[str, Any]]) -> list[str]:
    """One line a partition, for the supervisor's stall warning."""
    lines = []
    for e in entries:
        if "error" in e:
            lines.append(f"  {worker}: consumer state unreadable ({e['error']})")
            continue
        flags = [
            name
            for name, on in (
                ("paused", e.get("paused")),
                ("buffer-full", e.get("buffered")),
                ("inactive", not e.get("active", True)),
            )
            if on
        ]
        lines.append(
            f"  {worker} {e['topic']}[{e['partition']}]: high watermark {e.get('high')}, "
            f"fetch position {e.get('position')}, last handed to the agent {e.get('read')}, "
            f"committed {e.get('committed')}" + (f" ({', '.join(flags)})" if flags else "")
        )
    return lines


async def rewind(app: Any, topic: str, partition: int, offset: int) -> None:
    """Make the consumer read `topic[partition]` again from `offset` (see
    `streams.core.stall.rewind_offset`); seeks in the consumer's own thread, as
    Faust's recovery does."""
    from faust.types import TP

    await app.consumer.seek_wait({TP(topic, partition): offset})


def hold_gaps() -> None:
    """Patch Faust's consumer so offsets a fetch skipped hold the commit back.

    faust-streaming takes a jump in the offsets it reads (r, then r + 3) for records
    the broker legitimately lacks (compacted away, transaction markers) and adds
    the missing offsets to the acknowledged ones, so the commit passes over them.
    Seine's stage topics are neither compacted nor transactional, so a jump there
    is a record the consumer never got: counting it handled lost it for good, and a
    multi-worker crawl then waited for ever. `refetch_skips` re-reads such a jump at
    once; one it gives up on comes here, where it is logged and not recorded: the
    commit guard (`kafka_tuning.guard_commits`) then holds the partition's commit at
    the first skipped offset, and `rewind_stuck_partitions` reads the partition
    again from there once it stands still.

    Needed on both brokers: on Apache Kafka 4.4.0 the 3-node fault tests logged 17
    such jumps in the "all" scenario and 3 in "rebalance" (seeks at a rebalance),
    each a message faust-streaming 0.15.3 would have counted handled.
    """
    from faust.transport.consumer import Consumer

    if getattr(Consumer._add_gap, "_seine_wrapped", False):
        return

    async def _add_gap(self: Any, tp: Any, offset_from: int, offset_to: int) -> None:
        # offset_to is the record being delivered; the ones before it were skipped.
        # Those below the commit were handled already (by this worker before a
        # rebalance, or by another): a jump over them is no loss.
        committed = self._committed_offset.get(tp)
        first = offset_from if committed is None else max(offset_from, committed)
        if first > offset_to - 1:
            return
        self.log.warning(
            "offsets %s..%s of %s[%s] (committed: %s) were skipped by the fetch: "
            "the commit waits for them",
            first,
            offset_to - 1,
            tp.topic,
            tp.partition,
            committed,
        )
        self._seine_skipped = getattr(self, "_seine_skipped", 0) + (offset_to - first)

    _add_gap._seine_wrapped = True  # type: ignore[attr-defined]
    Consumer._add_gap = _add_gap  # type: ignore[method-assign]


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
