"""A multi-worker crawl whose counters stopped with a message unhandled says so."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.consumer_state import lagging_partitions
from streams.core.stall import StallWatch, StuckPartitions, rewind_offset, unhandled
from streams.multiworker import UNCONSUMED, globally_idle, stall_report, totals


def status(sent: dict[str, int], done: dict[str, int], **extra: Any) -> dict[str, Any]:
    return {
        "sent": sent,
        "done": done,
        "busy": False,
        "rebalancing": False,
        "queued": 0,
        "in_flight": 0,
        **extra,
    }


# The evidence of the stuck bench crawl: content-dedup 948 + 1121 sent, 1067 + 1001 done.
STUCK = [
    status({"content-dedup": 948, "crawl-log": 4739}, {"content-dedup": 1067, "seeds": 101}),
    status({"content-dedup": 1121, "crawl-log": 4641}, {"content-dedup": 1001, "seeds": 99}),
]


def test_unhandled_names_only_short_consumed_topics() -> None:
    sent, done = totals(STUCK, 200)
    assert unhandled(sent, done, UNCONSUMED) == {"content-dedup": 1}
    assert not globally_idle(STUCK, 200)


def test_stall_reported_once_after_the_counters_stand_still() -> None:
    watch = StallWatch(after=30.0)
    sent, done = totals(STUCK, 200)
    assert watch.observe(0.0, sent, done, UNCONSUMED) is None
    assert watch.observe(29.0, sent, done, UNCONSUMED) is None
    assert watch.observe(30.0, sent, done, UNCONSUMED) == {"content-dedup": 1}
    assert watch.observe(31.0, sent, done, UNCONSUMED) is None  # said once
    # progress re-arms it, and restarts the clock
    done2 = done.copy()
    sent2 = sent.copy()
    sent2["url-seen"] += 1
    assert watch.observe(40.0, sent2, done2, UNCONSUMED) is None
    assert watch.observe(69.0, sent2, done2, UNCONSUMED) is None
    assert watch.observe(70.0, sent2, done2, UNCONSUMED) == {"content-dedup": 1, "url-seen": 1}


def test_a_slow_crawl_is_not_a_stall() -> None:
    watch = StallWatch(after=30.0)
    for second in range(200):
        sent = {"parse": second + 5}
        done = {"parse": second}
        assert watch.observe(float(second), sent, done) is None


def test_a_balanced_pause_is_not_a_stall() -> None:
    watch = StallWatch(after=30.0)
    for second in range(100):
        assert watch.observe(float(second), {"parse": 5}, {"parse": 5}) is None


def test_report_names_topic_count_and_where_the_consumer_stands() -> None:
    lagging = {
        "topic": "seine.content-dedup",
        "partition": 2,
        "high": 520,
        "position": 519,
        "read": 518,
        "committed": 519,
        "paused": True,
        "buffered": False,
        "active": False,
    }
    statuses = [STUCK[0], {**STUCK[1], "lagging": [lagging]}]
    text = stall_report(statuses, {"content-dedup": 1}, 30.0)
    assert "1 content-dedup message sent and not handled" in text
    assert "worker-1 seine.content-dedup[2]: high watermark 520, fetch position 519" in text
    assert "last handed to the agent 518, committed 519 (paused, inactive)" in text


def tp(topic: str, partition: int) -> TP:
    return TP(topic, partition)


class FakeState:
    def __init__(self, high: int | None, position: int | None, paused: bool = False) -> None:
        self.highwater = high
        self._position = position
        self.paused = paused


def fake_app(states: dict[Any, FakeState], read: dict[Any, int]) -> Any:
    tps = list(states)
    assignment = SimpleNamespace(state_value=states.get)
    kafka = SimpleNamespace(
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment))
    )
    consumer = SimpleNamespace(
        _thread=SimpleNamespace(_consumer=kafka),
        _active_partitions=set(tps),
        _paused_partitions=set(),
        _buffered_partitions=set(),
        _read_offset=read,
        _committed_offset={t: read[t] + 1 for t in read},
        assignment=lambda: tps,
    )
    return SimpleNamespace(consumer=consumer)


def test_lagging_partitions_lists_only_partitions_not_caught_up() -> None:
    caught_up, unfetched, undelivered, other = (
        tp("a", 0),
        tp("a", 1),
        tp("a", 2),
        tp("crawl-log", 0),
    )
    states = {
        caught_up: FakeState(10, 10),
        unfetched: FakeState(10, 9),
        undelivered: FakeState(10, 10),
        other: FakeState(10, 0),
    }
    app = fake_app(states, {caught_up: 9, unfetched: 8, undelivered: 8, other: 0})
    found = lagging_partitions(app, ["a"])
    assert [(e["partition"], e["high"], e["position"], e["read"]) for e in found] == [
        (1, 10, 9, 8),
        (2, 10, 10, 8),
    ]


def entry(**offsets: int | None) -> dict[str, Any]:
    return {"topic": "seine.content-dedup", "partition": 2, **offsets}


def test_rewind_offset_from_the_held_commit_first() -> None:
    # the commit guard holds the commit at the dropped message's offset
    assert rewind_offset(entry(high=520, position=520, read=519, committed=511)) == 511
    # fetched, never handed on
    assert rewind_offset(entry(high=520, position=520, read=515, committed=516)) == 516
    # fetch position short of the high watermark
    assert rewind_offset(entry(high=520, position=518, read=517, committed=518)) == 518
    # caught up: nothing to re-read
    assert rewind_offset(entry(high=520, position=520, read=519, committed=520)) is None
    assert rewind_offset(entry(high=None, position=None, read=None, committed=None)) is None
    # right after a seek Faust's read offset is the next offset, not the last handed
    assert rewind_offset(entry(high=29, position=29, read=29, committed=29)) is None


def test_stuck_partition_rewound_once_after_standing_still_while_idle() -> None:
    stuck = StuckPartitions(after=15.0)
    held = entry(high=520, position=520, read=519, committed=511)
    idle = ("counters", 1)
    assert stuck.observe(0.0, [held], idle) == []
    assert stuck.observe(14.0, [held], idle) == []
    assert stuck.observe(15.0, [held], idle) == [("seine.content-dedup", 2, 511)]
    assert stuck.observe(16.0, [held], idle) == []  # once for this state


def test_activity_or_movement_restarts_the_clock() -> None:
    stuck = StuckPartitions(after=15.0)
    held = entry(high=520, position=520, read=519, committed=511)
    for second in range(60):  # the worker keeps handling messages: never rewound
        assert stuck.observe(float(second), [held], ("counters", second)) == []
    moving = StuckPartitions(after=15.0)
    for second in range(60):  # the partition moves: a commit merely not made yet
        e = entry(high=520 + second, position=520 + second, read=519 + second, committed=511)
        assert moving.observe(float(second), [e], "idle") == []
    assert moving.observe(75.0, [e], "idle") == [("seine.content-dedup", 2, 511)]


def test_a_skipped_offset_holds_the_commit_instead_of_counting_as_handled() -> None:
    import asyncio
    import logging
    from collections import defaultdict

    from faust.transport.consumer import Consumer
    from intervaltree import IntervalTree

    from streams.consumer_state import hold_gaps
    from streams.kafka_tuning import guard_commits

    guard_commits()
    hold_gaps()
    hold_gaps()  # installed once
    part = TP("seine.link-extract", 0)
    consumer = SimpleNamespace(
        _gap=defaultdict(IntervalTree),
        _acked={part: [6, 7]},  # 5 was skipped by the fetch; 6 and 7 handled
        _committed_offset={part: 5},
        log=logging.getLogger("test"),
    )
    asyncio.run(Consumer._add_gap(consumer, part, 5, 6))  # type: ignore[arg-type]
    assert not consumer._gap[part]  # Faust would have counted 5 as handled
    assert consumer._seine_skipped == 1
    assert Consumer._new_offset(consumer, part) is None  # type: ignore[arg-type]
    # a jump over offsets below the commit (handled before a rebalance) loses nothing
    consumer._committed_offset[part] = 9
    asyncio.run(Consumer._add_gap(consumer, part, 5, 8))  # type: ignore[arg-type]
    assert consumer._seine_skipped == 1
