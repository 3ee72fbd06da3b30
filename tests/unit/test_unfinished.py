"""A multi-worker crawl does not end while a worker holds a partition at a message it
never handled, even when the counters and the offsets handled say it is idle."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core.stall import held_commit, unfinished
from streams.ops.ending import UnfinishedWait, unfinished_partitions
from streams.ops.multiworker import globally_idle


def entry(**offsets: Any) -> dict[str, Any]:
    base = {"topic": "a.content-dedup", "partition": 0, "high": 100, "position": 100}
    return {**base, "read": 99, "committed": 100, "paused": False, **offsets}


def test_a_commit_behind_the_read_offset_is_held() -> None:
    assert held_commit(entry(committed=15))
    assert not held_commit(entry())
    assert not held_commit(entry(read=15, committed=15))  # right after a seek
    assert not held_commit(entry(read=None, committed=None))


def test_unfinished_are_held_or_not_handed_on_to_the_end() -> None:
    assert unfinished([entry(committed=15)]) == [entry(committed=15)]
    assert unfinished([entry(position=90, read=89, committed=90)])  # fetch behind
    assert unfinished([entry(read=89, committed=90)])  # fetched, not handed on
    assert not unfinished([entry(paused=True)])  # paused, with nothing left
    assert not unfinished([{"error": "RuntimeError: gone"}])


def test_balanced_counters_and_offsets_do_not_end_a_crawl_with_a_held_message() -> None:
    """What a restarted worker left: content-dedup[0] read to 99, committed 15 (offset
    15 never reached its agent), the counts balanced by messages handled twice, and
    the offsets handled past 15 by the other worker."""
    held = entry(committed=15)
    statuses = [
        {"sent": {"content-dedup": 40}, "done": {"content-dedup": 41}, "busy": False,
         "rebalancing": False, "handled_upto": [["a.content-dedup", 0, 100]],
         "lagging": [held]},
        {"sent": {"content-dedup": 60}, "done": {"content-dedup": 59}, "busy": False,
         "rebalancing": False, "delivered_upto": [["a.content-dedup", 0, 100]],
         "lagging": []},
    ]  # fmt: skip
    assert globally_idle(statuses, 0)  # what the counters and offsets say
    assert unfinished_partitions(statuses) == ["worker-0 a.content-dedup[0] at offset 15"]
    wait = UnfinishedWait(patience=40.0)
    assert wait.holds(0.0, unfinished_partitions(statuses))
    statuses[0]["lagging"] = []  # read again and handled
    assert not wait.holds(5.0, unfinished_partitions(statuses))


def test_a_partition_that_never_settles_ends_the_crawl_after_patience(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wait = UnfinishedWait(patience=40.0)
    where = ["worker-1 a.parse[3] at offset 7"]
    assert wait.holds(100.0, where)
    assert wait.holds(139.9, where)
    assert capsys.readouterr().err == ""
    assert not wait.holds(140.0, where)
    assert "partitions not handled to the end after 40s: worker-1 a.parse[3]" in (
        capsys.readouterr().err
    )
    assert not wait.holds(140.1, where)  # the crawl is ending: the line is not repeated
    assert capsys.readouterr().err == ""
    assert wait.holds(141.0, []) is False
    assert wait.holds(142.0, where)  # a new wait starts its own clock
