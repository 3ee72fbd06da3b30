"""Unit tests for streams.core.frontier: plain dicts as tables, a fake clock, no Kafka.

Here: robots.txt first and one request per host, partitions and counters, priority
tiers, trap budgets, authorities and holes. The politeness clock and robots.txt are
in test_frontier_politeness.py, leases and recovery in test_frontier_recovery.py."""

from __future__ import annotations

import itertools

import pytest

from streams.core.frontier import (
    LAZY_MOVES,
    TIER_WEIGHTS,
    TIERS,
    Dispatch,
    Frontier,
    Politeness,
    pending,
    queue_key,
    tier_for,
)
from tests.unit.frontier_helpers import Clock, Harness

# -- robots first, one request per host -------------------------------------------


def test_robots_is_fetched_first_and_pages_wait_for_it() -> None:
    h = Harness()
    h.frontier.enqueue("http://a.example/1")
    h.frontier.enqueue("http://a.example/2")
    (robots,) = h.dispatched()
    assert (robots.kind, robots.url, robots.host) == (
        "robots",
        "http://a.example/robots.txt",
        "a.example",
    )
    assert h.dispatched() == []  # pages wait while robots.txt is in flight
    h.check_counters()
    h.finish(robots, body=b"User-agent: *\nAllow: /\n")
    (page,) = h.dispatched()
    assert (page.kind, page.url) == ("page", "http://a.example/1")
    h.check_counters()


def test_robots_url_keeps_the_port() -> None:
    h = Harness()
    assert h.frontier.enqueue("http://a.example:8080/x") is None
    assert "a.example:8080" in h.hosts
    (robots,) = h.dispatched()
    assert robots.url == "http://a.example:8080/robots.txt"


def test_one_request_in_flight_per_host() -> None:
    h = Harness()
    h.open_host("a.example", b"", "/1", "/2", "/3")
    (first,) = h.dispatched()
    assert h.dispatched() == []
    h.frontier.enqueue("http://a.example/4")
    assert h.dispatched() == []  # a new URL does not bypass the busy host
    h.finish(first)
    (second,) = h.dispatched()
    assert [first.url, second.url] == ["http://a.example/1", "http://a.example/2"]
    assert h.dispatched() == []


def test_hosts_are_independent() -> None:
    h = Harness()
    h.frontier.enqueue("http://a.example/")
    h.frontier.enqueue("http://b.example/")
    assert sorted(d.host for d in h.dispatched()) == ["a.example", "b.example"]


# -- partitions and counters ------------------------------------------------------


def test_due_only_returns_hosts_of_its_partition() -> None:
    def part(authority: str) -> int:
        return 0 if authority.startswith("a") else 1

    h = Harness(partition_of=part)
    for host in ("a1.example", "a2.example", "b1.example", "b2.example", "b3.example"):
        h.frontier.enqueue(f"http://{host}/")
    p0 = h.dispatched(0)
    assert sorted(d.host for d in p0) == ["a1.example", "a2.example"]
    assert sorted(h.frontier.partitions()) == [0, 1]
    assert h.frontier.next_wake(0) is None
    assert h.frontier.next_wake(1) == h.clock()
    p1 = h.dispatched(1)
    assert sorted(d.host for d in p1) == ["b1.example", "b2.example", "b3.example"]
    assert h.dispatched(0) == h.dispatched(1) == []


def test_counters_stay_consistent_through_a_crawl() -> None:
    h = Harness(Politeness(delay=0.5))
    robots = {
        "a.example": b"User-agent: *\nDisallow: /no\n",
        "b.example": b"",
        "c.example": b"",
    }
    for i in range(6):
        for host in robots:
            h.frontier.enqueue(f"http://{host}/{'no' if i % 3 == 0 else 'yes'}/{i}")
    h.check_counters()
    fetched: list[str] = []
    disallowed: list[str] = []
    for _ in range(200):
        dispatches, decisions = h.due()
        disallowed += [d.url for d in decisions]
        h.check_counters()
        for d in dispatches:
            status = 503 if d.host == "c.example" and d.kind == "page" and not fetched else 200
            h.finish(d, status, body=robots[d.host] if d.kind == "robots" else None)
            if d.kind == "page":
                fetched.append(d.url)
            h.check_counters()
        h.clock.advance(0.25)
        if not h.frontier.queued and not h.frontier.in_flight:
            break
    assert h.frontier.queued == h.frontier.in_flight == 0
    assert sorted(disallowed) == sorted(f"http://a.example/no/{i}" for i in (0, 3))
    assert len(fetched) == 18 - 2
    assert not any("/no/" in u and "a.example" in u for u in fetched)
    assert h.queue == {}


def test_queue_keys_keep_fifo_order_as_strings() -> None:
    keys = [queue_key("a.example", tier, n) for tier in range(TIERS) for n in (9, 10, 100, 10**6)]
    assert keys == sorted(keys)


def test_write_back_holds_host_states_until_flush() -> None:
    """With write_back, a host's several changes in one event become one table write."""
    from streams.core.frontier import Frontier, Politeness

    writes: list[str] = []

    class CountingDict(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: str, value: object) -> None:
            writes.append(key)
            super().__setitem__(key, value)

    hosts: CountingDict = CountingDict()
    frontier = Frontier(hosts, {}, Politeness(), lambda a: 0, clock=lambda: 100.0, write_back=True)
    for i in range(5):
        frontier.enqueue(f"http://a.test/{i}")
    dispatches, _ = frontier.due(0)
    assert [d.kind for d in dispatches] == ["robots"]
    assert writes == [] and "a.test" not in hosts
    assert frontier.flush() == 1
    assert writes == ["a.test"] and pending(hosts["a.test"]) == 5


# -- priority tiers -----------------------------------------------------------------

#: (priority, depth) that land in each tier, per tier_for.
TIER_EXAMPLES = {0: (1, 0), 1: (0, 0), 2: (0, 3), 3: (0, 7)}


def test_tier_for_depth_priority_and_inlinks() -> None:
    assert [tier_for(p, d) for p, d in TIER_EXAMPLES.values()] == [0, 1, 2, 3]
    assert tier_for(0, 1) == 1 and tier_for(0, 2) == 2 and tier_for(0, 5) == 3
    assert tier_for(priority=5, depth=9) == 0  # a seed priority lifts any depth
    assert tier_for(priority=-3, depth=0) == TIERS - 1  # and a negative one sinks it
    assert tier_for(0, 3, inlinks=1) == 2
    assert tier_for(0, 3, inlinks=2) == 1  # each doubling of in-links lifts one tier
    assert tier_for(0, 3, inlinks=4) == 0
    assert tier_for(0, 9, inlinks=1000) == 0


def test_the_selector_serves_tiers_8_4_2_1_without_starving_any() -> None:
    h = Harness()
    per_tier = 1500
    h.frontier.enqueue("http://a.example/t1/home")  # a seed, in tier 1
    (robots,) = h.dispatched()
    h.finish(robots)
    for i in range(per_tier):
        for tier, (priority, depth) in TIER_EXAMPLES.items():
            h.frontier.enqueue(f"http://a.example/t{tier}/{i}", depth, priority)
    order: list[int] = []
    cycle = sum(TIER_WEIGHTS)
    for _ in range(100 * cycle):
        (d,) = h.dispatched()
        order.append(int(d.url.split("/")[3][1:]))
        h.finish(d)
    h.check_counters()
    assert h.frontier.queued == TIERS * per_tier + 1 - 100 * cycle
    order = order[: 99 * cycle]
    counts = [order.count(t) for t in range(TIERS)]
    # over 99 full cycles the mix is the weights exactly
    assert counts == [99 * w for w in TIER_WEIGHTS]
    # and no tier waits longer than one cycle while it has work
    for tier in range(TIERS):
        at = [i for i, t in enumerate(order) if t == tier]
        assert max(b - a for a, b in itertools.pairwise(at)) <= cycle


def test_fifo_within_a_tier_and_lower_tiers_take_over_when_higher_ones_empty() -> None:
    h = Harness()
    h.frontier.enqueue("http://a.example/hot/0", 0, 1)  # tier 0
    for i in range(3):
        h.frontier.enqueue(f"http://a.example/deep/{i}", 9, 0)  # tier 3
    (robots,) = h.dispatched()
    h.finish(robots)
    got = []
    for _ in range(4):
        (d,) = h.dispatched()
        got.append(d.url)
        h.finish(d)
    assert got == [
        "http://a.example/hot/0",
        "http://a.example/deep/0",
        "http://a.example/deep/1",
        "http://a.example/deep/2",
    ]
    h.check_counters()


def test_a_throttled_page_goes_back_to_the_head_of_its_own_tier() -> None:
    h = Harness()
    h.open_host("a.example", b"")
    (home,) = h.dispatched()
    h.finish(home)
    h.frontier.enqueue("http://a.example/deep", 9, 0)
    (d,) = h.dispatched()
    h.finish(d, 503)
    h.frontier.enqueue("http://a.example/deep2", 9, 0)
    (again,) = h.dispatched()
    assert again.url == "http://a.example/deep"
    assert h.queue and all(key.split("\x00")[1] == "3" for key in h.queue)
    h.check_counters()


# -- trap budgets -------------------------------------------------------------------


def test_host_page_budget_stops_a_host_and_logs_the_rest() -> None:
    h = Harness(Politeness(max_host_pages=3))
    h.open_host("a.example", b"", *[f"/{i}" for i in range(6)])
    h.frontier.enqueue("http://b.example/1")
    fetched = []
    decisions = []
    for _ in range(20):
        dispatches, more = h.due()
        decisions += more
        for d in dispatches:
            if d.kind == "page":
                fetched.append(d.url)
            h.finish(d)
    assert [u for u in fetched if "a.example" in u] == [f"http://a.example/{i}" for i in range(3)]
    assert "http://b.example/1" in fetched  # another host is not affected
    assert [(x.url, x.outcome) for x in decisions] == [
        (f"http://a.example/{i}", "host-budget") for i in range(3, 6)
    ]
    assert decisions[0].reason == "host page budget of 3 spent"
    # later URLs of the spent host are refused at once
    refused = h.frontier.enqueue("http://a.example/late", depth=2)
    assert refused is not None
    assert (refused.outcome, refused.host, refused.depth) == ("host-budget", "a.example", 2)
    h.check_counters()


def test_max_urls_queued_per_host() -> None:
    h = Harness(Politeness(max_host_queue=5))
    refused = [h.frontier.enqueue(f"http://trap.example/{i}") for i in range(8)]
    assert refused[:5] == [None] * 5
    assert [(r.url, r.outcome) for r in refused[5:] if r is not None] == [
        (f"http://trap.example/{i}", "host-queue-full") for i in range(5, 8)
    ]
    assert refused[5] is not None and refused[5].reason == "5 URLs already queued for the host"
    assert h.frontier.queued == 5
    h.check_counters()
    # as the queue drains, there is room again
    (robots,) = h.dispatched()
    h.finish(robots)
    (d,) = h.dispatched()
    h.finish(d)
    assert h.frontier.enqueue("http://trap.example/again") is None
    assert h.frontier.enqueue("http://trap.example/more") is not None


@pytest.mark.parametrize(
    "url",
    [
        "http://a.example/x",
        "https://a.example:8443/x?y#z",
        "http://a.example:80/",
        "http://a.example:65535/",
        "http://a.example:65536/",  # out of range: urlsplit drops it
        "http://a.example:0/",
        "http://a.example:080/",
        "http://a.example:/",
        "http://a.example",
        "http://a.example?q",
        "http://a.example#f",
        "http://A.Example/x",
        "HTTP://a.example/x",
        "http://u:p@a.example:81/x",
        "http://[::1]:8080/x",
        "http://a.example\t/x",
        "http://a.exa\tmple/x",
        "http://127.0.0.1:8080/x",
        "http://a_b-c.example./x",
        "ftp://a.example/x",
        "http:/a.example/x",
    ],
)
def test_authority_of_agrees_with_urlsplit(url: str) -> None:
    from streams.core.frontier_model import _authority_by_urlsplit, authority_of

    assert authority_of(url) == _authority_by_urlsplit(url)


def test_pending_sums_every_tier_and_refuses_a_ragged_state() -> None:
    """Counts stored as floats (an older changelog) count as ints; a state whose
    heads and tails differ in length is an error, not a silent miscount."""
    assert pending({"heads": [0, 5, 3, 1.0], "tails": [0, 9, 3, 4]}) == 7  # type: ignore[typeddict-item]
    with pytest.raises(ValueError):
        pending({"heads": [0, 0, 0], "tails": [1, 1, 1, 1]})  # type: ignore[typeddict-item]


class _CountingQueue(dict):  # type: ignore[type-arg]
    """A queue table that counts its reads (a pop or a get: each a RocksDB read)."""

    pops = 0

    def pop(self, key, *default):  # type: ignore[no-untyped-def,override]
        self.pops += 1
        return super().pop(key, *default)

    def get(self, key, default=None):  # type: ignore[no-untyped-def,override]
        self.pops += 1
        return super().get(key, default)


class _NoHoles(Frontier):
    """The frontier as it was before it remembered the holes its moves leave."""

    def _take(self, key: str, keep: bool = False) -> tuple[dict | None, str]:
        self._holes.clear()
        return super()._take(key, keep)


@pytest.mark.parametrize("lazy_moves", [0, LAZY_MOVES])
@pytest.mark.parametrize("seed", range(6))
def test_holes_left_by_moves_are_skipped_unread_and_change_nothing(
    seed: int, lazy_moves: int
) -> None:
    """Differential: random enqueues, re-tier moves (of queued URLs, of gone ones, and
    of pages a 503 put back), dispatches, completions, parked hosts and a partition
    forgotten and adopted again, on a frontier that skips the holes its moves left
    without reading them and on one that reads them (as before): the same fetches,
    decisions, queue and host states at every step, with fewer queue reads. Moves
    written at once (``lazy_moves=0``) or held in memory alike."""
    import random

    rng = random.Random(seed)
    clock_a, clock_b = Clock(), Clock()
    queue_a, queue_b = _CountingQueue(), _CountingQueue()
    hosts_a: dict = {}
    hosts_b: dict = {}
    # an adoption releases its busy hosts at once (no grace): their fetches are lost here
    policy = Politeness(adopt_grace=0.0)
    a = Frontier(hosts_a, queue_a, policy, lambda _: 0, clock_a, lazy_moves=lazy_moves)
    b = _NoHoles(hosts_b, queue_b, policy, lambda _: 0, clock_b, lazy_moves=lazy_moves)
    urls = [f"http://h{i % 3}.test/p{i}" for i in range(120)]
    slots: dict[str, tuple[int, int]] = {}  # what the registry would say: last slot
    inlinks: dict[str, int] = {}
    in_flight: list[Dispatch] = []
    for _ in range(600):
        roll = rng.random()
        if roll < 0.3:
            url = rng.choice(urls)
            depth = rng.choice([0, 2, 5, 8])
            results = [f.enqueue(url, depth) for f in (a, b)]
            assert results[0] == results[1]
            if results[0] is None:
                assert a.last_slot == b.last_slot
                slots[url], inlinks[url] = a.last_slot, 1
        elif roll < 0.6 and slots:
            url = rng.choice(sorted(slots))
            inlinks[url] *= 2
            tier, seq = slots[url]
            new_tier = max(0, tier - 1)
            moved = [f.retier(url, tier, seq, new_tier) for f in (a, b)]
            assert moved[0] == moved[1]
            if moved[0] is not None:
                slots[url] = moved[0]
        elif roll < 0.8:
            due = [f.due(0) for f in (a, b)]
            assert due[0] == due[1]
            in_flight.extend(due[0][0])
        elif roll < 0.97 and in_flight:
            d = in_flight.pop(rng.randrange(len(in_flight)))
            status = 404 if d.kind == "robots" else rng.choice([200, 200, 503, 0])
            done = [
                f.complete(d.host, d.kind, status, "x", 1.0, c.now)
                for f, c in ((a, clock_a), (b, clock_b))
            ]
            assert done == [done[0], done[0]]
        else:
            for f, hosts in ((a, hosts_a), (b, hosts_b)):
                f.forget(0)
                f.adopt(0, list(hosts.items()))
            in_flight.clear()  # their completions are stale now (re-dispatched)
        for clock in (clock_a, clock_b):
            clock.advance(0.5)
        assert dict(queue_a) == dict(queue_b) and hosts_a == hosts_b
        assert a.queued == b.queued and a.in_flight == b.in_flight
    if lazy_moves:
        # a lazy move's old key is skipped by its move's record, not as a hole: only the
        # old keys of moves served already are left to the hole memory, if any
        assert queue_a.pops <= queue_b.pops
    else:
        assert queue_a.pops < queue_b.pops  # holes were skipped without a read
