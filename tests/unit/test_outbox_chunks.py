"""Unit tests for the pure parts of streams.stages.context: batch splitting and counters."""

from __future__ import annotations

import time
from typing import Any

import topology
from streams import codec
from streams.core.records import FrontierEvent
from streams.kafka.producer import Deliveries
from streams.stages.context import MAX_BATCH_BYTES, Counters, _chunks, _count_chunks


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


def test_bodiless_batches_split_by_count_exactly_as_by_size() -> None:
    step = MAX_BATCH_BYTES // 256
    for n in (0, 1, step - 1, step, step + 1, 2 * step, 2 * step + 5):
        urls = [{"url": f"https://e.example/{i}", "depth": 0} for i in range(n)]
        assert _count_chunks(urls) == _chunks(urls), n


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


def test_messages_not_ours_do_not_stand_in_for_ours() -> None:
    """The poison crawl that stopped with 0 pages fetched: three poison messages
    handled on partition 1 balanced the counts while our seed on partition 0 waited."""
    counters = Counters()
    seeds = "app.seeds"
    counters.sent[topology.SEEDS.name] += 1
    for offset in range(3):  # poison, sent by someone else
        counters.done[topology.SEEDS.name] += 1
        counters.handled(seeds, 1, offset)
    delivered = {(seeds, 0): 1}  # ours: offset 0 of partition 0
    assert counters.balanced()  # the counts alone are fooled
    assert not counters.caught_up(delivered)
    counters.handled(seeds, 0, 0)
    assert counters.caught_up(delivered)
    # read again (a rewind) and an older offset: still caught up
    counters.handled(seeds, 0, 0)
    assert counters.handled_upto[(seeds, 0)] == 1
    delivered[(seeds, 0)] = 5
    counters.handled(seeds, 0, 3)
    assert not counters.caught_up(delivered)
    counters.handled(seeds, 0, 4)
    assert counters.caught_up(delivered)


class RecordingProducer:
    """Stands in for the broker side: what was sent, and when delivery was awaited."""

    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def flush(self, timeout: float = 30.0) -> None:
        self.order.append("everything acknowledged")

    async def wait(self, awaited: Deliveries, timeout: float = 30.0) -> None:
        # the fetch outbox waits for its own messages, not all the producer holds
        self.order.append(f"{awaited.waiting} acknowledged")
        while awaited.waiting:
            awaited.settle(False)


class RecordingContext:
    def __init__(self) -> None:
        self.order: list[str] = []
        self.producer = RecordingProducer(self.order)
        self.specs = {spec.name: spec for spec in topology.TOPICS}
        self.counters = Counters()

    async def send(
        self, spec: Any, partition: int, value: bytes, *, awaited: Deliveries | None = None
    ) -> None:
        if awaited is not None:
            awaited.expect()
        self.order.append(spec.name + (" (awaited)" if awaited is not None else ""))

    def host_partition(self, host: str) -> int:
        return 0


def completion(url: str) -> dict[str, Any]:
    return {
        "url": url,
        "host": "example.com",
        "kind": "page",
        "status": 200,
        "outcome": "fetched",
        "elapsed_ms": 1.0,
        "finished_at": 1.0,
    }


def test_the_fetch_outbox_sends_completions_only_after_the_pages_are_acknowledged() -> None:
    """A fetch's page and its completion must not be delivered in the order that lets a
    kill between them lose the page while the frontier records the URL as fetched."""
    import asyncio

    from streams.stages.context import Outbox

    for after_delivery, want in (
        (True, ["parse (awaited)", "1 acknowledged", "frontier"]),
        (False, ["parse", "frontier"]),
    ):
        ctx = RecordingContext()
        out = Outbox(ctx, frontier_after_delivery=after_delivery)  # type: ignore[arg-type]
        out.add(topology.PARSE, 0, page(1, 10))
        out.add_frontier(0, "completions", completion("https://example.com/1"))
        asyncio.run(out.flush())
        assert ctx.order == want
        assert out.pending == 0
    # nothing but completions (robots.txt, errors): nothing to wait for
    ctx = RecordingContext()
    out = Outbox(ctx, frontier_after_delivery=True)  # type: ignore[arg-type]
    out.add_frontier(0, "completions", completion("https://example.com/robots.txt"))
    asyncio.run(out.flush())
    assert ctx.order == ["frontier"]


def test_the_fetch_outbox_offers_each_frontier_event_once_its_pages_are_acknowledged() -> None:
    """`apply_frontier` (the frontier of this worker applying the completions at once)
    sees an event only after its pages were acknowledged, so what it records can never
    be ahead of what a successor would read; an event it applied is not sent, one it
    did not apply is."""
    import asyncio

    from streams.stages.context import Outbox

    ctx = RecordingContext()
    out = Outbox(ctx, frontier_after_delivery=True)  # type: ignore[arg-type]

    async def apply(partition: int, event: FrontierEvent) -> bool:
        urls = [c["url"] for c in event["completions"]]
        ctx.order.append(f"offered {partition} {urls}")
        assert out.pending == 2  # still held: the crawl is not idle meanwhile
        return partition == 1

    out.apply_frontier = apply
    out.add(topology.PARSE, 1, page(1, 10))
    out.add_frontier(1, "completions", completion("https://example.com/1"))
    out.add_frontier(2, "completions", completion("https://example.org/2"))
    asyncio.run(out.flush())
    assert ctx.order == [
        "parse (awaited)",
        "1 acknowledged",
        "offered 1 ['https://example.com/1']",
        "offered 2 ['https://example.org/2']",
        "frontier",
    ]
    assert out.pending == 0


def test_the_last_message_handled_dates_the_crawls_idleness() -> None:
    """`last_handled_at` ("idle from" at info level) moves with every message handled,
    also one read again."""
    counters = Counters()
    assert counters.last_handled_at == 0.0
    before = time.time()
    counters.handled("app.seeds", 0, 0)
    first = counters.last_handled_at
    assert first >= before
    counters.handled("app.seeds", 0, 0)  # read again: still work done
    assert counters.last_handled_at >= first
