"""Which changelog partitions a table recovery is stuck on, and where to read them again
(streams/kafka/patches/recovery_kick.py, `stalled_partitions`)."""

from __future__ import annotations

from streams.kafka.patches.recovery_kick import stalled_partitions

AFTER = 10.0


def test_a_partition_with_records_left_and_no_event_since_the_start_is_read_from_zero() -> None:
    # Faust's bookkeeping: highwater 22 (its last offset), nothing applied (-1)
    due = stalled_partitions(110.0, 100.0, {"hosts-5": 22}, {"hosts-5": -1}, {}, {}, AFTER)
    assert due == {"hosts-5": 0}


def test_it_is_read_again_from_the_record_after_the_last_one_applied() -> None:
    due = stalled_partitions(
        130.0, 100.0, {"queue-4": 39}, {"queue-4": 17}, {"queue-4": 115.0}, {}, AFTER
    )
    assert due == {"queue-4": 18}


def test_a_partition_quiet_for_less_than_the_limit_is_left_alone() -> None:
    assert stalled_partitions(109.9, 100.0, {"a": 5}, {"a": -1}, {}, {}, AFTER) == {}
    assert stalled_partitions(120.0, 100.0, {"a": 5}, {"a": 2}, {"a": 111.0}, {}, AFTER) == {}


def test_a_caught_up_or_empty_partition_is_never_stuck() -> None:
    highwaters = {"done": 7, "empty": -1, "unknown": None}
    offsets = {"done": 7, "empty": -1, "unknown": -1}
    assert stalled_partitions(500.0, 100.0, highwaters, offsets, {}, {}, AFTER) == {}


def test_an_offset_not_known_yet_is_not_stuck() -> None:
    assert stalled_partitions(500.0, 100.0, {"a": 5}, {"a": None}, {}, {}, AFTER) == {}
    assert stalled_partitions(500.0, 100.0, {"a": 5}, {}, {}, {}, AFTER) == {}


def test_a_kick_restarts_the_clock() -> None:
    # kicked at 112: not again before 122, then again from the same place
    high, applied, kicked = {"a": 5}, {"a": -1}, {"a": 112.0}
    assert stalled_partitions(121.0, 100.0, high, applied, {}, kicked, AFTER) == {}
    assert stalled_partitions(122.0, 100.0, high, applied, {}, kicked, AFTER) == {"a": 0}


def test_only_the_stuck_partitions_of_a_recovery_are_named() -> None:
    highwaters = {"sites-4": 0, "sites-5": 1, "queue-4": 39, "queue-5": 72}
    offsets = {"sites-4": -1, "sites-5": 0, "queue-4": 30, "queue-5": 72}
    last_event = {"sites-5": 101.0, "queue-4": 129.0}
    due = stalled_partitions(130.0, 100.0, highwaters, offsets, last_event, {}, AFTER)
    assert due == {"sites-4": 0, "sites-5": 1}


def test_no_recovery_or_a_watchdog_turned_off_names_nothing() -> None:
    assert stalled_partitions(500.0, None, {"a": 5}, {"a": -1}, {}, {}, AFTER) == {}
    assert stalled_partitions(500.0, 100.0, {"a": 5}, {"a": -1}, {}, {}, 0.0) == {}
