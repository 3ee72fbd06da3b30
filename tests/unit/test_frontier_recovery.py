"""Unit tests for streams.core.frontier: leases, adoption after a restart or a
rebalance, claims, forgetting a partition and the host-state cache."""

from __future__ import annotations

from streams.core.frontier import (
    Politeness,
)
from tests.unit.frontier_helpers import Clock, Harness, urls

# -- leases and recovery ----------------------------------------------------------


def test_lease_expiry_redispatches_the_lost_fetch() -> None:
    h = Harness(Politeness(fetch_lease=60.0))
    h.open_host("a.example", b"", "/1", "/2")
    (d,) = h.dispatched()
    h.clock.advance(59.0)
    assert h.frontier.expire_leases(0) == []
    h.clock.advance(1.0)
    (again,) = h.frontier.expire_leases(0)
    assert (again.url, again.kind, again.host) == (d.url, "page", "a.example")
    assert h.frontier.expire_leases(0) == []  # the lease was renewed
    assert h.dispatched() == []  # still one request in flight
    h.check_counters()
    h.finish(again)
    assert h.finish(again) == []  # a late duplicate completion changes nothing
    assert h.frontier.in_flight == 0
    assert urls(h.dispatched()) == ["http://a.example/2"]
    h.check_counters()


def test_lease_expiry_of_a_robots_fetch() -> None:
    h = Harness(Politeness(fetch_lease=30.0))
    h.frontier.enqueue("http://a.example/1")
    (robots,) = h.dispatched()
    assert robots.kind == "robots"
    h.clock.advance(30.0)
    (again,) = h.frontier.expire_leases(0)
    assert (again.kind, again.url) == ("robots", "http://a.example/robots.txt")


def test_adopt_rebuilds_state_after_a_restart() -> None:
    hosts: dict = {}
    queue: dict = {}
    clock = Clock()
    before = Harness(Politeness(delay=10.0), hosts=hosts, queue=queue, clock=clock)
    # a.example: a page in flight when the worker dies, one more queued.
    before.open_host("a.example", b"", "/1", "/2")
    clock.advance(10)
    (lost,) = before.dispatched()
    assert lost.url == "http://a.example/1"
    # b.example: robots.txt in flight when the worker dies.
    before.frontier.enqueue("http://b.example/x")
    (robots,) = [d for d in before.dispatched() if d.host == "b.example"]
    assert robots.kind == "robots"
    # c.example: idle, waiting for its politeness delay.
    before.open_host("c.example", b"", "/1", "/2")
    clock.advance(10)
    (c1,) = before.dispatched()
    before.finish(c1)
    c_next = clock() + 10.0
    queued_before = before.frontier.queued

    grace = 3.0
    policy = Politeness(delay=10.0, adopt_grace=grace)
    after = Harness(policy, hosts=hosts, queue=queue, clock=clock)
    assert not after.frontier.knows_partition(0)
    after.frontier.adopt(0, list(hosts.items()))
    assert after.frontier.knows_partition(0)
    # the fetches in flight at the death stay so for the grace: their answers may come
    assert after.frontier.queued == queued_before
    assert after.frontier.in_flight == 2
    after.check_counters()
    clock.advance(grace)
    assert after.dispatched() == []  # none came: released, a politeness wait from now
    assert after.frontier.queued == queued_before + 1  # the lost page is queued again
    assert after.frontier.in_flight == 0
    assert not any(state["busy"] for state in hosts.values())
    after.check_counters()

    # The fetches in flight at the death ended then, but when is unknown: a busy
    # host's politeness clock restarts when it is released.
    clock.advance(10 - grace)
    assert clock() == c_next
    assert urls(after.dispatched()) == ["http://c.example/2"]
    clock.advance(grace)
    by_host = {d.host: d for d in after.dispatched()}
    assert set(by_host) == {"a.example", "b.example"}
    assert (by_host["a.example"].url, by_host["a.example"].kind) == (lost.url, "page")
    assert by_host["b.example"].kind == "robots"
    after.check_counters()
    after.finish(by_host["a.example"])
    clock.advance(10)
    assert urls(after.dispatched()) == ["http://a.example/2"]
    after.check_counters()


def test_adopt_does_not_fetch_again_a_page_stored_already() -> None:
    """A fetch in flight at a crash whose page went down the pipeline and was stored
    before its completion reached the frontier (which the crash lost) is not done
    again; one whose page is not stored is, as before."""
    hosts: dict = {}
    queue: dict = {}
    clock = Clock()
    before = Harness(Politeness(delay=10.0), hosts=hosts, queue=queue, clock=clock)
    before.open_host("a.example", b"", "/1", "/2")
    before.open_host("b.example", b"", "/1")
    clock.advance(10)
    lost = {d.host: d for d in before.dispatched()}
    assert {d.url for d in lost.values()} == {"http://a.example/1", "http://b.example/1"}
    dispatched_at = hosts["a.example"]["busy"]
    asked: list[tuple[str, float]] = []

    def stored_since(url: str, since: float) -> bool:
        asked.append((url, since))
        return url == "http://a.example/1"  # its page is stored; b.example's is not

    after = Harness(Politeness(delay=10.0), hosts=hosts, queue=queue, clock=clock)
    after.frontier.adopt(0, list(hosts.items()), stored_since)
    # asked once per fetch in flight, with the time it was dispatched
    assert sorted(url for url, _ in asked) == ["http://a.example/1", "http://b.example/1"]
    assert dict(asked)["http://a.example/1"] == dispatched_at
    assert after.frontier.adopted_stored == 1
    assert not (hosts["a.example"]["busy"] or hosts["a.example"]["inflight"])
    # b.example's completion may still come; it does not, and its page is not stored
    clock.advance(Politeness().adopt_grace)
    assert after.dispatched() == []
    assert sorted(url for url, _ in asked)[1:] == ["http://b.example/1"] * 2
    assert not any(state["busy"] or state["inflight"] for state in hosts.values())
    clock.advance(10)
    assert sorted(urls(after.dispatched())) == ["http://a.example/2", "http://b.example/1"]
    after.check_counters()


def test_adopt_only_takes_its_partition() -> None:
    hosts: dict = {}
    queue: dict = {}
    part = {"a.example": 0, "b.example": 1}.__getitem__
    before = Harness(partition_of=part, hosts=hosts, queue=queue)
    before.frontier.enqueue("http://a.example/")
    before.frontier.enqueue("http://b.example/")
    after = Harness(partition_of=part, hosts=hosts, queue=queue)
    after.frontier.adopt(1, hosts.items())
    assert after.frontier.queued == 1
    assert [d.host for d in after.dispatched(1)] == ["b.example"]
    assert after.dispatched(0) == []


def test_adopt_upgrades_a_host_state_from_before_the_tiers() -> None:
    hosts = {
        "a.example": {
            "origin": "http://a.example",
            "head": 1,
            "tail": 4,
            "next": 0.0,
            "busy": 0.0,
            "inflight": None,
            "robots": "ready",
            "robots_body": "",
            "robots_tries": 0,
            "errors": 0,
            "last_ms": 0.0,
            "fetched": 1,
        }
    }
    queue = {
        f"a.example\x00{seq:012d}": {"url": f"http://a.example/{seq}", "depth": d, "priority": 0}
        for seq, d in ((1, 1), (2, 6), (3, 1))
    }
    h = Harness(hosts=hosts, queue=queue)
    h.frontier.adopt(0, list(hosts.items()))
    h.check_counters()
    assert h.frontier.queued == 3
    got = []
    for _ in range(4):
        for d in h.dispatched():
            got.append(d.url)
            h.finish(d)
    # robots.txt first (its rules had no expiry), then the pages by tier, FIFO within one
    assert got == [
        "http://a.example/robots.txt",
        "http://a.example/1",
        "http://a.example/3",
        "http://a.example/2",
    ]
    assert h.queue == {}


def test_a_completion_of_an_earlier_dispatch_does_not_release_the_host() -> None:
    """After a rebalance a fetch may be dispatched again while the old owner's answer
    is still on its way: that answer must not free the host with the new fetch out."""
    h = Harness(Politeness(delay=1.0))
    h.open_host("a.example", b"", "/1", "/2")
    h.clock.advance(1)
    (first,) = h.dispatched()
    assert h.frontier.is_current("a.example", first.dispatched_at)
    # the partition moves away and back: forgotten, adopted again, re-dispatched
    h.frontier.forget(0)
    assert not h.frontier.knows_partition(0)
    assert (h.frontier.queued, h.frontier.in_flight) == (0, 0)
    assert not h.frontier.is_current("a.example", first.dispatched_at)
    h.frontier.adopt(0, list(h.hosts.items()))
    # its answer may still come (the grace): its request, read again, is not started
    assert not h.frontier.claim("a.example", first.dispatched_at)
    h.clock.advance(Politeness().adopt_grace)
    assert h.dispatched() == []  # no answer came: a politeness wait from now
    h.clock.advance(1)
    (again,) = h.dispatched()
    assert again.url == first.url and again.dispatched_at > first.dispatched_at
    assert not h.frontier.is_current("a.example", first.dispatched_at)
    assert h.frontier.is_current("a.example", again.dispatched_at)
    stale = h.frontier.complete(
        "a.example", "page", 200, "fetched", 5.0, h.clock(), dispatched_at=first.dispatched_at
    )
    assert stale == []
    assert h.frontier.in_flight == 1
    h.clock.advance(5)
    assert h.dispatched() == []  # still busy with `again`
    h.frontier.complete(
        "a.example", "page", 200, "fetched", 5.0, h.clock(), dispatched_at=again.dispatched_at
    )
    h.clock.advance(1)
    assert urls(h.dispatched()) == ["http://a.example/2"]
    h.check_counters()


def test_a_completion_on_its_way_at_an_adoption_releases_the_host() -> None:
    """At a rebalance the frontier topic holds completions of fetches that are over
    (a completion is sent once its page is on the broker): the new owner adopts the
    partition from the tables, where those hosts are still busy, and reads the
    completions right after. Each such fetch is done once: the host stays busy with
    it for the grace, its completion releases it, and the host goes on with its next
    page (re-queued and dispatched at once instead, the fetch was done twice and the
    completion ignored: bench/faults.py, scenario rebalance)."""
    hosts: dict = {}
    queue: dict = {}
    clock = Clock()
    before = Harness(Politeness(delay=1.0), hosts=hosts, queue=queue, clock=clock)
    before.open_host("a.example", b"", "/1", "/2")
    clock.advance(1)
    (first,) = before.dispatched()
    before.frontier.forget(0)  # revoked: its completion is sent to the topic

    after = Harness(Politeness(delay=1.0), hosts=hosts, queue=queue, clock=clock)
    after.frontier.adopt(0, list(hosts.items()))
    assert after.frontier.in_flight == 1
    after.check_counters()
    clock.advance(1)
    assert after.dispatched() == []  # not the page in flight again
    assert not after.frontier.claim("a.example", first.dispatched_at)  # nor its request
    after.frontier.complete(
        "a.example", "page", 200, "fetched", 5.0, clock(), dispatched_at=first.dispatched_at
    )
    assert after.frontier.adopted_completed == 1
    after.check_counters()
    clock.advance(1)
    assert urls(after.dispatched()) == ["http://a.example/2"]
    clock.advance(Politeness().adopt_grace)  # the grace's wake-up finds the host busy
    assert after.dispatched() == []
    after.check_counters()


def test_a_request_delivered_twice_is_started_once() -> None:
    """The fetch stage asks ``claim`` before each request: a fetch request message
    delivered twice while its dispatch is in flight (read again after a seek back to the
    committed offset) must not ask the host a second time. The fault test saw the same
    URL requested twice 23-134 ms apart over one worker's connection."""
    h = Harness(Politeness(delay=1.0))
    h.open_host("a.example", b"", "/1", "/2")
    h.clock.advance(1)
    (first,) = h.dispatched()
    assert h.frontier.claim("a.example", first.dispatched_at)
    assert h.frontier.is_current("a.example", first.dispatched_at)  # still the current one
    assert not h.frontier.claim("a.example", first.dispatched_at)  # the second copy
    assert h.frontier.duplicate_requests == 1
    # a lease expiry re-dispatches it: the new dispatch may start (once)
    h.clock.advance(h.frontier.policy.fetch_lease)
    (again,) = h.frontier.expire_leases(0)
    assert not h.frontier.claim("a.example", first.dispatched_at)
    assert h.frontier.claim("a.example", again.dispatched_at)
    assert not h.frontier.claim("a.example", again.dispatched_at)
    h.frontier.complete(
        "a.example", "page", 200, "fetched", 5.0, h.clock(), dispatched_at=again.dispatched_at
    )
    assert not h.frontier.claim("a.example", again.dispatched_at)  # answered: not current
    h.clock.advance(1)
    (second,) = h.dispatched()
    assert second.url == "http://a.example/2"
    assert h.frontier.claim("a.example", second.dispatched_at)
    # forgotten with its partition (a revocation): nothing of it may start
    h.frontier.forget(0)
    assert not h.frontier.claim("a.example", second.dispatched_at)


def test_forget_drops_only_that_partition() -> None:
    h = Harness(partition_of=lambda authority: 0 if authority.startswith("a") else 1)
    for host in ("a.example", "b.example"):
        h.frontier.enqueue(f"http://{host}/1")
        h.frontier.enqueue(f"http://{host}/2")
    assert h.frontier.queued == 4
    assert [d.kind for d in h.dispatched(0) + h.dispatched(1)] == ["robots", "robots"]
    assert h.frontier.in_flight == 2
    h.frontier.forget(1)
    assert (h.frontier.queued, h.frontier.in_flight) == (2, 1)
    assert h.frontier.knows_partition(0) and not h.frontier.knows_partition(1)
    h.frontier.adopt(1, list(h.hosts.items()))
    assert h.frontier.queued == 4


def test_leases_of_hosts_dispatched_at_different_times_expire_each_on_time() -> None:
    """`expire_leases` skips its scan while the partition's oldest dispatch is younger
    than a lease: a host dispatched later, or released and dispatched again, still
    has its lease expire exactly a lease after its own dispatch."""
    h = Harness(Politeness(fetch_lease=60.0), partition_of=lambda a: 0 if a < "c" else 1)
    h.open_host("a.example", b"", "/1", "/2")
    (a1,) = h.dispatched()
    h.clock.advance(20.0)
    h.open_host("b.example", b"", "/1")
    (b1,) = h.dispatched()
    h.frontier.enqueue("http://c.example/1")  # another partition: its own bound
    (robots,) = h.dispatched(1)
    h.finish(robots, 200, body=b"")
    (c1,) = h.dispatched(1)
    h.clock.advance(39.0)
    assert h.frontier.expire_leases(0) == [] and h.frontier.expire_leases(1) == []
    h.finish(a1)  # a.example released: the bound is now too old, which costs a scan
    h.clock.advance(10.0)
    (a2,) = h.dispatched()  # its next page, dispatched now
    h.clock.advance(1.0)
    assert h.frontier.expire_leases(0) == []  # b.example's lease has 10 s left
    h.clock.advance(10.0)
    assert [d.host for d in h.frontier.expire_leases(0)] == ["b.example"]
    assert [d.host for d in h.frontier.expire_leases(1)] == ["c.example"]
    h.clock.advance(48.0)
    assert h.frontier.expire_leases(0) == []  # a.example's lease has 1 s left
    h.clock.advance(1.0)
    assert [(d.host, d.url) for d in h.frontier.expire_leases(0)] == [("a.example", a2.url)]
    assert b1.host == "b.example" and c1.host == "c.example"
    h.frontier.forget(0)
    h.clock.advance(1000.0)
    assert h.frontier.expire_leases(0) == []  # forgotten: nothing of it is in flight here


def test_host_states_are_read_from_memory_until_the_partition_is_forgotten() -> None:
    """The frontier keeps the host states it wrote (it is the only writer of `hosts`);
    after `forget` (a rebalance: another worker may have written them) it reads the
    table again. The cache is bounded."""
    import streams.core.frontier_store as store_module

    h = Harness()
    h.open_host("a.example", b"", "/1")
    written = h.hosts["a.example"]
    h.hosts["a.example"] = {**written, "pages": 99}  # behind the frontier's back
    assert h.frontier._get("a.example") is written  # its own write, from memory
    h.frontier.forget(0)
    reread = h.frontier._get("a.example")
    assert reread is not None and reread["pages"] == 99  # read from the table again
    old = store_module.HOST_CACHE_SIZE
    store_module.HOST_CACHE_SIZE = 3
    try:
        for i in range(10):
            h.frontier.enqueue(f"http://h{i}.example/")
            assert len(h.frontier._cache) <= 3
        assert h.frontier._get("h0.example") == h.hosts["h0.example"]
    finally:
        store_module.HOST_CACHE_SIZE = old


def test_a_lease_expiry_keeps_the_urls_queued_while_its_fetch_was_in_flight() -> None:
    """The re-dispatch starts from the host's state as it is now, not as the dispatch
    left it: URLs queued for the host meanwhile moved its tails, and the old state
    written back left them past the tails, never fetched (a fault run on Apache Kafka
    ended with four pages so)."""
    h = Harness(Politeness(fetch_lease=60.0))
    h.open_host("a.example", b"", "/1")
    (d,) = h.dispatched()
    h.frontier.enqueue("http://a.example/2")
    h.frontier.enqueue("http://a.example/3")
    h.clock.advance(60.0)
    (again,) = h.frontier.expire_leases(0)
    assert again.url == d.url
    h.check_counters()
    h.finish(again)
    fetched = []
    for _ in range(3):
        h.clock.advance(1)
        for d in h.dispatched():
            fetched.append(d.url)
            h.finish(d)
    assert fetched == ["http://a.example/2", "http://a.example/3"]
    h.check_counters()
