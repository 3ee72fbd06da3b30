"""The parent of `seine crawl --workers N` kills a worker whose status stopped coming
(streams/ops/hung_workers.py): shared by index, nobody else would take its
partitions; in a group, the others would wait on its table locks."""

from __future__ import annotations

from streams.ops.hung_workers import hung, hung_limit
from streams.settings import load_settings


def test_a_worker_whose_status_is_older_than_the_limit_is_hung() -> None:
    statuses = [{"at": 100.0}, {"at": 50.0}, {"at": 89.0}]
    assert hung(statuses, now=100.0, after=10.0) == [1, 2]


def test_a_worker_still_starting_has_no_status_and_is_not_hung() -> None:
    assert hung([None, {"at": 99.5}], now=100.0, after=10.0) == []


def test_a_limit_of_zero_never_names_a_worker() -> None:
    assert hung([{"at": 0.0}], now=1000.0, after=0.0) == []


def test_in_a_group_a_silent_worker_is_killed_by_the_session_timeout() -> None:
    # the coordinator hands its partitions on then, and their tables are locked by it
    env = {"SEINE_HUNG_AFTER": "60", "SEINE_SESSION_TIMEOUT": "10"}
    assert hung_limit(load_settings(environ=env)) == 10.0
    assert hung_limit(load_settings(environ={**env, "SEINE_HUNG_AFTER": "3"})) == 3.0
    assert hung_limit(load_settings(environ={**env, "SEINE_HUNG_AFTER": "0"})) == 0.0


def test_shared_by_index_a_silent_worker_is_killed_after_hung_after() -> None:
    env = {"SEINE_HUNG_AFTER": "60", "SEINE_SESSION_TIMEOUT": "10", "SEINE_MEMBERS": "2"}
    assert hung_limit(load_settings(environ=env)) == 60.0


def test_a_worker_stopping_on_its_own_is_given_till_the_time_it_named() -> None:
    # a worker that lost its cluster stops its timers and exits by stopping_until
    stopping = {"at": 50.0, "stopping_until": 65.0}
    assert hung([stopping], now=70.0, after=6.0) == []
    assert hung([stopping], now=72.0, after=6.0) == [0]
    assert hung([{"at": 50.0, "stopping_until": None}], now=70.0, after=6.0) == [0]
