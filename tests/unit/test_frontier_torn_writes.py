"""A worker killed while the frontier's table writes are on their way to the broker.

The ``hosts`` and ``queue`` tables have changelogs of their own: two topic
partitions, produced to independently, so a SIGKILL can leave on the broker the
queue's records of an event without the host state's, or the other way round. The
new owner recovers both tables from what got there. Whatever mix it finds, no queued
URL may be lost: each page whose completion the recovered host state does not hold is
fetched. (A 3-node Kafka fault run lost a seed page so: the dispatch's delete of the
queue item reached the broker, the host state naming the fetch in flight did not,
and the worker died before the fetched page left it; the new owner found the host
idle, its queue head on an empty slot, and skipped it as a hole.)
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from streams.core.frontier import Frontier, Politeness
from tests.unit.frontier_helpers import Harness

T0 = 1_000_000.0
PAGES = ["http://a.example/1", "http://a.example/2", "http://a.example/3"]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Recorded(dict):  # type: ignore[type-arg]
    """A dict table that keeps its writes in order (a changelog): value None = delete."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, Any]] = []

    def __setitem__(self, key: str, value: Any) -> None:
        self.ops.append((key, copy.deepcopy(value)))
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.ops.append((key, None))
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self.ops.append((key, None))
        return super().pop(key, *default)


def replay(ops: list[tuple[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for key, value in ops:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = copy.deepcopy(value)
    return table


#: (name, status of each page's first answer): 200s, and a 429 that puts its page back
SCENARIOS = [("200", {}), ("429", {"http://a.example/2": 429})]


def crawl(first_status: dict[str, int]) -> tuple[Recorded, Recorded, list[tuple[int, int, str]]]:
    """Crawl a.example's pages over recorded tables; returns the tables and, per event,
    (hosts ops, queue ops) at its end and the page it completed ("" if none). The
    first event queues every page."""
    clock = Clock()
    hosts, queue = Recorded(), Recorded()
    frontier = Frontier(hosts, queue, Politeness(delay=1.0), lambda _a: 0, clock)
    events: list[tuple[int, int, str]] = []

    def event(completed: str = "") -> None:
        events.append((len(hosts.ops), len(queue.ops), completed))

    for url in PAGES:  # (an enqueue's torn writes are the registry's to mend: 018c277)
        frontier.enqueue(url)
    event()
    answered: set[str] = set()
    for _ in range(20):
        clock.now += 2.0
        dispatches, decisions = frontier.due(0)
        assert decisions == []
        event()
        for d in dispatches:
            status = 200
            if d.kind == "page" and d.url not in answered:
                status = first_status.get(d.url, 200)
                answered.add(d.url)
            frontier.complete(d.host, d.kind, status, "ok", 5.0, clock.now, None, b"")
            event(d.url if d.kind == "page" and status == 200 else "")
    assert {url for *_, url in events} >= set(PAGES)
    return hosts, queue, events


def recover(hosts: dict[str, Any], queue: dict[str, Any]) -> list[str]:
    """A new owner over the recovered tables, run until it has nothing left: the pages
    it fetched."""
    clock = Clock()
    clock.now = T0 + 1000.0
    frontier = Frontier(hosts, queue, Politeness(delay=1.0), lambda _a: 0, clock)
    frontier.adopt(0, list(hosts.items()))
    fetched: list[str] = []
    for _ in range(20):
        clock.now += 5.0  # past the adoption's grace and the politeness delay
        dispatches, decisions = frontier.due(0)
        assert decisions == []
        for d in dispatches:
            if d.kind == "page":
                fetched.append(d.url)
            frontier.complete(d.host, d.kind, 200, "ok", 5.0, clock.now, None, b"")
    return fetched


def cuts(
    events: list[tuple[int, int, str]],
) -> list[tuple[int, int, set[str]]]:
    """Every torn end of one event's writes: the host state of before or after it, with
    any prefix of its queue writes (each changelog partition keeps its order); returns
    (hosts ops, queue ops, pages completed as that host state knows)."""
    out = []
    previous = events[0][:2]  # from the pages queued on
    done: set[str] = set()
    for hosts_end, queue_end, completed in events[1:]:
        for hosts_cut, known in ((previous[0], set(done)), (hosts_end, done | {completed})):
            for queue_cut in range(previous[1], queue_end + 1):
                out.append((hosts_cut, queue_cut, known - {""}))
        done |= {completed}
        previous = (hosts_end, queue_end)
    return out


@pytest.mark.parametrize(("name", "first_status"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_no_queued_url_is_lost_whichever_writes_reached_the_broker(
    name: str, first_status: dict[str, int]
) -> None:
    hosts, queue, events = crawl(first_status)
    checked = 0
    for hosts_cut, queue_cut, done in cuts(events):
        fetched = recover(replay(hosts.ops[:hosts_cut]), replay(queue.ops[:queue_cut]))
        missing = set(PAGES) - done - set(fetched)
        assert not missing, (name, hosts_cut, queue_cut, sorted(missing))
        checked += 1
    assert checked > 20


def test_a_dispatch_whose_host_state_was_lost_is_dispatched_again() -> None:
    """The fault run's case, alone: the dispatch's queue writes reached the broker,
    its host state (busy with that page) did not."""
    clock = Clock()
    hosts, queue = Recorded(), Recorded()
    frontier = Frontier(hosts, queue, Politeness(delay=1.0), lambda _a: 0, clock)
    frontier.enqueue(PAGES[0])
    (robots,), _ = frontier.due(0)
    frontier.complete(robots.host, "robots", 200, "ok", 5.0, clock.now, None, b"")
    hosts_before = len(hosts.ops)
    clock.now += 2.0
    (page,), _ = frontier.due(0)
    assert page.url == PAGES[0]
    assert recover(replay(hosts.ops[:hosts_before]), replay(queue.ops)) == [PAGES[0]]


def test_a_url_queued_twice_after_a_torn_enqueue_is_fetched_once() -> None:
    """The queue's record of an enqueue reached the broker and the URL registry's did
    not: the frontier message, read again by the new owner, queues the URL a second
    time. A page store holds the first copy's capture, so the second is not fetched
    (a page to fetch again, ``again``, is)."""
    clock = Clock()
    frontier = Frontier({}, {}, Politeness(), lambda _host: 0, clock)
    stored: set[str] = set()
    frontier.fetched_already = stored.__contains__
    for url in (PAGES[0], PAGES[1], PAGES[0]):  # the message read again
        frontier.enqueue(url)
    frontier.enqueue(PAGES[1], again=True)  # a recrawl
    fetched: list[str] = []
    skipped: list[tuple[str, str]] = []
    for _ in range(8):
        dispatches, decisions = frontier.due(0)
        skipped += [(d.url, d.outcome) for d in decisions]
        for d in dispatches:
            fetched.append(d.url)
            if d.kind == "page":
                stored.add(d.url)  # link-extract stores the page
            body = b"" if d.kind == "robots" else None
            frontier.complete(d.host, d.kind, 200, "ok", 1.0, clock(), None, body)
        clock.now += 10
    assert fetched == ["http://a.example/robots.txt", PAGES[0], PAGES[1], PAGES[1]]
    assert skipped == [(PAGES[0], "fetched-already")]
    assert frontier.queued == 0 and frontier.in_flight == 0


def test_a_second_copy_is_not_fetched_before_the_first_copys_page_is_stored() -> None:
    """The page store learns of a capture only after parse, content-dedup and
    link-extract; a second copy of the URL due before then was fetched again (a
    restarted worker fetched one URL twice, 167 ms apart). The frontier remembers the
    pages it dispatched; a lost fetch it redoes is marked ``again`` (`_push_front`)."""
    clock = Clock()
    frontier = Frontier({}, {}, Politeness(), lambda _host: 0, clock)
    frontier.fetched_already = lambda _url: False  # no page reaches a store here
    for url in (PAGES[0], PAGES[1], PAGES[0]):
        frontier.enqueue(url)
    fetched: list[str] = []
    skipped: list[tuple[str, str]] = []
    throttled = False
    for _ in range(8):
        dispatches, decisions = frontier.due(0)
        skipped += [(d.url, d.outcome) for d in decisions]
        for d in dispatches:
            fetched.append(d.url)
            status = 200
            if d.url == PAGES[1] and not throttled:
                status, throttled = 503, True  # asked again later: not a second copy
            body = b"" if d.kind == "robots" else None
            frontier.complete(d.host, d.kind, status, "ok", 1.0, clock(), None, body)
        clock.now += 10
    assert fetched == ["http://a.example/robots.txt", PAGES[0], PAGES[1], PAGES[1]]
    assert [url for url, _ in skipped if url == PAGES[0]] == [PAGES[0]]
    assert frontier.queued == 0 and frontier.in_flight == 0


def test_a_url_waiting_under_a_hole_count_one_over_is_fetched() -> None:
    """After a kill lost a re-tier move held in memory, a host's hole count was one
    over: `pending` said 0 while a URL waited between its tier's head and tail, and it
    was never fetched (the cluster-gone test). The slots are read while holes are
    counted, and the count is let go once every slot is passed."""
    before = Harness()
    before.open_host("a.example", b"", "/19")  # robots.txt answered, /19 queued
    state = before.hosts["a.example"]
    state["tails"][0] += 1  # the empty new slot of a move lost with the worker
    state["holes"] = 2  # one over: it also counts the slot that still holds /19
    after = Harness(hosts=before.hosts, queue=before.queue, clock=before.clock)
    after.frontier.adopt(0, list(after.hosts.items()))
    fetched: list[str] = []
    for _ in range(3):
        after.clock.advance(10)
        for page in after.dispatched():
            fetched.append(page.url)
            after.finish(page)
    assert fetched == ["http://a.example/19"]
    state = after.hosts["a.example"]
    assert state["heads"] == state["tails"] and state["holes"] == 0
    assert after.queue == {}
