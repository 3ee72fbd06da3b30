"""Unit tests for streams.core.frontier: the politeness clock, 429/503 retries,
robots.txt outcomes and expiry, connection errors and the page budget."""

from __future__ import annotations

import pytest

from streams.core.frontier import (
    MAX_ERROR_BACKOFF,
    MAX_RETRIES,
    PARK_AFTER_ERRORS,
    ROBOTS_MAX_TRIES,
    Politeness,
)
from tests.unit.frontier_helpers import Clock, Harness, urls

# -- the politeness clock ---------------------------------------------------------


def test_delay_after_finish() -> None:
    h = Harness(Politeness(delay=2.0))
    h.open_host("a.example", b"", "/1", "/2")
    h.clock.advance(2.0)  # robots.txt counts as a request too
    (first,) = h.dispatched()
    h.finish(first, after=5.0)
    finished = h.clock()
    assert h.frontier.next_wake(0) == finished + 2.0
    h.clock.advance(1.999)
    assert h.dispatched() == []
    h.clock.advance(0.001)
    (second,) = h.dispatched()
    assert second.url == "http://a.example/2"
    assert second.dispatched_at >= finished + 2.0


def test_robots_crawl_delay_spaces_pages_and_the_first_page() -> None:
    h = Harness(Politeness(delay=1.0))
    h.frontier.enqueue("http://a.example/1")
    h.frontier.enqueue("http://a.example/2")
    (robots,) = h.dispatched()
    h.finish(robots, after=0.5, body=b"User-agent: *\nCrawl-delay: 5\n")
    robots_done = h.clock()
    h.clock.advance(4.9)
    assert h.dispatched() == []  # Crawl-delay counts from the robots.txt fetch too
    h.clock.advance(0.1)
    (first,) = h.dispatched()
    assert first.dispatched_at == robots_done + 5.0
    h.finish(first, after=1.0)
    h.clock.advance(4.9)
    assert h.dispatched() == []
    h.clock.advance(0.1)
    assert urls(h.dispatched()) == ["http://a.example/2"]


def test_robots_crawl_delay_is_capped() -> None:
    h = Harness(Politeness(max_crawl_delay=10.0))
    h.open_host("a.example", b"User-agent: *\nCrawl-delay: 100000\n", "/1", "/2")
    h.clock.advance(10.0)
    (first,) = h.dispatched()
    h.finish(first)
    h.clock.advance(9.99)
    assert h.dispatched() == []
    h.clock.advance(0.01)
    assert urls(h.dispatched()) == ["http://a.example/2"]


def test_crawl_delay_for_our_agent_group() -> None:
    robots = b"User-agent: SeineBot\nCrawl-delay: 3\n\nUser-agent: *\nCrawl-delay: 50\n"
    h = Harness(Politeness(user_agent="SeineBot/0.1 (+https://example.invalid)"))
    h.open_host("a.example", robots, "/1", "/2")
    h.clock.advance(3.0)
    (first,) = h.dispatched()
    h.finish(first)
    assert h.frontier.next_wake(0) == h.clock() + 3.0


def test_response_time_factor() -> None:
    h = Harness(Politeness(delay=1.0, response_time_factor=2.0))
    h.open_host("a.example", b"", "/1", "/2")
    h.clock.advance(10)
    (first,) = h.dispatched()
    h.finish(first, elapsed_ms=1500.0)  # 2 × 1.5 s = 3 s > delay
    h.clock.advance(2.99)
    assert h.dispatched() == []
    h.clock.advance(0.01)
    assert len(h.dispatched()) == 1


def test_a_page_is_not_retried_when_the_server_asks_for_a_long_wait() -> None:
    h = Harness(Politeness(max_retry_wait=10.0))
    h.open_host("a.example", b"", "/1", "/2")
    (d,) = h.dispatched()
    (backoff,) = h.finish(d, 503, retry_after=120.0)
    assert backoff.reason == "HTTP 503, Retry-After 120 s: host waits 120 s, page given up"
    h.check_counters()
    h.clock.advance(120.0)
    assert urls(h.dispatched()) == ["http://a.example/2"]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_on_429_and_503(status: int) -> None:
    h = Harness(Politeness(delay=1.0, max_retry_wait=60.0))
    h.open_host("a.example", b"", "/1", "/2")
    h.clock.advance(1.0)
    (first,) = h.dispatched()
    (backoff,) = h.finish(first, status, retry_after=40.0)
    assert (backoff.url, backoff.outcome) == ("http://a.example/1", "backoff")
    assert f"HTTP {status}, Retry-After 40 s: host waits 40 s" in backoff.reason
    h.check_counters()
    h.clock.advance(39.9)
    assert h.dispatched() == []
    h.clock.advance(0.1)
    # "not now" is not "no": the page is asked again first, once the host may be asked
    assert urls(h.dispatched()) == ["http://a.example/1"]


def test_a_throttled_page_is_retried_a_few_times_then_given_up() -> None:
    h = Harness()
    h.open_host("a.example", b"", "/1", "/2")
    reasons = []
    for _ in range(MAX_RETRIES + 1):
        (d,) = h.dispatched()
        assert d.url == "http://a.example/1"
        (backoff,) = h.finish(d, 429, retry_after=5.0)
        reasons.append(backoff.reason)
        h.check_counters()
        h.clock.advance(5.0)
    assert "page retried (1/" in reasons[0]
    assert reasons[-1].endswith("page given up")
    assert urls(h.dispatched()) == ["http://a.example/2"]


def test_retry_after_without_header_still_requeues() -> None:
    h = Harness(Politeness(delay=3.0))
    h.open_host("a.example", b"", "/1")
    h.clock.advance(3.0)
    (d,) = h.dispatched()
    (backoff,) = h.finish(d, 503)
    assert backoff.reason.startswith("HTTP 503: host waits 3 s")
    h.clock.advance(3.0)
    assert urls(h.dispatched()) == ["http://a.example/1"]


def test_retry_after_is_ignored_on_other_statuses_and_capped() -> None:
    h = Harness()
    h.open_host("a.example", b"", "/1", "/2", "/3")
    (first,) = h.dispatched()
    h.finish(first, 200, retry_after=40.0)  # not a 429/503: no wait
    (second,) = h.dispatched()
    h.finish(second, 429, retry_after=1e9)
    assert h.frontier.next_wake(0) == h.clock() + MAX_ERROR_BACKOFF


# -- robots.txt outcomes ----------------------------------------------------------


def test_robots_4xx_allows_everything() -> None:
    h = Harness()
    h.frontier.enqueue("http://a.example/private")
    (robots,) = h.dispatched()
    # The body of an error page is never read as rules.
    h.finish(robots, 404, body=b"User-agent: *\nDisallow: /\n")
    (page,) = h.dispatched()
    assert page.url == "http://a.example/private"


def test_robots_disallowed_urls_are_logged_never_dispatched() -> None:
    h = Harness()
    h.open_host(
        "a.example",
        b"User-agent: *\nDisallow: /private\n",
        "/private/1",
        "/public",
        "/private/2",
    )
    dispatches, decisions = h.due()
    assert urls(dispatches) == ["http://a.example/public"]
    assert [(d.url, d.outcome) for d in decisions] == [
        ("http://a.example/private/1", "robots-disallowed")
    ]
    h.finish(dispatches[0])
    dispatches, decisions = h.due()
    assert dispatches == []
    assert [(d.url, d.outcome, d.host) for d in decisions] == [
        ("http://a.example/private/2", "robots-disallowed", "a.example")
    ]
    h.check_counters()
    assert h.frontier.queued == 0


def test_robots_5xx_retries_with_backoff_then_drains_the_host() -> None:
    h = Harness(Politeness(robots_retry=60.0))
    h.frontier.enqueue("http://a.example/1")
    h.frontier.enqueue("http://a.example/2", depth=3)
    waits = []
    for _ in range(1, ROBOTS_MAX_TRIES):
        (robots,) = h.dispatched()
        assert robots.kind == "robots"
        assert h.finish(robots, 500) == []
        wake = h.frontier.next_wake(0)
        assert wake is not None
        waits.append(wake - h.clock())
        h.clock.advance(waits[-1] - 0.01)
        assert h.dispatched() == []  # nothing before the backoff is over
        h.clock.advance(0.01)
    assert waits == [60.0 * 2 ** (i - 1) for i in range(1, ROBOTS_MAX_TRIES)]
    (robots,) = h.dispatched()
    assert robots.kind == "robots"
    decisions = h.finish(robots, 503)
    assert [(d.url, d.outcome, d.depth) for d in decisions] == [
        ("http://a.example/1", "robots-unavailable", 0),
        ("http://a.example/2", "robots-unavailable", 3),
    ]
    h.check_counters()
    # Later URLs of the host are dropped with a decision too, without a fetch.
    h.frontier.enqueue("http://a.example/3")
    h.clock.advance(1000)
    dispatches, decisions = h.due()
    assert dispatches == []
    assert [(d.url, d.outcome) for d in decisions] == [("http://a.example/3", "robots-unavailable")]
    h.check_counters()


def test_a_host_the_address_guard_refuses_is_ended_at_once_with_the_reason() -> None:
    """Not retried as if robots.txt were unreachable: asking again cannot help."""
    h = Harness(Politeness(robots_retry=60.0))
    h.frontier.enqueue("http://lan.example/1")
    h.frontier.enqueue("http://lan.example/2", depth=2)
    (robots,) = h.dispatched()
    why = "10.0.0.7 is a private address (--allow-private to crawl it)"
    decisions = h.frontier.complete(
        robots.host, "robots", 0, "blocked", 1.0, h.clock(), None, None, 0.0, why
    )
    assert [(d.url, d.outcome, d.reason) for d in decisions] == [
        ("http://lan.example/1", "blocked", why),
        ("http://lan.example/2", "blocked", why),
    ]
    assert h.frontier.next_wake(0) is None  # no retry scheduled
    # a later link to the host is refused the same way, without a request
    h.frontier.enqueue("http://lan.example/3")
    dispatches, decisions = h.due()
    assert dispatches == []
    assert [(d.url, d.outcome, d.reason) for d in decisions] == [
        ("http://lan.example/3", "blocked", why)
    ]
    h.check_counters()


# -- robots.txt expiry ------------------------------------------------------------


DAY = 86400.0


def test_robots_rules_expire_and_are_fetched_again_before_the_next_page() -> None:
    h = Harness(Politeness(robots_ttl=DAY))
    h.open_host("a.example", b"User-agent: *\nDisallow: /old\n", "/1", "/new/1", "/old/1")
    robots_done = h.clock()
    (d,) = h.dispatched()
    h.finish(d)
    h.clock.advance(DAY - 1.0 - (h.clock() - robots_done))
    (d,) = h.dispatched()  # still within the day: the cached rules hold
    assert d.url == "http://a.example/new/1"
    h.finish(d)
    h.clock.advance(1.0)
    (again,) = h.dispatched()
    assert (again.kind, again.url) == ("robots", "http://a.example/robots.txt")
    assert h.dispatched() == []  # the page waits for the new rules
    h.check_counters()
    h.finish(again, body=b"User-agent: *\nDisallow: /new\n")
    dispatches, decisions = h.due()
    assert urls(dispatches) == ["http://a.example/old/1"]  # the new rules apply
    assert decisions == []
    h.frontier.enqueue("http://a.example/new/2")
    h.finish(dispatches[0])
    dispatches, decisions = h.due()
    assert dispatches == []
    assert [(x.url, x.outcome) for x in decisions] == [
        ("http://a.example/new/2", "robots-disallowed")
    ]
    h.check_counters()


def test_robots_refresh_that_fails_keeps_the_cached_rules_and_retries_later() -> None:
    h = Harness(Politeness(robots_ttl=DAY, robots_retry=60.0))
    h.open_host("a.example", b"User-agent: *\nDisallow: /no\n", "/1", "/2", "/no")
    h.clock.advance(DAY)
    (refresh,) = h.dispatched()
    assert refresh.kind == "robots"
    assert h.finish(refresh, 503) == []
    # a 5xx on refresh: the rules we have stay in force, pages go on
    dispatches, decisions = h.due()
    assert urls(dispatches) == ["http://a.example/1"]
    h.finish(dispatches[0])
    h.clock.advance(59.0)
    (d,) = h.dispatched()
    assert d.url == "http://a.example/2"
    h.finish(d)
    h.clock.advance(1.0)
    (retry,) = h.dispatched()  # and robots.txt is asked again after the retry interval
    assert retry.kind == "robots"
    h.finish(retry, 404)  # now 4xx: allow all
    dispatches, decisions = h.due()
    assert urls(dispatches) == ["http://a.example/no"] and decisions == []
    assert h.hosts["a.example"]["robots_expires"] == h.clock() + DAY


def test_robots_timeouts_then_4xx_first_time() -> None:
    """No rules yet: unreachable means disallow for now (pages wait), 4xx means allow all."""
    h = Harness(Politeness(robots_retry=10.0))
    h.frontier.enqueue("http://a.example/1")
    (robots,) = h.dispatched()
    assert h.finish(robots, 0) == []  # a timeout / connection failure
    h.clock.advance(9.99)
    assert h.dispatched() == []
    h.clock.advance(0.01)
    (robots,) = h.dispatched()
    assert robots.kind == "robots"
    h.finish(robots, 403)
    assert urls(h.dispatched()) == ["http://a.example/1"]


def test_a_restart_during_a_robots_refresh_keeps_the_rules() -> None:
    hosts: dict = {}
    queue: dict = {}
    clock = Clock()
    before = Harness(Politeness(robots_ttl=DAY), hosts=hosts, queue=queue, clock=clock)
    before.open_host("a.example", b"User-agent: *\nDisallow: /no\n", "/1", "/no")
    clock.advance(DAY)
    (refresh,) = before.dispatched()
    assert refresh.kind == "robots"
    after = Harness(Politeness(robots_ttl=DAY), hosts=hosts, queue=queue, clock=clock)
    after.frontier.adopt(0, list(hosts.items()))
    assert after.dispatched() == []  # its answer may still come (Politeness.adopt_grace)
    clock.advance(Politeness().adopt_grace)  # it did not
    (again,) = after.dispatched()  # the rules were kept, but expired: asked again first
    assert again.kind == "robots"
    after.finish(again, 404)  # unreachable: the rules kept apply
    assert urls(after.dispatched()) == ["http://a.example/1"]


# -- connection errors ------------------------------------------------------------


def test_connection_errors_back_off_exponentially_then_park() -> None:
    h = Harness()
    pages = [f"/{i}" for i in range(PARK_AFTER_ERRORS + 3)]
    h.open_host("a.example", b"", *pages)
    waits = []
    for errors in range(1, PARK_AFTER_ERRORS):
        (d,) = h.dispatched()
        (backoff,) = h.finish(d, 0)
        wake = h.frontier.next_wake(0)
        assert wake is not None
        waits.append(wake - h.clock())
        # the crawl log says why the host is quiet, and for how long
        assert (backoff.url, backoff.outcome) == (d.url, "backoff")
        assert backoff.reason == (
            f"{errors} connection errors in a row: host waits {waits[-1]:g} s"
        )
        h.clock.advance(waits[-1] - 0.01)
        assert h.dispatched() == [], f"dispatched during backoff after {errors} errors"
        h.clock.advance(0.01)
    assert waits == [min(MAX_ERROR_BACKOFF, 2.0**n) for n in range(1, PARK_AFTER_ERRORS)]
    (d,) = h.dispatched()
    decisions = h.finish(d, 0)
    assert [x.outcome for x in decisions] == ["host-parked"] * 3
    assert [x.url for x in decisions] == [f"http://a.example{p}" for p in pages[-3:]]
    assert h.frontier.queued == 0
    h.check_counters()


def test_a_success_resets_the_error_backoff() -> None:
    h = Harness()
    h.open_host("a.example", b"", "/1", "/2", "/3", "/4", "/5")
    for _ in range(3):
        (d,) = h.dispatched()
        h.finish(d, 0)
        h.clock.advance(MAX_ERROR_BACKOFF)
    (d,) = h.dispatched()
    h.finish(d, 200)
    assert h.hosts["a.example"]["errors"] == 0
    assert h.frontier.next_wake(0) == h.clock()  # no delay configured, no backoff left


# -- budget -----------------------------------------------------------------------


def test_max_pages_budget_stops_dispatching_and_keeps_the_queue() -> None:
    h = Harness(Politeness(max_pages=2))
    h.open_host("a.example", b"", "/1", "/2", "/3")
    d1 = h.dispatched()[0]
    h.finish(d1)
    d2 = h.dispatched()[0]
    h.finish(d2)
    assert h.frontier.budget_exhausted()
    assert h.dispatched() == []
    assert h.frontier.pages_dispatched == 2
    assert h.frontier.queued == 1  # left for a later run with a bigger budget
    # A host first seen after the budget is spent is not contacted at all.
    h.frontier.enqueue("http://b.example/")
    assert h.dispatched() == []
    assert h.frontier.in_flight == 0
    h.check_counters()


def test_no_budget_means_unlimited() -> None:
    h = Harness(Politeness(max_pages=0))
    h.open_host("a.example", b"", *[f"/{i}" for i in range(20)])
    for _ in range(20):
        (d,) = h.dispatched()
        h.finish(d)
    assert not h.frontier.budget_exhausted()
    assert h.frontier.pages_dispatched == 20
