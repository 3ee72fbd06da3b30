"""Revisit intervals from observed change, and the revisit schedule (streams/core/freshness.py)."""

from __future__ import annotations

import pytest

from streams.core.freshness import (
    CHANGED,
    FIRST,
    UNCHANGED,
    RevisitPolicy,
    RevisitSchedule,
    conditional_headers,
    not_modified,
    observe,
)

POLICY = RevisitPolicy(min_interval=10.0, max_interval=160.0, initial_interval=40.0)


def visit(prev, fp, now=0.0, etag=None, lm=None):
    return observe(POLICY, prev, fingerprint=fp, etag=etag, last_modified=lm, depth=2, now=now)


def test_first_fetch_gets_the_initial_interval() -> None:
    record, change = visit(None, "a", now=100.0, etag='"v1"', lm="Mon, 01 Jan 2024 00:00:00 GMT")
    assert change == FIRST
    assert record["interval"] == 40.0 and record["next"] == 140.0
    assert record["etag"] == '"v1"' and record["visits"] == 1 and record["changes"] == 0


def test_change_halves_and_no_change_doubles_within_bounds() -> None:
    record, _ = visit(None, "a")
    intervals = []
    for fp in ["b", "c", "d", "e"]:  # changes every time → down to the minimum
        record, change = visit(record, fp)
        assert change == CHANGED
        intervals.append(record["interval"])
    assert intervals == [20.0, 10.0, 10.0, 10.0]
    intervals = []
    for _ in range(6):  # then stable → up to the maximum
        record, change = visit(record, "e")
        assert change == UNCHANGED
        intervals.append(record["interval"])
    assert intervals == [20.0, 40.0, 80.0, 160.0, 160.0, 160.0]
    assert record["changes"] == 4 and record["visits"] == 11


def test_a_304_counts_as_unchanged_and_keeps_validators() -> None:
    record, _ = visit(None, "a", etag='W/"x"', lm="Mon, 01 Jan 2024 00:00:00 GMT")
    after = not_modified(POLICY, record, now=50.0)
    assert after["interval"] == 80.0 and after["next"] == 130.0
    assert after["fp"] == "a" and after["etag"] == 'W/"x"' and after["visits"] == 2


def test_conditional_headers() -> None:
    assert conditional_headers(None) == {}
    assert conditional_headers({"etag": None, "lm": None}) == {}
    assert conditional_headers({"etag": '"v1"', "lm": "Mon, 01 Jan 2024 00:00:00 GMT"}) == {
        "If-None-Match": '"v1"',
        "If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT",
    }


def test_policy_rejects_nonsense_bounds() -> None:
    with pytest.raises(ValueError):
        RevisitPolicy(min_interval=0.0)
    with pytest.raises(ValueError):
        RevisitPolicy(min_interval=10.0, max_interval=5.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def schedule(track_all: bool = True) -> tuple[RevisitSchedule, dict, Clock]:
    records: dict = {}
    clock = Clock()
    parts = {"http://a.test/": 0, "http://a.test/x": 0, "http://b.test/": 1}
    return (
        RevisitSchedule(records, POLICY, lambda url: parts[url], track_all=track_all, clock=clock),
        records,
        clock,
    )


HEADERS = [("ETag", '"v1"'), ("Content-Type", "text/html")]


def test_schedule_makes_urls_due_per_partition() -> None:
    revisits, records, clock = schedule()
    assert revisits.fetched("http://a.test/", fingerprint="f", headers=HEADERS, depth=0) == FIRST
    revisits.fetched("http://b.test/", fingerprint="g", headers=[], depth=1)
    assert records["http://a.test/"]["etag"] == '"v1"'
    assert revisits.headers_for("http://a.test/") == {"If-None-Match": '"v1"'}
    assert revisits.headers_for("http://b.test/") == {}
    assert revisits.due(0) == [] and revisits.next_wake(0) == 1040.0
    clock.now = 1040.0
    assert revisits.due(0) == [("http://a.test/", 0)]
    assert revisits.due(1) == [("http://b.test/", 1)]
    # not fetched (yet): it stays scheduled one interval later as a fallback
    assert revisits.next_wake(0) == 1080.0
    clock.now = 1050.0
    assert revisits.fetched("http://a.test/", fingerprint="f2", headers=[], depth=0) == CHANGED
    assert revisits.next_wake(0) == 1070.0  # the fetch replaced the fallback
    clock.now = 1075.0
    assert revisits.due(0) == [("http://a.test/", 0)]
    assert revisits.scheduled() == 2


def test_304_grows_the_interval_in_the_schedule() -> None:
    revisits, records, clock = schedule()
    revisits.fetched("http://a.test/", fingerprint="f", headers=HEADERS, depth=0)
    clock.now = 1040.0
    assert revisits.unmodified("http://a.test/") is not None
    assert records["http://a.test/"]["interval"] == 80.0
    assert revisits.next_wake(0) == 1120.0
    assert revisits.unmodified("http://a.test/x") is None  # never fetched: nothing to do
    assert revisits.not_modified == 1


def test_adopt_rebuilds_only_the_partitions_urls() -> None:
    revisits, records, clock = schedule()
    revisits.fetched("http://a.test/", fingerprint="f", headers=[], depth=0)
    revisits.fetched("http://b.test/", fingerprint="g", headers=[], depth=0)
    again = RevisitSchedule(records, POLICY, revisits.partition_of, track_all=True, clock=clock)
    again.adopt(1, records.items())
    assert again.knows_partition(1) and not again.knows_partition(0)
    assert again.scheduled(1) == 1 and again.scheduled() == 1
    clock.now = 2000.0
    assert again.due(1) == [("http://b.test/", 0)]
    assert again.due(0) == []


def test_without_recrawl_records_are_kept_but_nothing_is_scheduled() -> None:
    revisits, records, _clock = schedule(track_all=False)
    revisits.fetched("http://a.test/", fingerprint="f", headers=HEADERS, depth=0)
    assert "http://a.test/" in records and revisits.scheduled() == 0
    revisits.adopt(0, records.items())
    assert revisits.scheduled() == 0


def test_refeed_now_or_when_due() -> None:
    revisits, _records, clock = schedule(track_all=False)
    assert revisits.refeed("http://a.test/x", when_due=True)  # no record: now
    revisits.fetched("http://a.test/", fingerprint="f", headers=[], depth=3)
    assert revisits.refeed("http://a.test/", when_due=False)  # asked for now: now
    assert not revisits.refeed("http://a.test/", when_due=True)  # due at 1040: later
    assert revisits.next_wake(0) == 1040.0
    clock.now = 1041.0
    assert revisits.due(0) == [("http://a.test/", 3)]
    assert revisits.scheduled() == 0  # without --recrawl it is not kept scheduled
    assert revisits.refeed("http://a.test/", when_due=True)  # its time has come
