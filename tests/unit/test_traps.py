"""URL-shape trap guards (streams.core.traps) and url-filter's use of them."""

from __future__ import annotations

import pytest

from streams.core.filters import FilterConfig, Rejection, filter_url, vet
from streams.core.traps import TrapRules, strip_session_ids, trap_reason

YEAR = TrapRules(this_year=2026)


def _deep(n: int) -> str:
    return "http://example.com/" + "/".join(f"s{i}" for i in range(n))


def test_too_long_boundary() -> None:
    prefix = "http://example.com/"
    assert trap_reason(prefix + "a" * (2048 - len(prefix))) is None
    assert trap_reason(prefix + "a" * (2049 - len(prefix))) == "too-long"


def test_repeated_segment() -> None:
    assert trap_reason("http://example.com/a/a/b/") is None  # twice is allowed
    assert trap_reason("http://example.com/a/a/a/") == "repeated-segment"
    assert trap_reason("http://example.com/x/a/a/a") == "repeated-segment"
    assert trap_reason("http://example.com/p?x=/a/a/a/") is None  # query is not path


def test_repeated_groups_of_segments() -> None:
    # a relative link "a/b/" on /a/b/ loops two segments at a time
    assert trap_reason("http://example.com/a/b/a/b/") is None
    assert trap_reason("http://example.com/a/b/a/b/a/b") == "repeated-segment"
    assert trap_reason("http://example.com/x/a/b/c/a/b/c/a/b/c/y") == "repeated-segment"
    assert trap_reason("http://example.com/a/b/c/a/b/c") is None
    assert trap_reason("http://example.com/a/b/a/c/a/d") is None  # "a" thrice, not in a row


def test_too_deep_boundary() -> None:
    assert trap_reason(_deep(20)) is None
    assert trap_reason(_deep(20) + "/") is None  # trailing slash adds no segment
    assert trap_reason(_deep(21)) == "too-deep"


def test_limits_come_from_the_rules_and_zero_turns_them_off() -> None:
    assert trap_reason(_deep(5), TrapRules(max_path_depth=4)) == "too-deep"
    assert trap_reason(_deep(50), TrapRules(max_path_depth=0)) is None
    assert trap_reason("http://example.com/a/a/", TrapRules(max_segment_repeats=1)) == (
        "repeated-segment"
    )
    assert trap_reason("http://example.com/a/a/a/a", TrapRules(max_segment_repeats=0)) is None
    assert trap_reason("http://example.com/abc", TrapRules(max_url_length=10)) == "too-long"
    assert trap_reason("http://example.com/" + "a" * 5000, TrapRules(max_url_length=0)) is None


def test_clean_urls() -> None:
    for url in ["http://example.com", "http://example.com/", "http://example.com/a/b/c.html?q"]:
        assert trap_reason(url, YEAR) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/calendar/2029/01/",
        "http://example.com/events/2029-01-15",
        "http://example.com/cal?year=2031&month=1",
        "http://example.com/cal?date=2040-02-03",
        "http://example.com/cal?month=1975-12",
        "http://example.com/archive/1960/05/",
    ],
)
def test_calendar_dates_outside_the_window_are_traps(url: str) -> None:
    assert trap_reason(url, YEAR) == "calendar"


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/calendar/2028/12/",  # two years ahead is in
        "http://example.com/archive/1976/01/",  # fifty years back is in
        "http://example.com/cal?year=2026&month=11",
        "http://example.com/item/20290115",  # a number, not a date
        "http://example.com/p/12029-01",  # inside a number
        "http://example.com/page?id=2031",  # not a date's key
        "http://example.com/iso/2031",  # a year alone is no calendar
    ],
)
def test_dates_inside_the_window_and_other_numbers_pass(url: str) -> None:
    assert trap_reason(url, YEAR) is None


def test_calendar_window_sides_turn_off() -> None:
    assert trap_reason("http://example.com/c/2100/01/", TrapRules(this_year=0)) is None
    ahead_off = TrapRules(this_year=2026, calendar_years_ahead=-1)
    assert trap_reason("http://example.com/c/2100/01/", ahead_off) is None
    assert trap_reason("http://example.com/c/1900/01/", ahead_off) == "calendar"
    back_off = TrapRules(this_year=2026, calendar_years_back=-1)
    assert trap_reason("http://example.com/c/1900/01/", back_off) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://a.example/p;jsessionid=ABC123", "http://a.example/p"),
        ("http://a.example/p;JSESSIONID=abc?x=1", "http://a.example/p?x=1"),
        ("http://a.example/p?PHPSESSID=f00&page=2", "http://a.example/p?page=2"),
        ("http://a.example/p?page=2&sid=9a8b7c", "http://a.example/p?page=2"),
        ("http://a.example/p?ASPSESSIONIDQQ=XYZ", "http://a.example/p"),
        ("http://a.example/p?sessionid=1&session_id=2#top", "http://a.example/p#top"),
        ("http://a.example/p?side=1&sidebar=2", "http://a.example/p?side=1&sidebar=2"),
        ("http://a.example/p?page=2", "http://a.example/p?page=2"),
    ],
)
def test_session_ids_are_dropped(url: str, expected: str) -> None:
    assert strip_session_ids(url) == expected


def test_url_filter_drops_session_ids_unless_kept() -> None:
    url = "http://a.example/p?page=2&PHPSESSID=f00"
    assert vet(url) == "http://a.example/p?page=2"
    assert vet(url, TrapRules(strip_session_ids=False)) == url
    config = FilterConfig(traps=YEAR)
    assert filter_url("http://a.example/c/2099/01/", 1, config, set()) == Rejection(
        "trap guard: calendar"
    )
