"""The body hand-off (streams/core/handoff.py) and the stages around it: parse keeps a
page's body in its worker, content-dedup sees only its digest and size, link-extract
takes it back to store the page, and a body that is not there is fetched again.

The stage functions run for real over plain dicts and a real page store; the outbox
is a recorder."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

import topology
from streams import codec
from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.frontier import FETCHED_ALREADY, Frontier, Politeness
from streams.core.handoff import ENTRY_OVERHEAD, HandoffCache
from streams.core.partitioning import partition_for
from streams.core.poison import Limits
from streams.core.provenance import handoff_refeed, handoff_refeed_since
from streams.core.records import FetchedPage, FrontierEvent, UrlCandidate
from streams.settings import Settings
from streams.stages import dedup, link_extract, parse, recrawl
from streams.store.pagestore import PageStore
from streams.store.warc import payload_digest
from tests.unit.frontier_helpers import Clock as FrontierClock

# -- the cache -------------------------------------------------------------------------


def test_a_body_put_is_taken_once_by_url_and_digest() -> None:
    cache = HandoffCache(1 << 20)
    cache.put("http://a.test/", "sha1:A", b"<p>a")
    assert cache.take("http://a.test/", "sha1:B") is None  # another fetch's bytes
    assert cache.take("http://b.test/", "sha1:A") is None  # another URL
    assert cache.take("http://a.test/", "sha1:A") == b"<p>a"
    assert cache.take("http://a.test/", "sha1:A") is None  # taken: gone
    assert (cache.stats.put, cache.stats.taken, cache.stats.missed) == (1, 1, 3)
    assert len(cache) == 0 and cache.nbytes == 0


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_cache_refuses_until_its_oldest_entries_are_stale() -> None:
    """Bodies still to be taken are never pushed out (each would be a refetch): a full
    cache refuses (parse then sends the body inline); only entries older than max_age
    make room."""
    body = b"x" * 1000
    clock = Clock()
    cache = HandoffCache(3 * (1000 + ENTRY_OVERHEAD), max_age=60.0, clock=clock)
    for i in range(5):
        assert cache.put(f"http://a.test/{i}", "d", body) == (i < 3)
        assert cache.nbytes <= cache.max_bytes
        clock.now += 10.0
    assert (cache.stats.refused, cache.stats.evicted) == (2, 0)
    clock.now += 30.0  # entry 0 is now 80 s old, 1 is 70 s, 2 is 60 s
    assert cache.put("http://a.test/new", "d", body)  # evicts only the oldest
    assert cache.stats.evicted == 1 and cache.peek("http://a.test/0", "d") is None
    assert cache.peek("http://a.test/1", "d") == body
    # tiny bodies are bounded too: the per-entry overhead counts
    tiny = HandoffCache(10 * ENTRY_OVERHEAD)
    assert sum(tiny.put(f"http://a.test/{i}", "d", b"") for i in range(100)) == 10
    assert len(tiny) == 10


def test_a_body_larger_than_the_bound_or_a_disabled_cache_is_refused() -> None:
    cache = HandoffCache(1000)
    assert not cache.put("http://a.test/", "d", b"x" * 1000)
    assert len(cache) == 0
    off = HandoffCache(0)
    assert not off.enabled and not off.put("http://a.test/", "d", b"")
    with pytest.raises(ValueError):
        HandoffCache(-1)


def test_the_same_page_put_twice_is_one_entry_and_discard_forgets_it() -> None:
    cache = HandoffCache(1 << 20)
    cache.put("http://a.test/", "d", b"abc")
    assert cache.put("http://a.test/", "d", b"abc")  # the parse message read again
    assert len(cache) == 1 and cache.nbytes == 3 + ENTRY_OVERHEAD
    cache.discard("http://a.test/", "d")
    cache.discard("http://a.test/", "d")
    assert len(cache) == 0 and cache.nbytes == 0 and cache.stats.discarded == 1
    assert cache.stats.missed == 0  # discarding is not a miss


# -- the stages ------------------------------------------------------------------------


@dataclass
class FakeCtx:
    """What parse, content-dedup and link-extract read of a StageContext."""

    settings: Settings
    handoff: HandoffCache
    limits: Limits = field(default_factory=lambda: Limits(8 << 20, 8192))
    counters: Any = field(
        default_factory=lambda: type("C", (), {"pages_stored": 0, "documents": 0, "deletions": 0})()
    )

    def fingerprint_partition(self, key: str) -> int:
        return partition_for(key, self.settings.kafka.partitions)

    def url_partition(self, url: str) -> int:
        return partition_for(url.split("/")[2], self.settings.kafka.partitions)


@dataclass
class FakeOutbox:
    items: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    frontier: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)

    def add(self, spec: Any, partition: int, item: dict[str, Any]) -> None:
        self.items.append((spec.name, partition, item))

    def add_frontier(self, partition: int, kind: str, item: dict[str, Any]) -> None:
        self.frontier.append((partition, kind, item))

    def add_record(self, spec: Any, partition: int, key: bytes, value: bytes | None) -> None:
        self.items.append((spec.name, partition, {"key": key, "value": value}))

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)

    def to(self, spec: topology.TopicSpec) -> list[dict[str, Any]]:
        return [item for name, _, item in self.items if name == spec.name]


HTML = (
    "<html><head><title>T{n}</title></head><body><p>{words} end</p>"
    '<a href="/next{n}">n</a></body></html>'
)


def words(seed: int) -> str:
    """Letters only: the simhash masks digits."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choices("bcdfgklmnprstvz", k=6)) for _ in range(80))


def fetched(url: str, n: int, *, etag: str = "", title: int | None = None) -> FetchedPage:
    headers = [{"name": "Content-Type", "value": "text/html; charset=utf-8"}]
    if etag:
        headers.append({"name": "ETag", "value": etag})
    return {
        "url": url,
        "status": 200,
        "headers": headers,
        "body": HTML.format(n=n if title is None else title, words=words(n)).encode(),
        "fetched_at": 1_700_000_000.5 + max(n, 0),
        "elapsed_ms": 3.0,
        "ip": "127.0.0.1",
        "depth": 1,
        "truncated": False,
    }


def wire(record: dict[str, Any]) -> dict[str, Any]:
    """Through the codec, as the broker would carry it."""
    return dict(codec.decode("parsed_batch", codec.encode("parsed_batch", record)))


def crawl(
    ctx: FakeCtx,
    pages: list[FetchedPage],
    store: PageStore,
    revisits: RevisitSchedule | None,
    *,
    lose_bodies: bool = False,
) -> FakeOutbox:
    """parse → content-dedup (every hop) → link-extract, each message through the codec;
    ``lose_bodies``: the worker lost its hand-off cache between parse and link-extract."""
    out = FakeOutbox()
    parse.handle(ctx, {"pages": pages}, out)  # type: ignore[arg-type]
    fingerprints: dict[str, Any] = {}
    bands: dict[str, Any] = {}
    queue = out.to(topology.CONTENT_DEDUP)
    final = FakeOutbox()
    while queue:
        item = queue.pop(0)
        hop = FakeOutbox()
        dedup.handle(ctx, wire({"pages": [item]}), fingerprints, hop, bands)  # type: ignore[arg-type]
        queue += hop.to(topology.CONTENT_DEDUP)
        final.items += [i for i in hop.items if i[0] == topology.LINK_EXTRACT.name]
        final.logs += hop.logs
    if lose_bodies:
        ctx.handoff.clear()
    to_store = wire({"pages": final.to(topology.LINK_EXTRACT)})
    link_extract.handle(ctx, to_store, store, final, revisits)  # type: ignore[arg-type]
    return final


def warc_records(root: Path) -> list[tuple[str, str, str, bytes, bytes]]:
    """(type, URI, payload digest, HTTP headers, payload) of every record stored."""
    records = []
    for segment in sorted(root.rglob("*.warc.gz")):
        with segment.open("rb") as f:
            for record in ArchiveIterator(f, check_digests="raise"):
                if record.rec_type == "warcinfo":
                    continue
                http = record.http_headers.to_bytes() if record.http_headers else b""
                records.append(
                    (
                        record.rec_type,
                        record.rec_headers.get_header("WARC-Target-URI"),
                        record.rec_headers.get_header("WARC-Payload-Digest") or "",
                        http,
                        record.content_stream().read(),
                    )
                )
    return sorted(records)


def schedule() -> RevisitSchedule:
    return RevisitSchedule({}, RevisitPolicy(), lambda url: 0, clock=lambda: 1000.0)


def pages() -> list[FetchedPage]:
    return [
        fetched("http://a.test/1", 1),
        fetched("http://a.test/2", 2),
        fetched("http://b.test/copy", 1),  # an exact duplicate of a.test/1 (other URL)
        fetched("http://c.test/near", 1, title=9),  # a near-duplicate: stored whole
    ]


@pytest.mark.parametrize("partitions", [1, 4])
def test_bodies_cross_the_broker_once_and_the_warc_is_the_one_sent_inline(
    tmp_path: Path, partitions: int
) -> None:
    """Handed off or inline (the cache off: as before the hand-off), the same fetches
    store the same records, byte for byte in every header and payload."""
    results = {}
    for bound in (64 << 20, 0):
        settings = Settings.of(partitions=partitions)
        ctx = FakeCtx(settings, HandoffCache(bound))
        store = PageStore(str(tmp_path / f"pages-{bound}"))
        revisits = schedule()
        out = crawl(ctx, pages(), store, revisits)
        store.close()
        results[bound] = warc_records(tmp_path / f"pages-{bound}")
        assert not out.frontier and ctx.handoff.stats.missed == 0
        assert len(ctx.handoff) == 0  # taken, or discarded for the duplicate
        assert sorted(r["outcome"] for r in out.logs) == ["duplicate", "near-duplicate"]
        assert out.logs[0]["bytes"] == len(pages()[2]["body"])  # the size travelled
        assert {u["url"] for u in out.to(topology.URL_FILTER)} >= {
            "http://a.test/next1",
            "http://a.test/next2",
        }
        assert revisits.record("http://a.test/1")["digest"] == payload_digest(  # type: ignore[index]
            pages()[0]["body"]
        )
    assert results[64 << 20] == results[0]
    assert [r[0] for r in results[0]].count("response") == 3
    assert [r[0] for r in results[0]].count("revisit") == 1
    assert [r[0] for r in results[0]].count("metadata") == 1  # the near-duplicate's


def test_the_parsed_messages_carry_no_body(tmp_path: Path) -> None:
    ctx = FakeCtx(Settings.of(partitions=4), HandoffCache(64 << 20))
    out = FakeOutbox()
    batch = pages()
    parse.handle(ctx, {"pages": batch}, out)  # type: ignore[arg-type]
    items = out.to(topology.CONTENT_DEDUP)
    assert all(i["page"]["body"] is None for i in items)
    assert [i["digest"] for i in items] == [payload_digest(p["body"]) for p in batch]
    assert [i["size"] for i in items] == [len(p["body"]) for p in batch]
    inline = len(codec.encode("parsed_batch", {"pages": [{**items[0], "page": batch[0]}]}))
    assert len(codec.encode("parsed_batch", {"pages": items[:1]})) <= inline - len(batch[0]["body"])


def test_a_body_not_in_the_cache_is_fetched_again_and_logged(tmp_path: Path) -> None:
    ctx = FakeCtx(Settings.of(partitions=2), HandoffCache(64 << 20))
    store = PageStore(str(tmp_path / "pages"))
    revisits = schedule()
    # a page fetched before, whose validators would make the refetch conditional
    revisits.fetched(
        "http://a.test/2",
        fingerprint="old",
        headers=[("ETag", '"v1"')],
        depth=1,
        stored=("sha1:OLD", 1.0),
    )
    out = crawl(ctx, pages(), store, revisits, lose_bodies=True)
    store.close()
    assert warc_records(tmp_path / "pages") == sorted(
        r for r in warc_records(tmp_path / "pages") if r[0] == "revisit"
    )  # only the duplicate's revisit record: no page stored without its body
    missed = [r for r in out.logs if r["outcome"] == link_extract.HANDOFF_MISS]
    refed = sorted(item["url"] for _, kind, item in out.frontier if kind == "new_urls")
    assert (
        refed
        == sorted(r["url"] for r in missed)
        == [
            "http://a.test/1",
            "http://a.test/2",
            "http://c.test/near",
        ]
    )
    assert ctx.handoff.stats.missed == 3
    assert all("hand-off cache" in r["reason"] and r["stage"] == "link-extract" for r in missed)
    for partition, _, item in out.frontier:
        assert item["via"].startswith(recrawl.Via.REFEED_HANDOFF) and recrawl.is_refeed(item["via"])
        assert handoff_refeed_since(item["via"]) == next(
            p["fetched_at"] for p in pages() if p["url"] == item["url"]
        )  # the capture to skip the refetch for, if it gets stored meanwhile
        assert partition == ctx.url_partition(item["url"]) and item["depth"] == 1
    # no revisit record names a capture that was not stored, nor the links of one
    assert revisits.record("http://a.test/1") is None
    assert revisits.record("http://a.test/2")["digest"] == "sha1:OLD"  # type: ignore[index]
    assert revisits.headers_for("http://a.test/2") == {}  # the refetch is unconditional
    assert not any(u["via"] in refed for u in out.to(topology.URL_FILTER))


def test_a_refetch_whose_capture_got_stored_meanwhile_stores_nothing(tmp_path: Path) -> None:
    """After a kill on Apache Kafka the body of a capture was missed, then its fetch
    result was read again and stored, just as the refetch went: the refetch's page
    (the same bytes) was a revisit record, a second record of the page."""
    ctx = FakeCtx(Settings.of(partitions=1), HandoffCache(64 << 20))
    store = PageStore(str(tmp_path / "pages"))
    revisits = schedule()
    page = fetched("http://a.test/1", 1)
    missed = crawl(ctx, [page], store, revisits, lose_bodies=True)
    assert [r["outcome"] for r in missed.logs] == [link_extract.HANDOFF_MISS]
    crawl(ctx, [page], store, revisits)  # the fetch result read again: stored
    refetched = crawl(ctx, [{**page, "fetched_at": page["fetched_at"] + 16}], store, revisits)
    assert not refetched.to(topology.DOCUMENTS)  # the stored capture's went out
    # a later fetch of the same bytes is a revisit, as ever
    crawl(ctx, [{**page, "fetched_at": page["fetched_at"] + 99}], store, revisits)
    store.close()
    assert [r[0] for r in warc_records(tmp_path / "pages")] == ["response", "revisit"]


def test_the_same_capture_read_again_needs_no_body(tmp_path: Path) -> None:
    """At-least-once: link-extract's message read again on another worker (its offset
    was not committed) finds the capture stored already, so no refetch."""
    ctx = FakeCtx(Settings.of(partitions=1), HandoffCache(64 << 20))
    store = PageStore(str(tmp_path / "pages"))
    revisits = schedule()
    out = FakeOutbox()
    batch = [fetched("http://a.test/1", 1)]
    parse.handle(ctx, {"pages": batch}, out)  # type: ignore[arg-type]
    message = wire({"pages": out.to(topology.CONTENT_DEDUP)})
    link_extract.handle(ctx, message, store, FakeOutbox(), revisits)  # type: ignore[arg-type]
    again = FakeOutbox()
    link_extract.handle(ctx, message, store, again, revisits)  # type: ignore[arg-type]
    store.close()
    assert not again.frontier and ctx.handoff.stats.missed == 0
    assert [r[0] for r in warc_records(tmp_path / "pages")] == ["response"]


class CountingRecords(dict[str, Any]):
    """A revisits table that counts its reads by key."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def get(self, key: str, default: Any = None) -> Any:
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().get(key, default)


def test_link_extract_reads_a_revisit_record_once_unless_its_url_repeats(
    tmp_path: Path,
) -> None:
    """The record read to see whether a capture is stored already is the one the
    revisit update starts from; a URL twice in one batch has its second update start
    from the record its first wrote (its visits count both)."""
    ctx = FakeCtx(Settings.of(partitions=1), HandoffCache(64 << 20))
    store = PageStore(str(tmp_path / "pages"))
    records = CountingRecords()
    records["http://a.test/1"] = {
        "fp": "old",
        "etag": '"e"',
        "lm": None,
        "interval": 100.0,
        "last": 1.0,
        "next": 101.0,
        "visits": 3,
        "changes": 1,
        "depth": 1,
    }
    revisits = RevisitSchedule(records, RevisitPolicy(), lambda url: 0, clock=lambda: 1000.0)
    twice = fetched("http://a.test/2", 2)
    batch = [fetched("http://a.test/1", 1), twice, fetched("http://b.test/3", 3), twice]
    out = FakeOutbox()
    parse.handle(ctx, {"pages": batch}, out)  # type: ignore[arg-type]
    message = wire({"pages": out.to(topology.CONTENT_DEDUP)})
    records.reads.clear()
    link_extract.handle(ctx, message, store, FakeOutbox(), revisits)  # type: ignore[arg-type]
    store.close()
    assert records.reads["http://a.test/1"] == 1
    assert records.reads["http://b.test/3"] == 1
    assert records["http://a.test/1"]["visits"] == 4
    assert records["http://a.test/1"]["changes"] == 2  # "old" -> this page's fingerprint
    assert records["http://a.test/2"]["visits"] == 2  # the second update saw the first
    assert records["http://b.test/3"]["visits"] == 1
    assert revisits.changed == 1 and revisits.unchanged == 1


def test_a_handoff_refeed_is_queued_past_the_host_budget() -> None:
    frontier = Frontier({}, {}, Politeness(max_host_queue=1), lambda host: 0)
    revisits = schedule()
    frontier.enqueue("http://a.test/1")
    assert frontier.enqueue("http://a.test/2") is not None  # over budget: refused
    refeed: UrlCandidate = {"url": "http://a.test/1", "depth": 1, "priority": 0, "kind": "page"}
    event: FrontierEvent = {
        "new_urls": [{**refeed, "via": recrawl.Via.REFEED_HANDOFF}],
        "completions": [],
        "tick": False,
    }
    before = frontier.queued
    assert recrawl.handle(0, event, frontier, revisits, []) == []
    assert frontier.queued == before + 1


def test_a_failed_batch_goes_to_dead_letters_with_its_bodies(tmp_path: Path) -> None:
    ctx = FakeCtx(Settings.of(partitions=1), HandoffCache(64 << 20))
    out = FakeOutbox()
    batch = [fetched("http://a.test/1", 1), fetched("http://a.test/2", 2)]
    parse.handle(ctx, {"pages": batch}, out)  # type: ignore[arg-type]
    message = wire({"pages": out.to(topology.CONTENT_DEDUP)})

    class Broken(PageStore):
        def put_many(self, writes: Any, **kw: Any) -> Any:  # type: ignore[override]
            raise OSError("disk full")

    store = Broken(str(tmp_path / "pages"))
    with pytest.raises(OSError) as failure:
        link_extract.handle(ctx, message, store, FakeOutbox(), schedule())  # type: ignore[arg-type]
    store.close()
    kept = codec.decode("parsed_batch", failure.value.dead_letter_value)  # type: ignore[attr-defined]
    assert [p["page"]["body"] for p in kept["pages"]] == [p["body"] for p in batch]


def test_a_handoff_refeed_is_not_fetched_once_its_capture_is_stored() -> None:
    """After a rebalance a parse message whose body its new owner never held is often
    followed by the fetch result that carried the body, read again by that worker:
    it stores the capture. The refetch queued for the miss is then not done."""
    stored: dict[str, float] = {}
    clock = FrontierClock()
    frontier = Frontier({}, {}, Politeness(), lambda host: 0, clock)
    frontier.stored_since = lambda url, since: stored.get(url, -1.0) >= since
    frontier.enqueue("http://a.test/0")
    via = handoff_refeed(1000.5)
    event: FrontierEvent = {
        "new_urls": [
            {"url": f"http://a.test/{n}", "depth": 1, "priority": 0, "kind": "page", "via": via}
            for n in (1, 2)
        ],
        "completions": [],
        "tick": False,
    }
    recrawl.handle(0, event, frontier, schedule(), [])
    stored["http://a.test/1"] = 1000.5  # this capture: stored meanwhile
    stored["http://a.test/2"] = 999.0  # an older capture: fetch it again
    fetched: list[str] = []
    skipped: list[Any] = []
    for _ in range(5):
        dispatches, decisions = frontier.due(0)
        skipped += decisions
        for d in dispatches:
            fetched.append(d.url)
            body = b"" if d.kind == "robots" else None
            frontier.complete(d.host, d.kind, 200, "ok", 1.0, clock(), None, body)
        clock.advance(10)
    assert fetched == ["http://a.test/robots.txt", "http://a.test/0", "http://a.test/2"]
    assert [(d.url, d.outcome) for d in skipped] == [("http://a.test/1", FETCHED_ALREADY)]
    assert frontier.queued == 0
    assert handoff_refeed_since("recrawl:handoff") == 0.0  # from before the time was sent
    assert handoff_refeed_since("recrawl") is None


def test_a_handoff_refetch_waits_for_the_fetch_result_read_again() -> None:
    """A hand-off miss right after a restart races the fetch result that carried the
    body, read again by the same worker, which stores that very capture a moment later:
    fetched at once, the refetch stored the page a second time (test_worker_replaced
    saw it). The refetch waits until `refetch_hold` after the capture's fetch: then it
    is skipped if the capture got stored, and done if not."""
    stored: dict[str, float] = {}
    clock = FrontierClock()
    frontier = Frontier({}, {}, Politeness(refetch_hold=10.0), lambda host: 0, clock)
    frontier.stored_since = lambda url, since: stored.get(url, -1.0) >= since
    frontier.enqueue("http://a.test/0")
    captured = clock() - 1.0  # the capture whose body the killed worker held
    event: FrontierEvent = {
        "new_urls": [
            {
                "url": f"http://a.test/{n}",
                "depth": 1,
                "priority": 0,
                "kind": "page",
                "via": handoff_refeed(captured),
            }
            for n in (1, 2)
        ],
        "completions": [],
        "tick": False,
    }
    fetched: list[str] = []
    skipped: list[Any] = []

    def step() -> None:
        dispatches, decisions = frontier.due(0)
        skipped.extend(decisions)
        for d in dispatches:
            fetched.append(d.url)
            body = b"" if d.kind == "robots" else None
            frontier.complete(d.host, d.kind, 200, "ok", 1.0, clock(), None, body)

    step()  # robots.txt
    recrawl.handle(0, event, frontier, schedule(), [])
    for _ in range(8):  # 8 s: the refetches wait, /0 goes
        clock.advance(1)
        step()
    assert fetched == ["http://a.test/robots.txt", "http://a.test/0"]
    assert frontier.queued == 2
    stored["http://a.test/1"] = captured  # the fetch result read again stored it
    for _ in range(4):
        clock.advance(1)
        step()
    assert fetched[2:] == ["http://a.test/2"]
    assert [(d.url, d.outcome) for d in skipped] == [("http://a.test/1", FETCHED_ALREADY)]
    assert frontier.queued == 0
