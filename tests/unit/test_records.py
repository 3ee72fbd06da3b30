"""streams/core/records.py names exactly the fields the codec decodes for each topic,
so mypy checks a stage's reads against what its topic carries."""

from __future__ import annotations

from typing import Any

from streams import codec
from streams.core import records


def fields(cls: type) -> set[str]:
    return set(cls.__annotations__)


def roundtrip(schema: str, record: dict[str, Any]) -> dict[str, Any]:
    return codec.decode(schema, codec.encode(schema, record))


CANDIDATE = {"url": "http://a.test/", "depth": 1, "priority": 0, "via": None, "kind": "page"}
CAPTURE = {
    "url": "http://a.test/",
    "status": 200,
    "headers": [{"name": "Content-Type", "value": "text/html"}],
    "body": b"<p>x",
    "fetched_at": 1.0,
    "elapsed_ms": 2.0,
    "ip": "127.0.0.1",
    "depth": 0,
    "truncated": False,
}


def test_url_candidates() -> None:
    batch = roundtrip("url_batch", {"urls": [CANDIDATE]})
    assert set(batch) == fields(records.UrlBatch)
    # `slot` comes only with a re-tier, in frontier_event (below)
    assert set(batch["urls"][0]) == fields(records.UrlCandidate) - {"slot"}


def test_frontier_events_and_fetch_requests() -> None:
    completion = {
        "url": "http://a.test/",
        "host": "a.test",
        "kind": "page",
        "status": 200,
        "outcome": "fetched",
        "elapsed_ms": 2.0,
        "finished_at": 3.0,
        "retry_after": None,
        "body": None,
        "dispatched_at": 1.0,
        "reason": "",
    }
    event = roundtrip(
        "frontier_event",
        {"new_urls": [{**CANDIDATE, "slot": (1, 7)}], "completions": [completion], "tick": True},
    )
    assert set(event) == fields(records.FrontierEvent)
    assert set(event["new_urls"][0]) == fields(records.UrlCandidate)
    assert set(event["completions"][0]) == fields(records.FetchCompletion)
    request = {"url": "http://a.test/", "host": "a.test", "kind": "page", "dispatched_at": 1.0}
    batch = roundtrip("fetch_batch", {"requests": [request]})
    assert set(batch) == fields(records.FetchBatch)
    assert set(batch["requests"][0]) == fields(records.FetchRequest)


def test_fetched_and_parsed_pages() -> None:
    batch = roundtrip("page_batch", {"pages": [CAPTURE]})
    assert set(batch) == fields(records.PageBatch)
    assert set(batch["pages"][0]) == fields(records.FetchedPage)
    parsed = {
        "page": {**CAPTURE, "body": None},
        "digest": "sha1:X",
        "size": 4,
        "fingerprint": "f",
        "title": "t",
        "links": ["/next"],
        "base": None,
        "nofollow": False,
        "noindex": False,
        "duplicate_of": {"url": "http://b.test/", "digest": "sha1:X", "fetched_at": 0.5},
        "simhash": 5,
        "band": 0,
        "near_duplicate_of": {"url": "http://c.test/", "distance": 2},
    }
    batch = roundtrip("parsed_batch", {"pages": [parsed]})
    assert set(batch) == fields(records.ParsedBatch)
    page = batch["pages"][0]
    assert set(page) == fields(records.ParsedPage)
    assert set(page["page"]) == fields(records.CapturedPage)
    assert set(page["duplicate_of"]) == fields(records.DuplicateOf)
    assert set(page["near_duplicate_of"]) == fields(records.NearDuplicateOf)
