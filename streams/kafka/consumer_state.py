"""Where a worker's consumer stands on each partition it reads, for a stalled crawl.

When a multi-worker crawl stops with a message sent and never handled, the
question is where that message is: not yet fetched (the fetch position short of
the broker's high watermark), fetched and not handed to the agent (Faust's read
offset short of the position), or passed over (everything at the high watermark,
the commit too). Each worker's status file carries, for every partition of a
consumed topic it holds that is not caught up, the offsets of each step, so the
supervisor can print them next to its stall warning.

This reads Faust's and aiokafka's bookkeeping (private attributes of
faust-streaming 0.15.3 and aiokafka 0.14.0) without changing anything; whatever it
cannot read it reports as an error entry rather than fail the status write.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streams.core.stall import held_commit


def lagging_partitions(app: Any, topics: Iterable[str]) -> list[dict[str, Any]]:
    """The assigned partitions of `topics` whose records are not all handed on.

    Per partition: the high watermark of the last fetch response (`high`, the
    offset the next record will get), aiokafka's fetch `position`, Faust's last
    offset handed to the stream (`read`), its last commit (`committed`; before the
    first, the head the commit guard expects it to cover), and whether Faust or
    aiokafka hold the partition paused.
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
        heads = getattr(consumer, "_seine_heads", None) or {}
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
            # Nothing committed yet: the commit guard expects the first commit to cover
            # the partition's head (commit_guard), so a worker that handed on offsets
            # past it shows them held until that commit is made.
            at_head = committed is None and tp in heads
            if at_head:
                committed = heads[tp]
            handed = read + 1 if read is not None else committed
            paused = bool(state.paused) or tp in paused_by_faust
            behind = high is not None and (
                position is None or position < high or (handed is not None and handed < position)
            )
            entry = {
                "topic": tp.topic,
                "partition": tp.partition,
                "high": high,
                "position": position,
                "read": read,
                "committed": committed,
            }
            # a commit held behind what was handed on: a message in between never acked
            # (Faust's read offset is the next one to read right after a seek)
            if not (paused or behind or held_commit(entry)):
                continue
            out.append(
                {
                    **entry,
                    "paused": paused,
                    "buffered": tp in buffered,
                    "active": active is None or tp in active,
                    "head": at_head,
                }
            )
        return out
    except Exception as exc:  # diagnostics only: never break the status write
        return [{"error": f"{type(exc).__name__}: {exc}"}]


def committed_offsets(app: Any, topics: Iterable[str]) -> list[list[Any]]:
    """[topic, partition, offset] of each commit this worker's consumer knows of on
    `topics`: its own, and those it read at an assignment (a predecessor's). The
    commit guard never lets a commit pass an offset not handled, so each says every
    message before it was handled, by whichever worker (the supervisor's idle check)."""
    wanted = set(topics)
    try:
        committed = dict(app.consumer._committed_offset)
    except Exception:  # status only: never break the write
        return []
    return [
        [tp.topic, tp.partition, int(offset)]
        for tp, offset in sorted(committed.items())
        if offset is not None and tp.topic in wanted
    ]


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
            + (
                f"nothing committed yet (head {e.get('committed')})"
                if e.get("head")
                else f"committed {e.get('committed')}"
            )
            + (f" ({', '.join(flags)})" if flags else "")
        )
    return lines


async def rewind(app: Any, topic: str, partition: int, offset: int) -> None:
    """Make the consumer read `topic[partition]` again from `offset` (see
    `streams.core.stall.rewind_offset`); seeks in the consumer's own thread, as
    Faust's recovery does."""
    from faust.types import TP

    await app.consumer.seek_wait({TP(topic, partition): offset})
