"""Copies of one hand-off refetch: link-extract re-feeds a URL each time it reads the
message whose body it misses (a restarted worker read one six times), and the frontier
fetches the page once, however many copies are queued (`Frontier._done_already`).

The frontier runs over plain dicts; the page store is a dict of fetch times."""

from __future__ import annotations

from typing import Any

from streams.app import refetch_hold
from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.frontier import FETCHED_ALREADY, Frontier, Politeness
from streams.core.provenance import handoff_refeed
from streams.core.records import FrontierEvent
from streams.settings import load_settings
from streams.stages import recrawl
from tests.unit.frontier_helpers import Clock

URL = "http://a.test/1"


class Crawl:
    """A frontier with robots.txt fetched, a page store, and a fetch stage that
    answers each dispatch with `status` (200 by default) and stores 200s when told."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.stored: dict[str, float] = {}
        self.frontier = Frontier({}, {}, Politeness(refetch_hold=10.0), lambda host: 0, self.clock)
        self.frontier.stored_since = lambda url, since: self.stored.get(url, -1.0) >= since
        self.fetched: list[tuple[str, float]] = []
        self.skipped: list[Any] = []
        self.in_flight: list[Any] = []
        self.frontier.enqueue("http://a.test/0")
        self.step(complete=True)  # robots.txt
        self.run(1)  # /0

    def refeed(self, copies: int, captured: float) -> None:
        event: FrontierEvent = {
            "new_urls": [
                {
                    "url": URL,
                    "depth": 1,
                    "priority": 0,
                    "kind": "page",
                    "via": handoff_refeed(captured),
                }
            ]
            * copies,
            "completions": [],
            "tick": False,
        }
        recrawl.handle(
            0, event, self.frontier, RevisitSchedule({}, RevisitPolicy(), lambda u: 0), []
        )

    def step(self, *, complete: bool, status: int = 200) -> None:
        dispatches, decisions = self.frontier.due(0)
        self.skipped.extend(decisions)
        for d in dispatches:
            if d.kind == "page":
                self.fetched.append((d.url, self.clock()))
            self.in_flight.append(d)
        if complete:
            self.complete(status)

    def complete(self, status: int = 200) -> None:
        for d in self.in_flight:
            body = b"" if d.kind == "robots" else None
            self.frontier.complete(
                d.host, d.kind, status, "ok", 1.0, self.clock(), None, body, d.dispatched_at
            )
        self.in_flight.clear()

    def run(self, seconds: int, *, complete: bool = True, status: int = 200) -> None:
        for _ in range(seconds):
            self.clock.advance(1)
            self.step(complete=complete, status=status)


def test_six_copies_of_a_refetch_fetch_the_page_once_before_it_is_stored() -> None:
    """The first copy's page is still on its way to the store when the next copy's
    turn comes: the store cannot tell, the frontier's own dispatch can."""
    crawl = Crawl()
    captured = crawl.clock() - 1.0
    crawl.refeed(6, captured)
    crawl.run(12, complete=False)  # the refetch goes once its hold ran out; in flight
    crawl.complete()
    crawl.run(6)  # the other copies' turns come before its page is stored
    assert [url for url, _at in crawl.fetched] == ["http://a.test/0", URL]
    assert [d.outcome for d in crawl.skipped] == [FETCHED_ALREADY] * 5
    assert all("refetched already" in d.reason for d in crawl.skipped)
    assert crawl.frontier.queued == 0


def test_a_throttled_refetch_is_done_again_and_its_copies_are_not() -> None:
    """A 503 puts the copy that went back at the head of its queue: its own dispatch
    does not stop it; the other copy is still dropped."""
    crawl = Crawl()
    captured = crawl.clock() - 1.0
    crawl.refeed(2, captured)
    crawl.run(11, complete=False)
    assert [url for url, _at in crawl.fetched][1:] == [URL]
    crawl.complete(status=503)
    crawl.run(30)
    assert [url for url, _at in crawl.fetched][1:] == [URL, URL]
    assert [d.outcome for d in crawl.skipped if d.outcome == FETCHED_ALREADY] == [FETCHED_ALREADY]
    assert crawl.frontier.queued == 0


def test_a_miss_of_the_refetchs_own_capture_is_fetched_again() -> None:
    """The refetch's body was missed too: that re-feed names the refetch's capture,
    which is after its dispatch, so it is no copy of it."""
    crawl = Crawl()
    crawl.refeed(1, crawl.clock() - 1.0)
    crawl.run(12)
    ((_url, refetched_at),) = crawl.fetched[1:]
    crawl.refeed(1, refetched_at + 0.01)  # its fetch ended after the dispatch
    crawl.run(12)
    assert [url for url, _at in crawl.fetched][1:] == [URL, URL]
    assert not [d for d in crawl.skipped if d.outcome == FETCHED_ALREADY]


def test_a_consumer_group_holds_a_refetch_a_session_timeout_longer() -> None:
    """Workers holding their partitions by index (the embedded broker) hold a refetch
    10 s; a consumer group's dead worker's partitions move after a session timeout."""
    settings = load_settings(environ={"SEINE_SESSION_TIMEOUT": "6"})
    assert refetch_hold(settings.with_overrides(members=2)) == 10.0
    assert refetch_hold(settings) == 16.0
