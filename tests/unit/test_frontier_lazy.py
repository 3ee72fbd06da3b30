"""Lazy re-tier moves (streams.core.frontier): a move held in memory, the item left
in the queue table at its old key until its new key is served.

Two claims, each tested against plain dicts as tables:

* while the worker lives, a frontier with lazy moves dispatches and decides exactly
  what one that writes every move at once does (the frontier before lazy moves,
  kept here verbatim as the reference), and its table plus its moves in memory are
  that frontier's table;
* a worker that dies (its memory lost, the tables kept) or a partition that moves
  loses only promotions: every queued URL is still fetched exactly once.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from typing import Any

import pytest

import streams.core.frontier_queues as queues_module
from streams.core.frontier import (
    LAZY_MOVES,
    TIERS,
    Decision,
    Dispatch,
    Frontier,
    Politeness,
    QueueItem,
    authority_of,
    queue_key,
    tier_for,
)
from streams.core.frontier_model import copy_state
from streams.core.frontier_queues import HOLES_SIZE
from tests.unit.frontier_helpers import Clock


class DurableMoves(Frontier):
    """The frontier before lazy moves: every re-tier move popped the item at its old
    key and put it at its new one (the code of 939de51, with holes counted in the host
    state as the frontier counts them now)."""

    def retier(self, url: str, tier: int, seq: int, new_tier: int) -> tuple[int, int] | None:
        authority = authority_of(url)
        state = self._get(authority)
        if state is None or not 0 <= new_tier < tier < TIERS:
            return None
        if not int(state["heads"][tier]) <= seq < int(state["tails"][tier]):
            return None
        old_key = queue_key(authority, tier, seq)
        item = self.queue.pop(old_key, None)  # one read and delete, not a get and a del
        if item is None:
            return None
        if item.get("url") != url or item.get("retries"):
            self.queue[old_key] = item
            return None
        state = copy_state(state)
        tail = int(state["tails"][new_tier])
        self.queue[queue_key(authority, new_tier, tail)] = {**item, "tier": new_tier}
        state["tails"][new_tier] = tail + 1
        state["holes"] = int(state.get("holes", 0)) + 1  # the old slot, until passed
        self._put(authority, state)
        holes = self._holes
        if len(holes) >= HOLES_SIZE:
            holes.clear()  # those are read when the head gets there, as before
        holes.add(old_key)
        return new_tier, tail

    def _take(self, key: str, keep: bool = False) -> tuple[QueueItem | None, str]:
        holes = self._holes
        if key in holes:
            holes.discard(key)
            return None, ""
        if keep:  # (a dispatch leaves its item in place since: Frontier._mark_busy)
            item = self.queue.get(key)
            return item, key if item is not None else ""
        return self.queue.pop(key, None), ""


class WriteCounter(dict):  # type: ignore[type-arg]
    """A queue table that counts its writes (puts and deletes: each a RocksDB write
    and a changelog record in the crawl)."""

    writes = 0

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.writes += 1
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self.writes += 1
        return super().pop(key, *default)


def as_served(frontier: Frontier) -> dict[str, Any]:
    """The queue as the frontier serves it: its table, less the old keys of the moves
    it holds in memory, plus those moves at their new keys, less the items of the pages
    in flight (left in the table until their fetch is over: at the key they were served
    from, or a lazy move's old key)."""
    in_flight = in_flight_items(frontier)
    view = {
        k: v for k, v in frontier.queue.items() if k not in frontier._moved and k not in in_flight
    }
    view.update((k, item) for k, (item, _) in frontier._lazy.items())
    return view


def in_flight_items(frontier: Frontier) -> dict[str, str]:
    """Queue key → URL of each page in flight, whose item the table holds there."""
    out = {}
    for state in frontier.hosts.values():
        key = state.get("inflight_key")
        if key:
            assert frontier.queue[key]["url"] == state["inflight"]["url"]
            out[key] = state["inflight"]["url"]
    return out


def host_states(frontier: Frontier) -> dict[str, Any]:
    """The host states, less where the item of the page in flight lies (a lazy move's
    old key, or where a written move put it)."""
    return {
        host: {k: v for k, v in state.items() if k != "inflight_key"}
        for host, state in frontier.hosts.items()
    }


HOSTS = ["a.test", "b.test", "c.test"]
ROBOTS = b"User-agent: *\nDisallow: /no\n"


class Run:
    """One frontier and what the script knows of it: the slot the registry would name
    for each queued URL, the fetches in flight."""

    def __init__(self, frontier: Frontier, clock: Clock) -> None:
        self.frontier = frontier
        self.clock = clock
        self.in_flight: list[Dispatch] = []


def _random_url(rng: random.Random, n: int) -> tuple[str, int, int]:
    host = rng.choice(HOSTS)
    page = "/no/" if rng.random() < 0.05 else "/p/"
    return f"http://{host}{page}{n}", rng.choice([0, 1, 2, 3, 5, 8]), rng.choice([0, 0, 0, 1])


@pytest.mark.parametrize(
    ("lazy_moves", "holes"), [(LAZY_MOVES, HOLES_SIZE), (3, HOLES_SIZE), (LAZY_MOVES, 2)]
)
@pytest.mark.parametrize("seed", range(12))
def test_lazy_moves_dispatch_and_decide_as_written_moves_do(
    seed: int, lazy_moves: int, holes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Differential: random enqueues, re-tier requests (by the slot the registry would
    name, by a stale slot, by a slot holding another URL, of URLs moved, dispatched or
    put back by a 503), dispatches, completions (200, 429/503 retried or given up,
    connection errors until the host is parked), robots.txt that disallows some pages
    or is unreachable (the host drained), and a host page budget. A frontier writing
    every move (the reference) and one holding moves in memory, at most `lazy_moves`
    at once (3: most moves find the memory full and are written), must return the same
    slots, dispatches and decisions, count the same URLs queued and in flight, write
    the same host states, and serve the same queue at every step. With a hole
    memory of 2, it forgets most holes, old keys of moves in memory among them."""
    monkeypatch.setattr(queues_module, "HOLES_SIZE", holes)
    rng = random.Random(seed)
    policy = Politeness(max_host_pages=rng.choice([0, 0, 40]))
    runs = []
    for cls, limit in ((DurableMoves, 0), (Frontier, lazy_moves)):
        clock = Clock()
        frontier = cls({}, WriteCounter(), policy, lambda _: 0, clock, lazy_moves=limit)
        runs.append(Run(frontier, clock))
    ref, lazy = runs
    slots: dict[str, tuple[int, int]] = {}  # the registry's slot of each queued URL
    stale: dict[str, tuple[int, int]] = {}  # the slot before the last move
    links: dict[str, int] = {}
    made = 0
    for _ in range(700):
        roll = rng.random()
        if roll < 0.25:
            url, depth, priority = _random_url(rng, made)
            made += 1
            results = [r.frontier.enqueue(url, depth, priority) for r in runs]
            assert results[0] == results[1]
            if results[0] is None:
                assert ref.frontier.last_slot == lazy.frontier.last_slot
                slots[url], links[url] = ref.frontier.last_slot, 1
        elif roll < 0.55 and slots:
            url = rng.choice(sorted(slots))
            links[url] *= 2
            slot = slots[url]
            pick = rng.random()
            if pick < 0.15 and url in stale:
                slot = stale[url]
            elif pick < 0.2:
                slot = (rng.randrange(TIERS), rng.randrange(-2, 30))
            new_tier = tier_for(0, 5, links[url]) if rng.random() < 0.5 else slot[0] - 1
            moved = [r.frontier.retier(url, slot[0], slot[1], new_tier) for r in runs]
            assert moved[0] == moved[1]
            if moved[0] is not None:
                stale[url], slots[url] = slots[url], moved[0]
        elif roll < 0.8:
            due = [r.frontier.due(0) for r in runs]
            assert due[0] == due[1]
            for r, (dispatches, _) in zip(runs, due, strict=True):
                r.in_flight.extend(dispatches)
            for dispatch in due[0][0]:
                slots.pop(dispatch.url, None)
        elif ref.in_flight:
            index = rng.randrange(len(ref.in_flight))
            d = ref.in_flight[index]
            assert lazy.in_flight[index] == d
            body = None
            if d.kind == "robots":
                status = rng.choice([200, 200, 404, 500])
                body = ROBOTS if status == 200 else None
            else:
                status = rng.choice([200, 200, 200, 200, 429, 503, 0])
            retry_after = rng.choice([None, 1.0, 30.0]) if status in (429, 503) else None
            done = []
            for r in runs:
                r.in_flight.pop(index)
                done.append(
                    r.frontier.complete(
                        d.host, d.kind, status, "x", 5.0, r.clock.now, retry_after, body
                    )
                )
            assert done[0] == done[1]
            for decision in done[0]:
                if not decision.requeued:
                    slots.pop(decision.url, None)
            if status in (429, 503) and d.kind == "page":
                slots.pop(d.url, None)  # back at its tier's head: no slot in the registry
        step = rng.choice([0.0, 0.5, 3.0])
        for r in runs:
            r.clock.now += step
        assert host_states(ref.frontier) == host_states(lazy.frontier)
        assert as_served(ref.frontier) == as_served(lazy.frontier)
        assert sorted(in_flight_items(ref.frontier).values()) == sorted(
            in_flight_items(lazy.frontier).values()
        )
        assert ref.frontier.queued == lazy.frontier.queued
        # the frontier size is the URLs waiting in the queue, exactly: no hole counted
        assert lazy.frontier.queued == len(as_served(lazy.frontier))
        assert ref.frontier.in_flight == lazy.frontier.in_flight
    assert lazy.frontier.queue.writes < ref.frontier.queue.writes  # type: ignore[attr-defined]


def test_the_differential_covers_every_path_of_a_lazy_move() -> None:
    """The random runs above do reach what they are meant to: lazy moves served from
    memory, moved again while in memory, written out when the old tier's head got
    there first, and moves written at once because the memory was full."""
    seen: Counter[str] = Counter()

    class Watch(Frontier):
        def retier(self, url: str, tier: int, seq: int, new_tier: int) -> tuple[int, int] | None:
            old = queue_key(authority_of(url), tier, seq)
            chained = old in self._lazy
            full = len(self._lazy) >= self.lazy_moves
            slot = super().retier(url, tier, seq, new_tier)
            if slot is not None:
                seen["chained" if chained else "written" if full else "lazy"] += 1
            return slot

        def _take(self, key: str, keep: bool = False) -> tuple[QueueItem | None, str]:
            served = key in self._lazy
            taken = super()._take(key, keep)
            if served:
                seen["served"] += 1
            return taken

    for seed in range(12):
        for lazy_moves in (LAZY_MOVES, 3):
            rng = random.Random(seed)
            clock = Clock()
            frontier = Watch({}, {}, Politeness(), lambda _: 0, clock, lazy_moves=lazy_moves)
            slots: dict[str, tuple[int, int]] = {}
            in_flight: list[Dispatch] = []
            for n in range(600):
                roll = rng.random()
                if roll < 0.3:
                    url, depth, priority = _random_url(rng, n)
                    if frontier.enqueue(url, depth, priority) is None:
                        slots[url] = frontier.last_slot
                elif roll < 0.55 and slots:
                    url = rng.choice(sorted(slots))
                    tier, seq = slots[url]
                    moved = frontier.retier(url, tier, seq, tier - 1)
                    if moved is not None:
                        slots[url] = moved
                elif roll < 0.8:
                    dispatches, _ = frontier.due(0)
                    in_flight.extend(dispatches)
                    for d in dispatches:
                        slots.pop(d.url, None)
                elif in_flight:
                    d = in_flight.pop(rng.randrange(len(in_flight)))
                    frontier.complete(
                        d.host, d.kind, 404 if d.kind == "robots" else 200, "x", 1.0, clock.now
                    )
                clock.now += 0.5
            seen["materialized"] += frontier.moves_materialized
    assert all(
        seen[path] > 10 for path in ("lazy", "chained", "served", "materialized", "written")
    ), seen


# -- crashes and rebalances -------------------------------------------------------


def _partition(authority: str) -> int:
    return HOSTS.index(authority) % 2


def _crash_run(seed: int) -> Counter[str]:  # noqa: C901 - one random run whose steps share state
    """A crawl over tables that outlive the frontier: random enqueues of new URLs,
    re-tier moves (by the slot the registry would name: after a crash, often a slot
    the lost memory held), dispatches, completions (some 503s retried), and now and
    then a crash (a new frontier over the same tables adopts every partition; the
    fetches in flight never answer) or a rebalance (one partition forgotten and
    adopted again). Asserts that every URL queued was fetched (or given up after
    503s) exactly once; returns what the crashes met."""
    rng = random.Random(seed)
    clock = Clock()
    hosts: dict[str, Any] = {}
    queue: dict[str, Any] = {}

    def new_frontier() -> Frontier:
        return Frontier(hosts, queue, Politeness(), _partition, clock)

    frontier = new_frontier()
    queued: list[str] = []
    slots: dict[str, tuple[int, int]] = {}  # the registry: survives crashes
    links: dict[str, int] = {}
    in_flight: list[Dispatch] = []
    fetched: Counter[str] = Counter()
    given_up: Counter[str] = Counter()
    met: Counter[str] = Counter()

    def complete(d: Dispatch, status: int) -> None:
        decisions = frontier.complete(d.host, d.kind, status, "x", 1.0, clock.now, 1.0)
        if d.kind == "page" and status == 200:
            fetched[d.url] += 1
        for decision in decisions:
            assert decision.outcome == "backoff", decision
            if not decision.requeued:
                given_up[decision.url] += 1

    def due() -> None:
        for partition in (0, 1):
            dispatches, decisions = frontier.due(partition)
            assert decisions == []
            in_flight.extend(dispatches)
            for d in dispatches:
                slots.pop(d.url, None)

    for step in range(900):
        roll = rng.random()
        if roll < 0.25:
            url = f"http://{rng.choice(HOSTS)}/p/{step}"
            assert frontier.enqueue(url, rng.choice([2, 3, 5, 8])) is None
            queued.append(url)
            slots[url], links[url] = frontier.last_slot, 1
        elif roll < 0.55:
            if slots:
                url = rng.choice(sorted(slots))
                links[url] *= 2
                tier, seq = slots[url]
                moved = frontier.retier(url, tier, seq, tier_for(0, 5, links[url]))
                if moved is not None:
                    slots[url] = moved
        elif roll < 0.8:
            due()
        elif roll < 0.97:
            if in_flight:
                d = in_flight.pop(rng.randrange(len(in_flight)))
                complete(d, 404 if d.kind == "robots" else rng.choice([200, 200, 200, 503]))
        elif roll < 0.985:
            met["crashes"] += 1
            met["with moves in memory"] += bool(frontier._lazy)
            met["after moves written out"] += bool(frontier.moves_materialized)
            frontier = new_frontier()  # the memory is gone, the tables are not
            in_flight.clear()  # those fetches never answer: adoption re-dispatches them
            for partition in (0, 1):
                frontier.adopt(partition, list(hosts.items()))
        else:
            partition = rng.randrange(2)
            met["rebalances"] += 1
            frontier.forget(partition)
            in_flight[:] = [d for d in in_flight if _partition(d.host) != partition]
            frontier.adopt(partition, list(hosts.items()))
        clock.now += 0.5
    for _ in range(10_000):  # the rest of the crawl, no more crashes
        if not (frontier.queued or frontier.in_flight):
            break
        due()
        while in_flight:
            d = in_flight.pop(0)
            complete(d, 404 if d.kind == "robots" else 200)
        clock.now += 1.0
    assert frontier.queued == 0 and frontier.in_flight == 0 and queue == {}
    assert fetched + given_up == Counter(queued)  # each once, fetched or given up
    return met


@pytest.mark.parametrize("seed", range(16))
def test_every_queued_url_is_fetched_once_whatever_crashes_lose_of_the_moves(seed: int) -> None:
    assert _crash_run(seed)["crashes"] > 0


def test_the_crashes_meet_moves_in_memory_and_moves_written_out() -> None:
    met = sum((_crash_run(seed) for seed in range(16)), Counter())
    assert met["with moves in memory"] > 10 and met["after moves written out"] > 10, met
    assert met["rebalances"] > 10, met


def _frontier(queue: dict[str, Any], hosts: dict[str, Any], clock: Clock) -> Frontier:
    return Frontier(hosts, queue, Politeness(), lambda _: 0, clock)


def _reborn(queue: dict[str, Any], hosts: dict[str, Any], clock: Clock) -> Frontier:
    """The frontier of a worker started again over the same tables."""
    frontier = _frontier(queue, hosts, clock)
    frontier.adopt(0, list(hosts.items()))
    return frontier


def _pages_in_order(frontier: Frontier, clock: Clock, host: str = "a.test") -> list[str]:
    """Serve the host's queue to the end, one page at a time."""
    order: list[str] = []
    for _ in range(1000):
        dispatches, decisions = frontier.due(0)
        assert decisions == []
        if not dispatches:
            if not frontier.queued:
                return order
            clock.now += 1.0
            continue
        (d,) = dispatches
        if d.kind == "page":
            order.append(d.url)
        frontier.complete(d.host, d.kind, 404 if d.kind == "robots" else 200, "x", 1.0, clock.now)
    raise AssertionError("the queue did not empty")


def _host_with_a_lifted_url(clock: Clock) -> tuple[Frontier, dict[str, Any], dict[str, Any]]:
    """a.test with 20 tier-2 URLs, then 2 tier-3 ones, the first lifted to tier 2."""
    queue: dict[str, Any] = {}
    hosts: dict[str, Any] = {}
    frontier = _frontier(queue, hosts, clock)
    for i in range(20):
        frontier.enqueue(f"http://a.test/two/{i}", depth=2)
    frontier.enqueue("http://a.test/deep/0", depth=5)
    frontier.enqueue("http://a.test/deep/1", depth=5)
    assert frontier.retier("http://a.test/deep/0", 3, 0, 2) == (2, 20)
    return frontier, queue, hosts


def test_a_lazy_move_writes_nothing_until_it_is_served() -> None:
    clock = Clock()
    frontier, queue, hosts = _host_with_a_lifted_url(clock)
    old, new = queue_key("a.test", 3, 0), queue_key("a.test", 2, 20)
    assert queue[old]["url"] == "http://a.test/deep/0" and new not in queue
    assert hosts["a.test"]["tails"] == [0, 0, 21, 2]  # the new slot is the host's
    assert frontier.queued == 22  # URLs waiting: the hole left behind is none
    # moved again while in memory: still nothing written, the old key still holds it
    assert frontier.retier("http://a.test/deep/0", 2, 20, 1) == (1, 0)
    assert queue[old]["url"] == "http://a.test/deep/0" and len(queue) == 22
    # a request naming the old key (a stale registry read) finds nothing to move
    assert frontier.retier("http://a.test/deep/0", 3, 0, 2) is None
    order = _pages_in_order(frontier, clock)
    assert order[0] == "http://a.test/deep/0"  # tier 1 first
    assert sorted(order) == sorted({item["url"] for item in queue.values()} | set(order))
    assert len(order) == len(set(order)) == 22 and queue == {}


def test_the_old_tiers_head_reaching_a_waiting_move_writes_it_out() -> None:
    """Tier 3 is served once in 15 picks and tier 2 four times: its head reaches the
    lifted URL's old key long before tier 2's head reaches its new key. The move is
    written then, so that a crash afterwards finds the item where the table says."""
    clock = Clock()
    frontier, queue, hosts = _host_with_a_lifted_url(clock)
    old, new = queue_key("a.test", 3, 0), queue_key("a.test", 2, 20)
    served = []
    while frontier.moves_materialized == 0:
        dispatches, _ = frontier.due(0)
        for d in dispatches:
            if d.kind == "page":
                served.append(d.url)
            frontier.complete(d.host, d.kind, 404, "x", 1.0, clock.now)
        clock.now += 1.0
        assert len(served) < 30
    assert old not in queue and queue[new]["url"] == "http://a.test/deep/0"
    assert queue[new]["tier"] == 2 and frontier._lazy == {} and frontier._moved == {}
    # a crash now: the new frontier serves the rest in the order the old one would
    twin = copy.deepcopy(frontier)  # the same memory over copies of the tables
    twin.clock = clock
    before = _pages_in_order(twin, clock)
    after = _pages_in_order(_reborn(queue, hosts, clock), clock)
    assert before == after and "http://a.test/deep/0" in after
    assert len(served + after) == len(set(served + after)) == 22


def test_after_a_crash_a_waiting_move_is_served_at_its_old_key() -> None:
    """Memory lost before the move was served or written: the item is served where it
    was queued (its promotion lost), the new key is skipped as a hole, every URL once;
    a re-tier naming the lost new slot finds nothing there."""
    clock = Clock()
    _, queue, hosts = _host_with_a_lifted_url(clock)
    unmoved = _frontier({}, {}, clock)
    for i in range(20):
        unmoved.enqueue(f"http://a.test/two/{i}", depth=2)
    unmoved.enqueue("http://a.test/deep/0", depth=5)
    unmoved.enqueue("http://a.test/deep/1", depth=5)
    reborn = _reborn(queue, hosts, clock)
    assert reborn.retier("http://a.test/deep/0", 2, 20, 1) is None
    assert reborn.queued == 22  # URLs waiting; the lost new slot is a hole, counted as one
    assert _pages_in_order(reborn, clock) == _pages_in_order(unmoved, clock)
    assert queue == {} and reborn.queued == 0


def test_a_full_memory_writes_the_move_and_forget_drops_only_its_partition() -> None:
    clock = Clock()
    queue: dict[str, Any] = {}
    frontier = Frontier({}, queue, Politeness(), _partition, clock, lazy_moves=2)
    for host in HOSTS:
        frontier.enqueue(f"http://{host}/x", depth=5)
        frontier.enqueue(f"http://{host}/y", depth=5)
    assert frontier.retier("http://a.test/x", 3, 0, 2) == (2, 0)  # partition 0
    assert frontier.retier("http://b.test/x", 3, 0, 2) == (2, 0)  # partition 1
    assert frontier.retier("http://c.test/x", 3, 0, 2) == (2, 0)  # full: written
    assert queue_key("c.test", 3, 0) not in queue and queue_key("c.test", 2, 0) in queue
    assert queue_key("a.test", 3, 0) in queue and queue_key("a.test", 2, 0) not in queue
    assert sorted(frontier._lazy) == [queue_key("a.test", 2, 0), queue_key("b.test", 2, 0)]
    frontier.forget(0)
    assert list(frontier._lazy) == [queue_key("b.test", 2, 0)]
    assert list(frontier._moved) == [queue_key("b.test", 3, 0)]


def test_a_parked_host_settles_its_moves_in_memory() -> None:
    """A host drained (robots.txt unreachable) with moves in memory: each URL is
    decided once, the old keys deleted, nothing left in memory or the table."""
    clock = Clock()
    frontier, queue, _ = _host_with_a_lifted_url(clock)
    assert frontier.retier("http://a.test/deep/1", 3, 1, 1) == (1, 0)
    decisions: list[Decision] = []
    for _ in range(3):
        (robots,), _ = frontier.due(0)
        decisions += frontier.complete(robots.host, "robots", 500, "x", 1.0, clock.now)
        clock.now += 1000.0
    assert Counter(d.url for d in decisions) == Counter(
        [f"http://a.test/two/{i}" for i in range(20)]
        + ["http://a.test/deep/0", "http://a.test/deep/1"]
    )
    assert {d.outcome for d in decisions} == {"robots-unavailable"}
    assert decisions[0].url == "http://a.test/deep/1"  # tier 1 drained first, as written
    assert queue == {} and frontier._lazy == {} and frontier._moved == {}
    assert frontier.queued == 0


def test_a_throttled_page_served_from_a_move_goes_back_to_its_new_slot() -> None:
    """A 503 puts the page back where it was served from, in the table: a crash then
    finds it there; its old key, where the item lay while the page was in flight, is
    deleted then."""
    clock = Clock()
    frontier, queue, hosts = _host_with_a_lifted_url(clock)
    assert frontier.retier("http://a.test/deep/0", 2, 20, 0) == (0, 0)
    (robots,), _ = frontier.due(0)
    frontier.complete(robots.host, "robots", 404, "x", 1.0, clock.now)
    (page,), _ = frontier.due(0)
    assert page.url == "http://a.test/deep/0"
    assert frontier._lazy == {}
    assert hosts["a.test"]["inflight_key"] == queue_key("a.test", 3, 0)  # the old key
    assert queue[queue_key("a.test", 3, 0)]["url"] == page.url
    (decision,) = frontier.complete(page.host, "page", 503, "x", 1.0, clock.now, 1.0)
    assert decision.requeued
    assert queue_key("a.test", 3, 0) not in queue
    assert queue[queue_key("a.test", 0, 0)] == {
        "url": "http://a.test/deep/0",
        "depth": 5,
        "priority": 0,
        "tier": 0,
        "retries": 1,
        "again": 1,  # dispatched before: not taken for a second copy (`_push_front`)
    }
    reborn = _reborn(queue, hosts, clock)
    clock.now += 10.0
    order = _pages_in_order(reborn, clock)
    assert order[0] == "http://a.test/deep/0" and len(order) == len(set(order)) == 22
