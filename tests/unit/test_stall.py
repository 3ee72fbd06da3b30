"""A multi-worker crawl whose counters stopped with a message unhandled says so."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.core.stall import StallWatch, StuckPartitions, rewind_offset, unfinished, unhandled
from streams.kafka.consumer_state import describe, lagging_partitions
from streams.ops.multiworker import (
    IDLE_SECONDS,
    UNCONSUMED,
    globally_idle,
    idle_confirmed,
    stall_report,
    totals,
    unowned,
)


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


def test_not_idle_while_a_message_of_ours_waits_behind_others_handled() -> None:
    """Counts balance (the seed topic's poison stood in for the seed), but worker 1 has
    not handled the seed pushed to partition 0, nor worker 0's url-seen batch."""
    seeds_upto = {("a.seeds", 0): 1}
    statuses = [
        status(
            {"url-seen": 1},
            {"seeds": 3, "url-seen": 1},
            delivered_upto=[["a.url-seen", 1, 8]],
            handled_upto=[["a.seeds", 1, 3], ["a.url-seen", 0, 1]],
        ),
        status({}, {}, delivered_upto=[], handled_upto=[["a.url-seen", 1, 7]]),
    ]
    assert not globally_idle(statuses, 1, seeds_upto)
    statuses[1]["handled_upto"] = [["a.url-seen", 1, 8], ["a.seeds", 0, 1]]
    assert globally_idle(statuses, 1, seeds_upto)
    # handled by the partition's previous owner (before a rebalance) counts too
    statuses[1]["handled_upto"] = [["a.url-seen", 1, 8]]
    statuses[0]["handled_upto"].append(["a.seeds", 0, 1])
    assert globally_idle(statuses, 1, seeds_upto)


def test_idle_is_confirmed_only_by_statuses_written_after_it_began() -> None:
    """A starved worker's last status is a picture from before the idle period: it may
    not show what that worker sent since, so it cannot confirm the crawl idle."""
    began = 1000.0
    fresh, stale = {"at": began + 0.3}, {"at": began - 0.1}
    later = began + IDLE_SECONDS
    assert idle_confirmed([fresh, dict(fresh)], began, later)
    assert not idle_confirmed([fresh, dict(fresh)], began, later - 0.01)  # not long enough
    assert not idle_confirmed([fresh, stale], began, later + 60)  # however long it waits
    assert not idle_confirmed([fresh, {}], began, later)  # a status without a time
    stale["at"] = later + 0.2  # the starved worker writes again, still idle
    assert idle_confirmed([fresh, stale], began, later + 0.25)


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

    from streams.kafka.patches.commit_guard import guard_commits
    from streams.kafka.patches.gap_hold import hold_gaps

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


def test_first_skipped_offset() -> None:
    from streams.core.stall import first_skipped

    assert first_skipped(13, 6, 14) is None  # the next offset
    assert first_skipped(13, 6, 15) == 14  # 14 never came
    assert first_skipped(13, 6, 13) is None  # a repeat, not a jump
    assert first_skipped(None, 6, 15) is None  # nothing handed yet
    assert first_skipped(3, 9, 9) is None  # below the commit: handled before a rebalance
    assert first_skipped(3, 9, 11) == 9
    assert first_skipped(0, None, 2) == 1  # Faust misses this one (read offset 0 is falsy)


def test_refetches_give_up_on_an_offset_skipped_again_and_again() -> None:
    from streams.core.stall import Refetches

    tries = Refetches(limit=2)
    assert tries.allow("a", 14) and tries.allow("a", 14)
    assert not tries.allow("a", 14)
    assert tries.allow("a", 20)  # another offset starts again
    assert tries.allow("b", 14)


class FakeKafka:
    def __init__(self, fail: bool = False) -> None:
        self.seeks: list[tuple[Any, int]] = []
        self.fail = fail

    def seek(self, tp: Any, offset: int) -> None:
        if self.fail:
            raise RuntimeError("not assigned")
        self.seeks.append((tp, offset))


class FakeThread:
    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka

    def _ensure_consumer(self) -> FakeKafka:
        return self.kafka

    async def call_thread(self, fun: Any, *args: Any) -> Any:
        return fun(*args)


def fake_consumer(
    read: dict[Any, int], committed: dict[Any, int], kafka: FakeKafka, rebalancing: bool = False
) -> Any:
    import logging

    return SimpleNamespace(
        app=SimpleNamespace(
            topics=SimpleNamespace(acks_enabled_for=lambda t: t != "changelog"),
            rebalancing=rebalancing,
        ),
        flow_active=True,
        generation=1,
        _read_offset=dict(read),
        _committed_offset=dict(committed),
        log=logging.getLogger("test"),
        _thread=FakeThread(kafka),
    )


def drain(consumer: Any, batch: list[tuple[Any, int]], tries: Any) -> list[tuple[str, int]]:
    """What Faust's drain loop hands on from one getmany batch: it records each
    offset as the partition's read offset before taking the next record."""
    import asyncio

    from streams.kafka.patches.refetch import refetch_skipped

    async def records() -> Any:
        for tp_, offset in batch:
            yield tp_, SimpleNamespace(offset=offset, generation_id=consumer.generation)

    async def run() -> list[tuple[str, int]]:
        handed = []
        async for tp_, message in refetch_skipped(consumer, records(), tries):
            consumer._read_offset[tp_] = message.offset
            handed.append((tp_.topic, message.offset))
        return handed

    return asyncio.run(run())


def test_a_fetch_that_skipped_an_offset_is_done_again_from_it() -> None:
    from streams.core.stall import Refetches

    a, b = tp("link-extract", 0), tp("parse", 0)
    kafka = FakeKafka()
    consumer = fake_consumer({a: 4, b: 2}, {a: 5, b: 3}, kafka)
    tries = Refetches()
    # offset 7 of `a` never came: 8 and 9 are not handed on, the fetch goes back to 7
    handed = drain(consumer, [(a, 5), (b, 3), (a, 6), (b, 4), (a, 8), (a, 9)], tries)
    assert handed == [("link-extract", 5), ("parse", 3), ("link-extract", 6), ("parse", 4)]
    assert kafka.seeks == [(a, 7)]
    assert consumer._seine_refetches == 1
    # the next fetch brings 7, then 8 and 9 again: each handed on once
    assert drain(consumer, [(a, 7), (a, 8), (a, 9)], tries) == [
        ("link-extract", 7),
        ("link-extract", 8),
        ("link-extract", 9),
    ]
    assert kafka.seeks == [(a, 7)]


def test_a_jump_right_after_a_seek_is_left_to_the_held_commit() -> None:
    from streams.core.stall import Refetches

    # After a seek (a rebalance's recovery, a rewind) Faust's read offset is the next
    # offset to read, and a fetch from before the seek may still hand on records past
    # it, which this worker may have handled before the seek: not re-read here
    # (hold_gaps holds the commit), and neither is a jump in another generation.
    a = tp("url-filter", 5)
    kafka = FakeKafka()
    consumer = fake_consumer({a: 29}, {a: 29}, kafka)
    tries = Refetches()
    assert drain(consumer, [(a, 41)], tries) == [("url-filter", 41)]
    consumer.generation = 2
    consumer._read_offset[a] = 41
    assert drain(consumer, [(a, 43)], tries) == [("url-filter", 43)]
    assert kafka.seeks == []


def test_no_refetch_while_the_app_rebalances() -> None:
    from streams.core.stall import Refetches

    a = tp("url-filter", 5)
    kafka = FakeKafka()
    consumer = fake_consumer({a: 29}, {a: 29}, kafka, rebalancing=True)
    assert drain(consumer, [(a, 30), (a, 41)], Refetches()) == [
        ("url-filter", 30),
        ("url-filter", 41),
    ]
    assert kafka.seeks == []


def test_what_is_not_a_skip_is_handed_on_as_faust_would() -> None:
    from streams.core.stall import Refetches

    a, log = tp("link-extract", 0), tp("changelog", 0)
    kafka = FakeKafka()
    # a jump over offsets below the commit (read offset behind it after a rebalance),
    # a repeat after a rewind, and a compacted changelog's jumps
    consumer = fake_consumer({a: 3, log: 0}, {a: 9}, kafka)
    handed = drain(consumer, [(a, 9), (a, 10), (a, 10), (log, 5), (log, 9)], Refetches())
    assert handed == [("link-extract", 9), ("link-extract", 10), ("link-extract", 10),
                      ("changelog", 5), ("changelog", 9)]  # fmt: skip
    assert kafka.seeks == []


def test_a_skip_that_keeps_coming_back_is_left_to_the_held_commit() -> None:
    from streams.core.stall import Refetches

    a = tp("link-extract", 0)
    kafka = FakeKafka()
    consumer = fake_consumer({a: 6}, {a: 7}, kafka)
    tries = Refetches(limit=2)
    assert drain(consumer, [(a, 7), (a, 9)], tries) == [("link-extract", 7)]
    assert drain(consumer, [(a, 9)], tries) == []
    assert drain(consumer, [(a, 9)], tries) == [("link-extract", 9)]  # hold_gaps' turn
    assert kafka.seeks == [(a, 8), (a, 8)]
    # a seek that fails (the partition revoked meanwhile) hands on as Faust would
    failing = fake_consumer({a: 6}, {a: 7}, FakeKafka(fail=True))
    assert drain(failing, [(a, 7), (a, 9)], Refetches()) == [
        ("link-extract", 7),
        ("link-extract", 9),
    ]


def test_not_idle_while_a_host_partition_has_no_worker() -> None:
    """A worker died and its replacement has not joined yet: the survivor holds its
    own partitions and has nothing to do, but the dead worker's queue waits unseen."""
    statuses = [status({}, {}, partitions=[0, 1]), status({}, {}, partitions=[])]
    assert globally_idle(statuses, 0)  # no partition count: not checked
    assert not globally_idle(statuses, 0, partitions=4)
    assert unowned(statuses, 4) == {2, 3}
    statuses[1]["partitions"] = [2, 3]
    assert globally_idle(statuses, 0, partitions=4)


def test_a_partition_never_committed_shows_what_it_handed_on_past_its_head() -> None:
    # A worker that took over a partition nobody committed seeks to its head (the
    # commit guard). Until its first commit, offsets handed on past the head are
    # held work: the crawl must not end before that commit (or the re-read of a
    # message it never handled) is made.
    fresh, settled = tp("a", 0), tp("a", 1)
    states = {fresh: FakeState(93, 93), settled: FakeState(10, 10)}
    app = fake_app(states, {fresh: 92, settled: 9})
    app.consumer._committed_offset = {fresh: None, settled: 10}
    app.consumer._seine_heads = {fresh: 0}
    found = lagging_partitions(app, ["a"])
    assert [(e["partition"], e["read"], e["committed"]) for e in found] == [(0, 92, 0)]
    assert found[0]["head"] is True
    assert "nothing committed yet (head 0)" in describe("worker-0", found)[0]
    assert [e["partition"] for e in unfinished(found)] == [0]
    assert rewind_offset(found[0]) == 0
    # without a known head (its seek has not answered yet) nothing is claimed
    app.consumer._seine_heads = {}
    assert lagging_partitions(app, ["a"]) == []
