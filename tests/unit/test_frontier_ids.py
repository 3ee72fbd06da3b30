"""The frontier stage names each URL by its 64-bit id, with no registry lookup."""

from __future__ import annotations

from types import SimpleNamespace

from streams import codec
from streams.core.sites import url_id, url_id_long
from streams.stages.context import crawl_log_record
from streams.stages.frontier import _request

# mmh3 gives this URL an id with the top bit set: it must survive Avro's signed long
HIGH = next(f"http://a.test/{i}" for i in range(1000) if url_id(f"http://a.test/{i}") >= 1 << 63)


def test_the_signed_form_keeps_the_bits() -> None:
    for url in (HIGH, "http://a.test/"):
        assert url_id_long(url) % (1 << 64) == url_id(url)
        assert -(1 << 63) <= url_id_long(url) < 1 << 63
    assert url_id_long(HIGH) < 0


def test_a_fetch_request_carries_the_url_id_through_its_schema() -> None:
    page = SimpleNamespace(url=HIGH, host="a.test", kind="page", depth=2, dispatched_at=5.0)
    robots = SimpleNamespace(
        url="http://a.test/robots.txt", host="a.test", kind="robots", depth=0, dispatched_at=5.0
    )
    batch = {"requests": [_request(page), _request(robots)]}  # type: ignore[arg-type]
    decoded = codec.decode("fetch_batch", codec.encode("fetch_batch", batch))
    assert [r["url_id"] % (1 << 64) for r in decoded["requests"]] == [url_id(HIGH), 0]


def test_a_crawl_log_record_carries_it_and_old_records_read_as_zero() -> None:
    record = crawl_log_record(HIGH, "fetch", "fetched", url_id=url_id_long(HIGH))
    assert codec.decode("crawl_log", codec.encode("crawl_log", record))["url_id"] == url_id_long(
        HIGH
    )
    unnamed = crawl_log_record("mailto:x@y", "url-filter", "filtered")
    assert codec.decode("crawl_log", codec.encode("crawl_log", unnamed))["url_id"] == 0
