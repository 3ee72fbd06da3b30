"""url-seen's pure step: the Bloom filter never loses a URL, and repeats never pass."""

from __future__ import annotations

from typing import Any

from streams.stages.url_seen import SeenFilters, handle


class FrontierSink:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def add_frontier(self, partition: int, kind: str, item: Any) -> None:
        assert kind == "new_urls"
        self.sent.append((partition, item["url"]))


def batch(urls: list[str], via: str | None = None) -> dict[str, Any]:
    return {"urls": [{"url": u, "depth": 1, "priority": 0, "via": via} for u in urls]}


def test_each_url_passes_once_even_with_a_filter_that_is_mostly_false_positives() -> None:
    filters = SeenFilters(capacity=8, error_rate=0.6)
    seen: dict[str, int] = {}
    sink = FrontierSink()
    urls = [f"http://h{i % 7}.test/p{i}" for i in range(2000)]
    for start in range(0, len(urls), 100):
        chunk = urls[start : start + 100]
        handle(0, batch(chunk + chunk[:10]), seen, {}, filters, lambda p: [], sink)  # type: ignore[arg-type]
    handle(0, batch(urls), seen, {}, filters, lambda p: [], sink)  # type: ignore[arg-type]
    assert [u for _, u in sink.sent] == urls  # every URL once, in order
    assert filters.false_positives > 300, filters.false_positives  # the filter lied, often
    assert filters.confirmed_seen >= len(urls)


def test_filter_is_rebuilt_from_the_exact_table_for_a_new_partition() -> None:
    seen = {f"http://a.test/{i}": 1 for i in range(500)} | {
        f"http://b.test/{i}": 1 for i in range(5)
    }
    partition_of = lambda url: 0 if "//a." in url else 1  # noqa: E731
    filters = SeenFilters(capacity=1000, error_rate=0.001)
    sink = FrontierSink()
    keys = lambda p: [u.encode() for u in seen if partition_of(u) == p]  # noqa: E731
    handle(0, batch(["http://a.test/1", "http://a.test/new"]), seen, {}, filters, keys, sink)  # type: ignore[arg-type]
    assert sink.sent == [(0, "http://a.test/new")]
    assert len(filters.filters[0]) == 501  # partition 0's 500 URLs, then the new one
    assert filters.confirmed_seen == 1 and filters.false_positives == 0


def test_a_seed_records_its_site_for_same_host_scope() -> None:
    scope: dict[str, int] = {}
    handle(
        3,
        batch(["http://www.Example.test/"], via="seed"),
        {},
        scope,
        SeenFilters(),
        lambda p: [],
        FrontierSink(),  # type: ignore[arg-type]
    )
    assert scope == {"example.test": 1}


def test_partition_keys_come_straight_from_the_partition_database() -> None:
    from streams.stages.url_seen import table_partition_keys

    class Store:
        def _db_for_partition(self, partition: int) -> dict[bytes, bytes]:
            return {
                b'"http://a.test/x"': b"1",
                b'"http://a.test/\\u00e9"': b"1",
                b"__faust\x00offset__": b"12",
            }

    class Table:
        data = Store()

    assert list(table_partition_keys(Table(), 0)) == [b"http://a.test/x", "http://a.test/\u00e9"]
