"""The frontier stage writes each URL's crawl state to the URL registry.

The stage's own handler over a frontier of plain dicts, a real RocksDB registry
(the one url-seen writes) and an outbox that keeps what would be sent: the states
the registry ends with, and the crawl-log records beside them.

Here: the states a crawl leaves, re-sent URLs and messages read twice, and states a
torn write lost; in-link counts, tiers and re-tier requests are in
test_frontier_registry_tiers.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams.core.frontier import PARK_AFTER_ERRORS, Frontier, Politeness
from streams.core.provenance import Via
from streams.core.records import UrlCandidate
from streams.core.registry import state_of, with_state
from streams.core.urlstate import retier_candidate
from streams.stages import url_seen
from streams.store.url_registry import UrlRegistry
from tests.unit.frontier_registry_helpers import T0, Crawl, SeenOutbox, done


def test_every_registered_url_ends_with_what_happened_to_it(tmp_path: Path) -> None:
    crawl = Crawl(tmp_path / "reg")
    pages = ["http://a.test/ok", "http://a.test/private/x", "http://a.test/gone"]
    crawl.register(*pages)
    (robots,) = crawl.handle(pages)
    assert robots["kind"] == "robots"
    for seq, url in enumerate(pages):
        assert crawl.state(url) == {"s": "queued", "at": T0, "tier": 1, "q": seq, "depth": 1}
    (first,) = crawl.handle(completions=[done(robots, body=b"User-agent: *\nDisallow: /private")])
    assert crawl.state(first["url"])["s"] == "fetching"
    (second,) = crawl.handle(completions=[done(first)])
    assert crawl.state("http://a.test/ok") == {
        "s": "fetched",
        "at": T0,
        "status": 200,
        "outcome": "fetched",
    }
    # the disallowed page was refused on its way out of the queue, with the reason
    assert crawl.state("http://a.test/private/x") == {
        "s": "refused",
        "at": T0,
        "outcome": "robots-disallowed",
        "reason": "disallowed by robots.txt",
    }
    assert second["url"] == "http://a.test/gone"
    crawl.handle(completions=[done(second, 404, outcome="fetched")])
    assert crawl.state("http://a.test/gone")["status"] == 404
    # one registry write per handled message that changed a state
    assert crawl.counting.calls == [3, 1, 3, 1]


def test_a_host_with_repeated_connection_errors_is_backed_off_then_parked(
    tmp_path: Path,
) -> None:
    """The crawl log says each backoff and the parking; the registry says the same."""
    crawl = Crawl(tmp_path / "reg")
    pages = [f"http://down.test/{i}" for i in range(PARK_AFTER_ERRORS + 2)]
    crawl.register(*pages)
    (robots,) = crawl.handle(pages)
    (request,) = crawl.handle(completions=[done(robots, 404)])
    failed: list[str] = []
    for errors in range(1, PARK_AFTER_ERRORS + 1):
        failed.append(request["url"])
        crawl.clock.now += 1000.0  # past any backoff
        again = crawl.handle(completions=[done(request, 0, reason="connect: refused")])
        if errors < PARK_AFTER_ERRORS:
            (request,) = again
        else:
            assert again == [] and crawl.frontier.queued == 0
    frontier_logs = [r for r in crawl.out.logs if r["stage"] == "frontier"]
    backoffs = [r for r in frontier_logs if r["outcome"] == "backoff"]
    assert [r["url"] for r in backoffs] == failed[:-1]
    assert [r["reason"] for r in backoffs] == [
        f"{n} connection errors in a row: host waits {min(300.0, 2.0**n):g} s"
        for n in range(1, PARK_AFTER_ERRORS)
    ]
    parked = [r for r in frontier_logs if r["outcome"] == "host-parked"]
    assert [r["url"] for r in parked] == pages[PARK_AFTER_ERRORS:]
    assert {r["reason"] for r in parked} == {f"{PARK_AFTER_ERRORS} errors in a row"}
    # the registry: each tried page failed with its reason (and the backoff it caused),
    # the pages still queued when the host was parked say so
    for n, url in enumerate(failed, 1):
        state = crawl.state(url)
        assert (state["s"], state["reason"]) == ("failed", "connect: refused")
        if n < PARK_AFTER_ERRORS:
            assert state["backoff"].startswith(f"{n} connection errors in a row")
    for url in pages[PARK_AFTER_ERRORS:]:
        state = crawl.state(url)
        assert (state["s"], state["outcome"]) == ("parked", "host-parked")


def test_a_throttled_page_is_queued_again_in_the_registry(tmp_path: Path) -> None:
    crawl = Crawl(tmp_path / "reg")
    crawl.register("http://slow.test/a")
    (robots,) = crawl.handle(["http://slow.test/a"])
    (page,) = crawl.handle(completions=[done(robots, 404)])
    crawl.handle(completions=[{**done(page, 429), "retry_after": 2.0}])
    state = crawl.state("http://slow.test/a")
    assert state["s"] == "queued" and state["status"] == 429
    assert state["retry"].startswith("HTTP 429, Retry-After 2 s: host waits 2 s")


def test_states_only_for_registered_urls_and_in_links_outlive_a_state(tmp_path: Path) -> None:
    with UrlRegistry(tmp_path / "reg") as registry:
        registry.add_many(["http://a.test/1"])
        assert registry.state("http://a.test/1") is None  # registered, not acted on
        assert registry.set_states(
            {"http://a.test/1": {"s": "queued", "in": 3}, "http://a.test/2": {"s": "queued"}}
        ) == ["http://a.test/1"]
        assert "http://a.test/2" not in registry
        registry.set_states({"http://a.test/1": {"s": "fetched"}})
        assert registry.state("http://a.test/1") == {"s": "fetched", "in": 3}
        assert list(registry.url_states()) == [("http://a.test/1", {"s": "fetched", "in": 3})]
        assert "http://a.test/1" in registry and registry.add_many(["http://a.test/1"]) == [False]


@pytest.mark.parametrize("value", [b"\x00" * 8 + b"http://a.test/", b"\x01" * 8 + b"http://b/"])
def test_a_value_without_a_state_gets_one(value: bytes) -> None:
    assert state_of(value) is None
    assert state_of(with_state(value, {"s": "queued"})) == {"s": "queued"}
    assert with_state(with_state(value, {"s": "x"}), {"s": "y"}).count(b"\x00{") == 1


def test_a_sitemap_met_again_after_robots_ttl_is_read_again(tmp_path: Path) -> None:
    """robots.txt is fetched again once its rules expire, and names its sitemaps again:
    url-seen passes a sitemap on again once its last fetch is robots_ttl old."""
    crawl = Crawl(tmp_path / "reg", Politeness(robots_ttl=100.0))
    filters = url_seen.SeenFilters(capacity=1000, error_rate=0.001)
    sitemap = "http://a.test/sitemap.xml"

    def named_by_robots(at: float) -> list[dict[str, Any]]:
        out = SeenOutbox()
        robots_says: UrlCandidate = {
            "url": sitemap,
            "depth": 1,
            "priority": 0,
            "via": "http://a.test/robots.txt",
        }
        url_seen.handle(
            0,
            {"urls": [{**robots_says, "kind": "sitemap"}]},
            crawl.registry,  # type: ignore[arg-type]
            {},
            filters,
            lambda p: [],
            out,  # type: ignore[arg-type]
            sitemap_ttl=100.0,
            clock=lambda: at,
        )
        return out.sent

    (first,) = named_by_robots(T0)
    (robots,) = crawl.handle(candidates=[first])
    (fetch,) = crawl.handle(completions=[done(robots, 404)])
    assert fetch["kind"] == "sitemap"
    assert named_by_robots(T0 + 50) == []  # queued or in flight: not again
    crawl.handle(completions=[done(fetch, outcome="sitemap")])
    assert crawl.state(sitemap)["s"] == "fetched"
    assert named_by_robots(T0 + 99) == []  # fetched under robots_ttl ago
    (again,) = named_by_robots(T0 + 100)
    assert (again["url"], again["kind"]) == (sitemap, "sitemap")
    crawl.clock.now = T0 + 100
    (robots2,) = crawl.handle(candidates=[again])  # the rules expired too: robots.txt first
    assert robots2["kind"] == "robots"
    (fetch2,) = crawl.handle(completions=[{**done(robots2, 404), "finished_at": T0 + 100}])
    assert (fetch2["url"], fetch2["kind"]) == (sitemap, "sitemap")


def resent(url: str) -> dict[str, Any]:
    return {"url": url, "depth": 1, "priority": 0, "via": Via.RESEND, "inlinks": 1, "kind": "page"}


def test_a_re_sent_url_is_queued_once_whatever_order_the_copies_come_in(tmp_path: Path) -> None:
    """url-seen re-sends a URL it registered when it has no frontier state; the original
    may have crossed the re-send (or a frontier message may be read twice): a URL the
    frontier has acted on is not queued again, one it never saw is."""
    crawl = Crawl(tmp_path / "reg")
    crawl.register("http://a.test/1", "http://a.test/2", "http://a.test/lost")
    (robots,) = crawl.handle(["http://a.test/1", "http://a.test/2"])
    assert crawl.frontier.queued == 2
    # the re-sends of 1 (queued) and 2, twice in one message, and of a lost URL
    crawl.handle(
        candidates=[
            resent("http://a.test/1"),
            resent("http://a.test/lost"),
            resent("http://a.test/lost"),
        ]
    )
    assert crawl.frontier.queued == 3
    assert crawl.state("http://a.test/lost")["s"] == "queued"
    (first,) = crawl.handle(completions=[done(robots)])
    crawl.handle(completions=[done(first)])
    assert crawl.state(first["url"])["s"] == "fetched"
    assert crawl.frontier.queued == 1  # robots.txt, then two pages left their queue
    crawl.handle(candidates=[resent(first["url"])])  # fetched already: nothing happens
    assert crawl.frontier.queued == 1
    assert crawl.state(first["url"])["s"] == "fetched"
    # a plain new URL in the same message as its re-send is queued once
    crawl.register("http://a.test/3")
    crawl.handle(["http://a.test/3"], candidates=[resent("http://a.test/3")])
    assert crawl.frontier.queued == 2


def test_a_frontier_message_read_twice_queues_nothing_twice(tmp_path: Path) -> None:
    """At-least-once: after a crash, Apache Kafka delivers the frontier messages whose
    offsets were not committed again, new URLs included. A page the frontier queued,
    or fetched, is not queued a second time; what a resume re-queues is."""
    crawl = Crawl(tmp_path / "reg")
    urls = ["http://a.test/1", "http://a.test/2"]
    crawl.register(*urls)
    (robots,) = crawl.handle(urls)
    assert crawl.frontier.queued == 2
    crawl.handle(urls)  # the same message again
    assert crawl.frontier.queued == 2
    (first,) = crawl.handle(completions=[done(robots)])
    crawl.handle(completions=[done(first)])
    assert crawl.state(first["url"])["s"] == "fetched"
    assert crawl.frontier.queued == 0  # the other page is in flight now
    crawl.handle([first["url"]])  # fetched already: read again, nothing happens
    assert crawl.frontier.queued == 0
    assert crawl.state(first["url"])["s"] == "fetched"
    # a resume over lost topics re-queues a URL whose record says it was in flight
    other = next(u for u in urls if u != first["url"])
    assert crawl.state(other)["s"] == "fetching"
    resumed = {"url": other, "depth": 0, "priority": 0, "via": Via.RESUME, "kind": "page"}
    crawl.handle(candidates=[resumed])
    assert crawl.frontier.queued == 1


def _answer(crawl: Crawl, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Complete the requests now; returns the requests that made due."""
    return crawl.handle(completions=[{**done(r), "finished_at": crawl.clock.now} for r in requests])


def _fetch_to_the_end(crawl: Crawl, requests: list[dict[str, Any]]) -> None:
    """Answer every fetch request (and the ones each answer makes due), waking the
    frontier past every politeness wait, until nothing is queued or in flight."""
    for _ in range(100):
        if not requests:
            crawl.clock.now += 60.0
            requests = crawl.handle()  # a tick
            if not requests:
                return
        requests = _answer(crawl, requests)
    raise AssertionError("the crawl did not end")


def _one_page_fetched(crawl: Crawl, url: str) -> None:
    """robots.txt and `url` fetched; the host then waits its delay."""
    (robots,) = crawl.handle([url])
    assert _answer(crawl, [robots]) == []
    crawl.clock.now += 60.0
    (first,) = crawl.handle()
    assert _answer(crawl, [first]) == []


@pytest.mark.parametrize("overwritten_first", [False, True])
def test_a_url_whose_dispatch_the_host_state_lost_is_queued_again(
    tmp_path: Path, overwritten_first: bool
) -> None:
    """A worker is SIGKILLed right after a message that queued a URL of a due host and
    dispatched it at once (local dispatch: the registry says ``fetching``, with the
    slot it was served from). The registry's record reached the broker, the host
    state's did not, so no request started (a dispatch's request waits for its table
    records). The host comes back older, its tail before the URL's slot, and the
    message is read again by the new owner: the URL must be queued again, not dropped
    as known, whether or not another URL took its slot first. Every page is fetched."""
    crawl = Crawl(tmp_path / "reg", Politeness(delay=10.0))
    one, lost, new = "http://a.test/1", "http://a.test/lost", "http://a.test/new"
    crawl.register(one, lost, new)
    _one_page_fetched(crawl, one)
    delivered = {host: dict(state) for host, state in crawl.frontier.hosts.items()}
    crawl.clock.now += 60.0  # the host is due: the URL is dispatched as it is queued
    (request,) = crawl.handle([lost])
    assert request["url"] == lost
    assert crawl.state(lost)["s"] == "fetching" and "q" in crawl.state(lost)
    # the restart: hosts as their changelog had them, queue and registry as on disk
    crawl.out.fetches.clear()  # that request never started
    crawl.frontier = Frontier(
        delivered, crawl.frontier.queue, Politeness(), lambda _: 0, crawl.clock
    )
    if overwritten_first:
        requests = crawl.handle([new])  # a new URL of the host lands in the lost slot
        requests += crawl.handle([lost])  # the message that queued it, read again
    else:
        requests = crawl.handle([lost])
        requests += crawl.handle([new])
    _fetch_to_the_end(crawl, requests)
    pages = [r["url"] for r in crawl.out.fetches if r["kind"] == "page"]
    assert sorted(pages) == sorted([lost, new])
    assert crawl.state(lost)["s"] == crawl.state(new)["s"] == "fetched"


def test_a_fetch_whose_completion_the_registry_lost_is_not_queued_again(
    tmp_path: Path,
) -> None:
    """The host state heard of a dispatch and of its fetch's end, but the registry's
    record of that end was lost at a kill (it says ``fetching`` still). The message
    that queued the URL, read again, must not queue it: its page went down the
    pipeline already, and a second fetch would store it twice."""
    crawl = Crawl(tmp_path / "reg", Politeness(delay=10.0))
    one, page = "http://a.test/1", "http://a.test/page"
    crawl.register(one, page)
    _one_page_fetched(crawl, one)
    crawl.clock.now += 60.0
    (request,) = crawl.handle([page])
    dispatched = crawl.state(page)
    assert dispatched["s"] == "fetching"
    _fetch_to_the_end(crawl, [request])
    crawl.registry.set_states({page: dispatched})  # the completion's record lost
    crawl.frontier = Frontier(
        crawl.frontier.hosts, crawl.frontier.queue, Politeness(), lambda _: 0, crawl.clock
    )
    requests = crawl.handle([page])
    _fetch_to_the_end(crawl, requests)
    pages = [r["url"] for r in crawl.out.fetches if r["kind"] == "page"]
    assert pages == [one, page]


def test_a_url_in_flight_at_a_restart_is_not_queued_twice(tmp_path: Path) -> None:
    """The same message read again where the host state did reach the broker (the
    host is busy with that URL) or where an adoption put the fetch back at the head of
    its queue: the URL is accounted for, and fetched once more only by the adoption."""
    crawl = Crawl(tmp_path / "reg", Politeness(delay=10.0, adopt_grace=3.0))
    one, inflight = "http://a.test/1", "http://a.test/inflight"
    crawl.register(one, inflight)
    _one_page_fetched(crawl, one)
    crawl.clock.now += 60.0
    (request,) = crawl.handle([inflight])
    assert request["url"] == inflight
    crawl.frontier = Frontier(
        crawl.frontier.hosts,
        crawl.frontier.queue,
        Politeness(adopt_grace=3.0),
        lambda _: 0,
        crawl.clock,
    )
    assert crawl.handle([inflight]) == []  # busy with it: adopted, not queued again
    crawl.clock.now += 5.0  # the grace runs out: the adoption does the fetch again
    (again,) = crawl.handle()
    assert again["url"] == inflight
    crawl.frontier = Frontier(
        crawl.frontier.hosts, crawl.frontier.queue, Politeness(), lambda _: 0, crawl.clock
    )
    assert crawl.handle([inflight]) == []  # read once more after another restart
    _fetch_to_the_end(crawl, [again])
    pages = [r["url"] for r in crawl.out.fetches if r["kind"] == "page"]
    assert pages == [one, inflight, inflight]


@pytest.mark.parametrize("overwritten_first", [False, True])
def test_a_url_whose_enqueue_the_host_state_lost_is_queued_again(
    tmp_path: Path, overwritten_first: bool
) -> None:
    """The whole cluster goes away mid-crawl: the frontier queues a URL (a queue item
    and its registry state, on local RocksDB), but the host state's changelog record
    never reaches the broker. The rerun's recovery replays the hosts changelog over the
    local table, so the host comes back older than the item and the registry (its tail
    before the item's slot), and the frontier message that queued the URL is read again
    (its offset was never committed). It must queue the URL again, not drop it as
    known; the next URL of that host is written in the lost item's slot, before or
    after the message is read again. Every page is fetched, once."""
    crawl = Crawl(tmp_path / "reg", Politeness(delay=10.0))
    one, lost, new = "http://a.test/1", "http://a.test/lost", "http://a.test/new"
    crawl.register(one, lost, new)
    _one_page_fetched(crawl, one)
    delivered = {host: dict(state) for host, state in crawl.frontier.hosts.items()}
    assert crawl.handle([lost]) == []  # queued: the last host state the broker saw is older
    assert crawl.state(lost)["s"] == "queued"
    # the rerun: hosts as their changelog had them, queue and registry as on disk
    crawl.frontier = Frontier(
        delivered, crawl.frontier.queue, Politeness(), lambda _: 0, crawl.clock
    )
    if overwritten_first:
        crawl.handle([new])  # a new URL of the host lands in the lost item's slot
        crawl.handle([lost])  # the message that queued it, read again
    else:
        crawl.handle([lost])
        crawl.handle([new])
    _fetch_to_the_end(crawl, [])
    pages = [r["url"] for r in crawl.out.fetches if r["kind"] == "page"]
    assert sorted(pages) == sorted([one, lost, new])  # each page once, none lost
    assert crawl.state(lost)["s"] == crawl.state(new)["s"] == "fetched"


def test_a_message_read_again_after_a_lazy_move_queues_nothing_twice(tmp_path: Path) -> None:
    """The registry names the slot a re-tier moved a URL to; a restart loses the move
    held in memory (the item is served at its old key) and reads the messages that
    queued the URL and asked the move again: the empty new slot is a move's hole, not a
    lost enqueue, so the page is fetched once."""
    crawl = Crawl(tmp_path / "reg", Politeness(delay=10.0))
    one, moved = "http://a.test/1", "http://a.test/moved"
    crawl.register(one, moved)
    _one_page_fetched(crawl, one)
    deep = {"url": moved, "depth": 5, "priority": 0, "via": None, "inlinks": 1, "kind": "page"}
    crawl.handle(candidates=[deep])
    state = crawl.state(moved)
    request = retier_candidate(moved, state, {**state, "in": 64})
    assert request is not None
    crawl.handle(candidates=[request])
    assert crawl.state(moved)["tier"] < state["tier"]  # moved, in memory only
    crawl.frontier = Frontier(
        crawl.frontier.hosts, crawl.frontier.queue, Politeness(), lambda _: 0, crawl.clock
    )
    crawl.handle(candidates=[deep, request])  # both messages read again
    _fetch_to_the_end(crawl, [])
    pages = [r["url"] for r in crawl.out.fetches if r["kind"] == "page"]
    assert sorted(pages) == [one, moved]
