"""The frontier stage and the URL registry: in-link counts lift a queued URL a tier.

url-seen counts links into the registry and asks the frontier to re-tier a queued
URL; these tests run url-seen's and the frontier stage's own handlers over a real
RocksDB registry (helpers in frontier_registry_helpers.py).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from streams.core.frontier import Frontier, Politeness
from streams.core.records import UrlCandidate
from streams.core.urlstate import is_retier, retier_candidate
from streams.stages import url_seen
from tests.unit.frontier_registry_helpers import T0, Clock, Crawl, SeenOutbox, done


def test_in_links_count_across_batches_and_lift_a_queued_url_a_tier(tmp_path: Path) -> None:
    """url-seen counts links to URLs it has seen into the registry; when the count lifts
    a still-queued URL over a tier threshold, the frontier moves it up and it goes first."""
    crawl = Crawl(tmp_path / "reg")
    filters = url_seen.SeenFilters(capacity=1000, error_rate=0.001)
    deep = "http://a.test/deep"
    others = [f"http://a.test/other/{i}" for i in range(3)]

    def links(*urls: str, source: str = "http://a.test/") -> list[dict[str, Any]]:
        """url-seen's step for one url-filter batch; returns what it sent the frontier."""
        out = SeenOutbox()
        batch = {"urls": [{"url": u, "depth": 5, "priority": 0, "via": source} for u in urls]}
        url_seen.handle(0, batch, crawl.registry, {}, filters, lambda p: [], out)  # type: ignore[arg-type]
        return out.sent

    first = links(*others, deep)
    assert [c["url"] for c in first] == [*others, deep]
    (robots,) = crawl.handle(candidates=first)
    assert crawl.state(deep)["tier"] == 3  # depth 5, one link: the lowest tier
    before = crawl.frontier.queued
    for source, count, tier in [("b", 2, 2), ("c", 3, None), ("d", 4, 1)]:
        was = crawl.state(deep)
        lifted = links(deep, source=f"http://{source}.test/")
        assert crawl.registry.state(deep)["in"] == count  # type: ignore[index]
        if tier is None:  # 3 links lift no more than 2: nothing to ask
            assert lifted == []
            continue
        # each doubling of the count crosses a tier threshold: the frontier is asked,
        # told the slot url-seen read, so it moves the item without reading the registry
        slot = (was["tier"], was["q"])
        assert [(c["url"], c["via"], c["slot"], c["inlinks"]) for c in lifted] == [
            (deep, "retier", slot, count)
        ]
        reads = crawl.counting.reads
        assert crawl.handle(candidates=lifted) == []  # robots.txt still in flight
        assert crawl.counting.reads == reads
        assert crawl.state(deep)["tier"] == tier and crawl.state(deep)["in"] == count
    assert crawl.frontier.queued == before  # moved, not added: the holes are no URLs
    # a seed or redirect met again is not an in-link; links to unregistered URLs are new
    assert links(deep, source="seed") == [] and crawl.registry.state(deep)["in"] == 4  # type: ignore[index]
    order = [crawl.handle(completions=[done(robots, 404)])[0]["url"]]
    while len(order) < 4:
        (request,) = crawl.handle(
            completions=[done({"url": order[-1], "host": "a.test", "kind": "page"})]
        )
        order.append(request["url"])
    assert order[0] == deep  # lifted over the URLs queued before it
    assert sorted(order) == sorted([deep, *others])  # each once: the hole was skipped
    crawl.handle(completions=[done({"url": order[-1], "host": "a.test", "kind": "page"})])
    assert crawl.frontier.queued == 0 and crawl.frontier.in_flight == 0
    # a fetched URL is not moved again, but its count keeps growing
    assert links(deep, source="http://e.test/") == []
    assert crawl.state(deep)["s"] == "fetched" and crawl.state(deep)["in"] == 5


def test_due_serves_every_due_host_whatever_its_tiers() -> None:
    """Tiers order URLs within a host (8:4:2:1, tested in test_frontier.py); across hosts
    there is no selector to starve anyone: every due host gets its next fetch at once,
    so a host holding only lowest-tier URLs is asked as soon as one holding tier 0."""
    frontier = Frontier({}, {}, Politeness(), lambda _: 0, Clock())
    for i in range(20):
        frontier.enqueue(f"http://low{i}.test/x", depth=9)  # tier 3
        frontier.enqueue(f"http://high{i}.test/x", depth=0, priority=1, inlinks=4)  # tier 0
    robots, _ = frontier.due(0)
    assert len(robots) == 40
    for d in robots:
        frontier.complete(d.host, "robots", 404, "fetched", 1.0, T0)
    pages, _ = frontier.due(0)
    assert sorted(d.host for d in pages) == sorted(
        [f"low{i}.test" for i in range(20)] + [f"high{i}.test" for i in range(20)]
    )


class _World:
    """One run of the differential re-tier test: url-seen and the frontier over a real
    registry, url-seen's frontier messages held until the script delivers them."""

    def __init__(self, path: Path, bare: bool) -> None:
        self.crawl = Crawl(path)
        self.bare = bare
        self.filters = url_seen.SeenFilters(capacity=10_000, error_rate=0.001)
        self.held: list[list[dict[str, Any]]] = []
        self.answered = 0

    def links(self, batch: list[UrlCandidate]) -> None:
        out = SeenOutbox()
        url_seen.handle(
            0,
            {"urls": batch},
            self.crawl.registry,  # type: ignore[arg-type]
            {},
            self.filters,
            lambda p: [],
            out,  # type: ignore[arg-type]
            clock=self.crawl.clock,
        )
        if self.bare:  # the requests url-seen sent before slots: the frontier looks them up
            out.sent = [{k: v for k, v in c.items() if k != "slot"} for c in out.sent]
        self.held.append(out.sent)

    def deliver(self, index: int, count: int = 1) -> None:
        """Send held messages to the frontier as one message, as url-seen's outbox
        does for the messages it handles in one batch."""
        merged: list[dict[str, Any]] = []
        for _ in range(min(count, len(self.held) - index)):
            merged.extend(self.held.pop(index))
        self.crawl.handle(candidates=merged)

    def answer(self, statuses: list[int]) -> None:
        requests = self.crawl.out.fetches[self.answered :]
        self.answered = len(self.crawl.out.fetches)
        completions = []
        for request, status in zip(requests, statuses, strict=False):
            body = b"User-agent: *\nDisallow: /p1\n" if request["kind"] == "robots" else None
            completions.append(done(request, 200 if body else status, body=body))
        self.crawl.handle(completions=completions)

    def outcome(self) -> tuple[Any, ...]:
        frontier = self.crawl.frontier
        return (
            dict(frontier.queue),
            dict(frontier.hosts),
            list(self.crawl.registry.url_states()),
            [(r["url"], r["kind"]) for r in self.crawl.out.fetches],
            [{k: v for k, v in r.items() if k != "at"} for r in self.crawl.out.logs],
            frontier.queued,
        )


@pytest.mark.parametrize("seed", range(4))
def test_a_retier_by_its_carried_slot_ends_as_one_looked_up_in_the_registry(
    tmp_path: Path, seed: int
) -> None:
    """Differential: one random crawl run twice, url-seen's re-tier requests carrying the
    slot it read (the frontier moves the item from there) or bare (the frontier reads the
    slot from the registry, as before slots). Messages to the frontier are delivered late
    and out of order, so requests cross moves, dispatches, 503 retries (which put a page
    back at its tier's head) and each other, and several url-seen messages go out as one
    (so one frontier message holds several requests for a URL): a carried slot is then
    stale and the registry is asked. Both runs must end with the same queue, host states, registry
    states, fetch requests and crawl log, step by step."""
    rng = random.Random(seed)
    hosts = [f"h{i}.test" for i in range(3)]
    universe = [f"http://{h}/p{j}" for h in hosts for j in range(40)]
    depth = {url: rng.choice([0, 1, 2, 3, 5, 7]) for url in universe}
    worlds = [_World(tmp_path / "slot", bare=False), _World(tmp_path / "bare", bare=True)]
    for _ in range(250):
        roll = rng.random()
        if roll < 0.5:
            source = rng.choice(hosts)
            picked = [rng.choice(universe) for _ in range(rng.randint(1, 8))]
            batch: list[UrlCandidate] = [
                {"url": u, "depth": depth[u], "priority": 0, "via": f"http://{source}/x"}
                for u in picked
            ]
            for world in worlds:
                world.links(batch)
        elif roll < 0.85 and worlds[0].held:
            index = rng.randrange(len(worlds[0].held)) if rng.random() < 0.4 else 0
            count = rng.choice([1, 1, 2, 4])
            for world in worlds:
                world.deliver(index, count)
        else:
            statuses = [rng.choice([200, 200, 200, 503]) for _ in range(10)]
            for world in worlds:
                world.answer(statuses)
        assert worlds[0].outcome() == worlds[1].outcome()
    while worlds[0].held:
        for world in worlds:
            world.deliver(0)
    assert worlds[0].outcome() == worlds[1].outcome()
    slotted, bare = (w.crawl.counting.reads for w in worlds)
    assert 0 < slotted < bare  # some carried slots were stale, most were not


def test_a_retier_request_names_its_slot() -> None:
    old = {"s": "queued", "tier": 3, "q": -1, "depth": 5}  # a head slot below 0 is a slot
    (candidate,) = [retier_candidate("http://a.test/x", old, {"in": 2})]
    assert candidate is not None and candidate["via"] == "retier" and is_retier("retier")
    assert candidate["slot"] == (3, -1)
    # only the bare via is a request: the slot travels in frontier_event's retier_slots
    for via in (None, "http://retier.test/", "seed", "retierx", "retier:3:1"):
        assert not is_retier(via)


@pytest.mark.parametrize("bare", [False, True])
def test_requests_for_one_url_in_one_message_move_it_as_one_by_one_would(
    tmp_path: Path, bare: bool
) -> None:
    """url-seen asks in every message that brings a URL a link until the frontier's move
    reaches the registry, so one frontier message can hold several requests for a URL,
    carrying the slot each read: a request that would not move it (its tier is reached)
    does not stop a later one that lifts it further, and after a move the rest are
    skipped without a registry read (with slots)."""
    crawl = Crawl(tmp_path / "reg")
    deep = "http://a.test/deep"
    crawl.register(deep)
    crawl.handle(candidates=[{"url": deep, "depth": 5, "priority": 0, "via": None}])
    assert (crawl.state(deep)["tier"], crawl.state(deep)["q"]) == (3, 0)

    def ask(tier: int, seq: int, inlinks: int) -> dict[str, Any]:
        request = {"url": deep, "depth": 5, "priority": 0, "via": "retier", "inlinks": inlinks}
        return request if bare else {**request, "slot": (tier, seq)}

    reads = crawl.counting.reads
    crawl.handle(candidates=[ask(3, 0, 2), ask(3, 0, 3)])  # 2 and 3 links: both to tier 2
    assert (crawl.state(deep)["tier"], crawl.state(deep)["q"]) == (2, 0)
    assert crawl.counting.reads == reads + (1 if bare else 0)
    # one read before the move (tier 2 now), one after: tier 2 is reached, tier 1 is not
    crawl.handle(candidates=[ask(3, 0, 3), ask(2, 0, 4)])
    assert (crawl.state(deep)["tier"], crawl.state(deep)["q"]) == (1, 0)
    assert crawl.frontier.queued == 1  # one URL waiting; the two holes it left are none
    assert [item["url"] for item in crawl.frontier.queue.values()] == [deep]
