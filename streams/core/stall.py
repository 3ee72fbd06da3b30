"""A crawl that stopped moving with messages sent and never handled.

`seine crawl --workers N` judges idleness from the workers' summed counters: every
message sent to a consumed topic handled. A message that never reaches its agent
(seen with two workers on the embedded broker: one content-dedup message of 2,069)
left the supervisor waiting for ever with every figure still, and nothing said
why. `StallWatch` notices that state — counters unchanged for a while, some topic
short of handled messages — so the supervisor can say which topic and how many,
once, instead of hanging silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def unhandled(
    sent: Mapping[str, int], done: Mapping[str, int], unconsumed: Iterable[str] = ()
) -> dict[str, int]:
    """Per consumed topic, messages sent and not (yet) handled; topics that balance
    are left out."""
    skip = set(unconsumed)
    return {
        name: count - done.get(name, 0)
        for name, count in sorted(sent.items())
        if name not in skip and count > done.get(name, 0)
    }


def offsets_handled(
    delivered: Mapping[tuple[str, int], int], handled: Mapping[tuple[str, int], int]
) -> bool:
    """Is every (topic, partition) handled up to the offset after the last message
    delivered there? A partition is read in order, so this holds whatever else the
    topic holds (poison, messages read twice), where counts of messages are fooled."""
    return all(handled.get(key, 0) >= upto for key, upto in delivered.items())


class StallWatch:
    """Reports, once per stall, counters that stopped moving while unbalanced.

    `observe` is fed the summed counters at each poll; a change of any counter is
    progress and restarts the clock (so a slow crawl under load never counts as
    stalled). After `after` seconds without progress and with messages unhandled,
    it returns the unhandled messages per topic, once; progress re-arms it.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._signature: Any = None
        self._since = 0.0
        self._reported = False

    def observe(
        self,
        now: float,
        sent: Mapping[str, int],
        done: Mapping[str, int],
        unconsumed: Iterable[str] = (),
    ) -> dict[str, int] | None:
        signature = (tuple(sorted(sent.items())), tuple(sorted(done.items())))
        if signature != self._signature:
            self._signature = signature
            self._since = now
            self._reported = False
            return None
        missing = unhandled(sent, done, unconsumed)
        if not missing or self._reported or now - self._since < self.after:
            return None
        self._reported = True
        return missing


def describe(missing: Mapping[str, int], seconds: float) -> str:
    """One line naming each topic short of handled messages."""
    parts = ", ".join(
        f"{count} {name} message{'s' if count != 1 else ''}" for name, count in missing.items()
    )
    return (
        f"no progress for {seconds:.0f}s with {parts} sent and not handled: "
        "the crawl cannot go idle while they are missing"
    )


def first_skipped(read: int | None, committed: int | None, offset: int) -> int | None:
    """The first offset a fetch passed over to hand on `offset`, or None if none was.

    `read` is Faust's read offset of the partition (None before the first record):
    the last offset handed on, except right after a seek, where it is the next
    offset to read. `committed` is its last commit (the next offset to read). A
    jump over offsets below the commit is no loss: they were handled before a
    rebalance (by this worker or another), and after one Faust's read offset can lag
    the commit it seeks to.
    """
    if read is None:
        return None
    first = read + 1 if committed is None else max(read + 1, committed)
    return first if first < offset else None


class Refetches:
    """How often each partition's fetch was re-done from the same skipped offset.

    A skip is re-read at once; the same offset skipped again and again (a broker
    that keeps answering that way) is left, after `limit` tries, to the held
    commit and the stuck-partition rewind, so the consumer never loops on it.
    """

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self._tries: dict[Any, tuple[int, int]] = {}

    def allow(self, key: Any, offset: int) -> bool:
        last, tries = self._tries.get(key, (offset, 0))
        tries = tries + 1 if last == offset else 1
        self._tries[key] = (offset, tries)
        return tries <= self.limit


def rewind_offset(entry: Mapping[str, Any]) -> int | None:
    """Where to re-read a partition its consumer is stuck on, or None if it is not.

    `entry` is one partition of `streams.kafka.consumer_state.lagging_partitions`. In the
    order checked: a commit held behind the last offset handed to the agent (the
    commit guard refuses to pass an offset never acknowledged: a message between
    the commit and the read offset was dropped on the way to the agent) re-reads
    from the commit; records fetched and never handed on re-read from the first of
    them; a fetch position short of the high watermark re-reads from the position.
    Re-reading hands some messages to their agent twice, which every stage takes
    (a rebalance does the same).
    """
    high, position = entry.get("high"), entry.get("position")
    read, committed = entry.get("read"), entry.get("committed")
    # Faust's read offset is the last offset handed on, except right after a seek,
    # where it is the next one to read: a commit below it is held either way.
    handed = read + 1 if read is not None else committed
    if held_commit(entry):
        return int(entry["committed"])
    if position is not None and handed is not None and handed < position:
        return int(handed)
    if position is not None and high is not None and position < high:
        return int(position)
    return None


def held_commit(entry: Mapping[str, Any]) -> bool:
    """Does a partition's commit stand behind the last offset handed to its agent?"""
    read, committed = entry.get("read"), entry.get("committed")
    return committed is not None and read is not None and committed < read


def unfinished(entries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The partitions of a worker's status (`lagging`) with records still to hand on
    or a message never handled (`rewind_offset`): a crawl is not idle while any
    worker has one, whatever its counters say (a message dropped on its way to the
    agent is passed by the offsets handled after it)."""
    return [entry for entry in entries if "topic" in entry and rewind_offset(entry) is not None]


class StuckPartitions:
    """Partitions whose consumer state stood still, stuck, while the worker was idle.

    `observe` gets this worker's lagging partitions and a signature of its
    activity (its sent and handled counters) at each tick. A partition whose
    offsets and the worker's activity have not changed for `after` seconds, and
    that has somewhere to re-read from (`rewind_offset`), is returned once with
    that offset; a partition that moves, or any activity, restarts its clock.
    `after` is well over the commit interval, so a commit merely not yet made is
    never taken for a held one.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._activity: Any = None
        self._since: dict[tuple[str, int], tuple[Any, float]] = {}
        self._done: set[tuple[str, int, Any]] = set()

    def observe(
        self, now: float, entries: Iterable[Mapping[str, Any]], activity: Any
    ) -> list[tuple[str, int, int]]:
        if activity != self._activity:
            self._activity = activity
            self._since.clear()
        due: list[tuple[str, int, int]] = []
        current: dict[tuple[str, int], tuple[Any, float]] = {}
        for entry in entries:
            if "topic" not in entry:
                continue
            key = (str(entry["topic"]), int(entry["partition"]))
            state = tuple(entry.get(k) for k in ("high", "position", "read", "committed"))
            seen = self._since.get(key)
            since = seen[1] if seen is not None and seen[0] == state else now
            current[key] = (state, since)
            offset = rewind_offset(entry)
            if offset is None or now - since < self.after or (*key, state) in self._done:
                continue
            self._done.add((*key, state))
            due.append((key[0], key[1], offset))
        self._since = current
        return due
