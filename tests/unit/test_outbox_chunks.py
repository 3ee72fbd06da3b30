"""Unit tests for the pure parts of streams.stages.context: batch splitting and counters."""

from __future__ import annotations

from typing import Any

import topology
from streams import codec
from streams.stages.context import MAX_BATCH_BYTES, Counters, _chunks


def page(n: int, body_bytes: int) -> dict[str, Any]:
    return {
        "url": f"https://example.com/{n}",
        "status": 200,
        "headers": [],
        "body": b"x" * body_bytes,
        "fetched_at": 1.0,
        "elapsed_ms": 1.0,
        "ip": None,
        "depth": 0,
        "truncated": False,
    }


def parsed(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "page": p,
        "fingerprint": "f",
        "title": "",
        "links": [],
        "base": None,
        "nofollow": False,
        "noindex": False,
        "duplicate_of": None,
    }


def test_small_batch_is_one_chunk() -> None:
    batch = [page(i, 1000) for i in range(10)]
    assert _chunks(batch) == [batch]
    assert _chunks([]) == []


def test_big_page_batch_is_split_under_the_cap_in_order() -> None:
    batch = [page(i, 200 * 1024) for i in range(20)]  # ~4 MB of bodies
    chunks = _chunks(batch)
    assert len(chunks) > 1
    assert [item for chunk in chunks for item in chunk] == batch  # nothing lost, same order
    for chunk in chunks:
        encoded = codec.encode("page_batch", {"pages": chunk})
        assert len(encoded) <= MAX_BATCH_BYTES + 4096, len(encoded)
    # Chunks are filled, not one item each.
    assert all(len(chunk) >= MAX_BATCH_BYTES // (200 * 1024 + 256) for chunk in chunks[:-1])


def test_parsed_pages_are_sized_by_their_page_body() -> None:
    batch = [parsed(page(i, 300 * 1024)) for i in range(6)]
    chunks = _chunks(batch)
    assert [len(c) for c in chunks] == [2, 2, 2]
    assert [item for chunk in chunks for item in chunk] == batch


def test_an_oversized_item_travels_alone() -> None:
    big = page(1, MAX_BATCH_BYTES * 2)
    batch = [page(0, 10), big, page(2, 10)]
    assert _chunks(batch) == [[batch[0]], [big], [batch[2]]]


def test_many_small_items_split_by_count() -> None:
    urls = [{"url": f"https://e.example/{i}", "depth": 0} for i in range(10_000)]
    chunks = _chunks(urls)
    assert [u for c in chunks for u in c] == urls
    assert len(chunks) == -(-len(urls) // (MAX_BATCH_BYTES // 256))


def test_balanced_counts_consumed_topics_only() -> None:
    counters = Counters()
    assert counters.balanced()
    counters.sent[topology.FETCH.name] += 2
    counters.done[topology.FETCH.name] += 1
    assert not counters.balanced()
    counters.done[topology.FETCH.name] += 1
    assert counters.balanced()
    # Nobody consumes crawl-log or dead-letters: what is sent there never "waits".
    counters.sent[topology.CRAWL_LOG.name] += 50
    counters.sent[topology.DEAD_LETTERS.name] += 3
    assert counters.balanced()
    counters.sent[topology.PARSE.name] += 1
    assert not counters.balanced()
