"""url-seen's step over a real URL registry: the Bloom filter never loses a URL,
repeats never pass, and a partition's filter is rebuilt from the registry's keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.core.registry import UrlRegistry
from streams.stages.url_seen import SeenFilters, handle


class FrontierSink:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []
        self.logs: list[dict[str, Any]] = []

    def add_frontier(self, partition: int, kind: str, item: Any) -> None:
        assert kind == "new_urls"
        self.sent.append((partition, item["url"]))

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)


def batch(urls: list[str], via: str | None = None) -> dict[str, Any]:
    return {"urls": [{"url": u, "depth": 1, "priority": 0, "via": via} for u in urls]}


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[UrlRegistry]:
    with UrlRegistry(tmp_path / "seen") as registry:
        yield registry


def keys_of(registry: UrlRegistry) -> list[bytes]:
    return list(registry._db.keys())


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
