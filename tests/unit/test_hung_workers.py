"""The parent of workers that share the partitions by index kills a worker whose
status stopped coming (streams/ops/multiworker.py, `hung`): nobody else would take
its partitions."""

from __future__ import annotations

from streams.ops.multiworker import hung


def test_a_worker_whose_status_is_older_than_the_limit_is_hung() -> None:
    statuses = [{"at": 100.0}, {"at": 50.0}, {"at": 89.0}]
    assert hung(statuses, now=100.0, after=10.0) == [1, 2]


def test_a_worker_still_starting_has_no_status_and_is_not_hung() -> None:
    assert hung([None, {"at": 99.5}], now=100.0, after=10.0) == []


def test_a_limit_of_zero_never_names_a_worker() -> None:
    assert hung([{"at": 0.0}], now=1000.0, after=0.0) == []
