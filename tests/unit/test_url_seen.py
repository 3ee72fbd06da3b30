"""url-seen's step over a real URL registry: the Bloom filter never loses a URL,
repeats never pass, and a partition's filter is rebuilt from the registry's keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from streams.core.provenance import Via
from streams.core.records import UrlBatch
from streams.core.urlstate import RESEND, STAMP, registration_stamp, resend_due
from streams.stages.url_seen import SeenFilters, handle
from streams.store.url_registry import UrlRegistry


class FrontierSink:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []
        self.logs: list[dict[str, Any]] = []

    def add_frontier(self, partition: int, kind: str, item: Any) -> None:
        assert kind == "new_urls"
        self.sent.append((partition, item["url"]))

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)


def batch(urls: list[str], via: str | None = None) -> UrlBatch:
    return {"urls": [{"url": u, "depth": 1, "priority": 0, "via": via} for u in urls]}


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[UrlRegistry]:
    with UrlRegistry(tmp_path / "seen") as registry:
        yield registry


def keys_of(registry: UrlRegistry) -> list[bytes]:
    return cast(list[bytes], list(registry._db.keys()))


def test_each_url_passes_once_even_with_a_filter_that_is_mostly_false_positives(
    seen: UrlRegistry,
) -> None:
    filters = SeenFilters(capacity=8, error_rate=0.6)
    sink = FrontierSink()
    urls = [f"http://h{i % 7}.test/p{i}" for i in range(2000)]
    for start in range(0, len(urls), 100):
        chunk = urls[start : start + 100]
        handle(0, batch(chunk + chunk[:10]), seen, {}, filters, lambda p: [], sink)  # type: ignore[arg-type]
    handle(0, batch(urls), seen, {}, filters, lambda p: [], sink)  # type: ignore[arg-type]
    assert [u for _, u in sink.sent] == urls  # every URL once, in order
    assert filters.false_positives > 300, filters.false_positives  # the filter lied, often
    assert filters.confirmed_seen >= len(urls)
    assert all(u in seen for u in urls)


def test_filter_is_rebuilt_from_the_registry_keys_for_a_new_partition(tmp_path: Path) -> None:
    with UrlRegistry(tmp_path / "p0") as p0, UrlRegistry(tmp_path / "p1") as p1:
        p0.add_many([f"http://a.test/{i}" for i in range(500)])
        p1.add_many([f"http://b.test/{i}" for i in range(5)])
        registries = {0: p0, 1: p1}
        filters = SeenFilters(capacity=1000, error_rate=0.001)
        sink = FrontierSink()
        keys = lambda p: keys_of(registries[p])  # noqa: E731
        handle(0, batch(["http://a.test/1", "http://a.test/new"]), p0, {}, filters, keys, sink)  # type: ignore[arg-type]
        assert sink.sent == [(0, "http://a.test/new")]
        assert len(filters.filters[0]) == 501  # partition 0's 500 keys, then the new one
        assert 1 not in filters.filters
        assert filters.confirmed_seen == 1 and filters.false_positives == 0


def test_a_dropped_filter_is_rebuilt_with_what_another_owner_added(seen: UrlRegistry) -> None:
    """After a rebalance another worker may have registered URLs: a stale filter would
    call them definitely new, so the partition's filter is dropped and rebuilt."""
    filters = SeenFilters(capacity=1000, error_rate=0.001)
    sink = FrontierSink()
    handle(0, batch(["http://a.test/1"]), seen, {}, filters, lambda p: keys_of(seen), sink)  # type: ignore[arg-type]
    seen.add_many(["http://a.test/2"])  # the partition's other owner, meanwhile
    filters.drop(0)
    handle(0, batch(["http://a.test/2"]), seen, {}, filters, lambda p: keys_of(seen), sink)  # type: ignore[arg-type]
    assert sink.sent == [(0, "http://a.test/1")]
    assert filters.confirmed_seen == 1


def test_a_seed_records_its_site_for_same_host_scope(seen: UrlRegistry) -> None:
    scope: dict[str, int] = {}
    handle(
        3,
        batch(["http://www.example.test/"], via="seed"),
        seen,
        scope,
        SeenFilters(),
        lambda p: [],
        FrontierSink(),  # type: ignore[arg-type]
    )
    assert scope == {"example.test": 1}


def test_a_url_without_a_host_is_logged_and_the_rest_pass(seen: UrlRegistry) -> None:
    sink = FrontierSink()
    handle(1, batch(["not a url", "http://a.test/"]), seen, {}, SeenFilters(), lambda p: [], sink)  # type: ignore[arg-type]
    assert sink.sent == [(1, "http://a.test/")]
    assert [(r["url"], r["stage"], r["outcome"]) for r in sink.logs] == [
        ("not a url", "url-seen", "filtered")
    ]
    assert "host" in sink.logs[0]["reason"]


# -- registered, never queued: nothing url-seen registers is lost on its way ------


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ResendSink(FrontierSink):
    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict[str, Any]] = []

    def add_frontier(self, partition: int, kind: str, item: Any) -> None:
        super().add_frontier(partition, kind, item)
        self.items.append(item)


def meet(
    seen: UrlRegistry,
    urls: list[str],
    offset: int,
    clock: Clock,
    grace: float = 30.0,
    via: str | None = "http://a.test/from",
) -> list[tuple[str, str | None]]:
    """url-seen handles the message at `offset`; returns (URL, via) of what it sent."""
    sink = ResendSink()
    handle(
        0,
        batch(urls, via=via),
        seen,  # type: ignore[arg-type]
        {},
        SeenFilters(capacity=1000, error_rate=0.001),
        lambda p: keys_of(seen),
        sink,  # type: ignore[arg-type]
        clock=clock,
        offset=offset,
        resend_grace=grace,
    )
    return [(item["url"], item.get("via")) for item in sink.items]


def test_a_redelivered_message_sends_its_registered_urls_again_at_once(seen: UrlRegistry) -> None:
    """The first send died with its worker (registered, the frontier message lost, the
    offset not committed): reading the same message again sends the URL again."""
    clock = Clock()
    assert meet(seen, ["http://a.test/x"], offset=7, clock=clock) == [
        ("http://a.test/x", "http://a.test/from")
    ]
    clock.now += 1.0
    assert meet(seen, ["http://a.test/x"], offset=7, clock=clock) == [
        ("http://a.test/x", Via.RESEND)
    ]
    # a different message meeting it within the grace period: the frontier may just
    # not have got to it yet
    assert meet(seen, ["http://a.test/x"], offset=8, clock=clock) == []


def test_a_registration_the_frontier_never_acted_on_is_sent_again_after_the_grace(
    seen: UrlRegistry,
) -> None:
    clock = Clock()
    meet(seen, ["http://a.test/x"], offset=1, clock=clock)
    clock.now += 29.0
    assert meet(seen, ["http://a.test/x"], offset=2, clock=clock) == []
    clock.now += 1.5
    assert meet(seen, ["http://a.test/x"], offset=3, clock=clock) == [
        ("http://a.test/x", Via.RESEND)
    ]
    # the stamp was renewed: at most one re-send per grace period
    clock.now += 10.0
    assert meet(seen, ["http://a.test/x", "http://a.test/x"], offset=4, clock=clock) == []
    clock.now += 25.0
    assert meet(seen, ["http://a.test/x", "http://a.test/x"], offset=5, clock=clock) == [
        ("http://a.test/x", Via.RESEND)
    ]
    # the links were counted all along
    state = seen.state("http://a.test/x")
    assert state is not None and state["in"] == 7 and state["r"] == clock.now


def test_a_url_the_frontier_has_acted_on_is_never_sent_again(seen: UrlRegistry) -> None:
    clock = Clock()
    meet(seen, ["http://a.test/x", "http://a.test/y"], offset=1, clock=clock)
    seen.set_states({"http://a.test/x": {"s": "queued", "at": clock.now}})
    seen.set_states({"http://a.test/y": {"s": "fetched", "status": 200, "at": clock.now}})
    clock.now += 3600.0
    for offset in (1, 2):  # a redelivery too
        assert meet(seen, ["http://a.test/x", "http://a.test/y"], offset, clock) == []
    assert seen.state("http://a.test/x") == {"s": "queued", "at": clock.now - 3600.0, "in": 3}


def test_an_unstamped_registration_is_stamped_then_sent_after_the_grace(
    seen: UrlRegistry,
) -> None:
    """Registered before stamps were kept: its grace period starts when it is met."""
    clock = Clock()
    seen.add_many(["http://a.test/old"])
    assert meet(seen, ["http://a.test/old"], offset=1, clock=clock) == []
    assert seen.state("http://a.test/old") == {"r": clock.now, "o": 1, "in": 2}
    clock.now += 30.0
    assert meet(seen, ["http://a.test/old"], offset=2, clock=clock) == [
        ("http://a.test/old", Via.RESEND)
    ]


def test_a_re_sent_seed_keeps_its_depth_and_a_zero_grace_sends_only_redeliveries(
    seen: UrlRegistry,
) -> None:
    clock = Clock()
    meet(seen, ["http://a.test/"], offset=3, clock=clock, via="seed", grace=0)
    clock.now += 1e6
    assert meet(seen, ["http://a.test/"], offset=4, clock=clock, via="seed", grace=0) == []
    sink = ResendSink()
    handle(
        0,
        batch(["http://a.test/"], via="seed"),
        seen,
        {},
        SeenFilters(),
        lambda p: keys_of(seen),
        sink,  # type: ignore[arg-type]
        clock=clock,
        offset=3,
        resend_grace=0,
    )
    assert [(i["url"], i["via"], i["depth"]) for i in sink.items] == [
        ("http://a.test/", Via.RESEND, 1)
    ]


@pytest.mark.parametrize(
    ("value", "now", "offset", "grace", "want"),
    [
        (b"\x00" * 8 + b"http://a/", 0.0, None, 30.0, STAMP),
        (b"\x00" * 8 + b'http://a/\x00{"in":3}', 0.0, None, 30.0, STAMP),
        (b"\x00" * 8 + b"http://a/\x00" + registration_stamp(100.0, 5), 110.0, 5, 30.0, RESEND),
        (b"\x00" * 8 + b"http://a/\x00" + registration_stamp(100.0, 5), 110.0, 6, 30.0, None),
        (b"\x00" * 8 + b"http://a/\x00" + registration_stamp(100.0, 5), 130.0, 6, 30.0, RESEND),
        (b"\x00" * 8 + b"http://a/\x00" + registration_stamp(100.0, 5), 1e9, 6, 0.0, None),
        (b"\x00" * 8 + b"http://a/\x00" + registration_stamp(100.0), 110.0, None, 30.0, None),
        (b"\x00" * 8 + b'http://a/\x00{"s":"queued","r":1}', 1e9, 5, 30.0, None),
        (b"\x00" * 8 + b"http://a/\x00not json", 0.0, None, 30.0, STAMP),
    ],
)
def test_resend_due(
    value: bytes, now: float, offset: int | None, grace: float, want: str | None
) -> None:
    assert resend_due(value, now, offset, grace) == want
