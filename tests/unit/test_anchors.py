"""Anchor texts per target (streams/core/anchors.py) and the anchors stage
(streams/stages/anchors.py): bounded, distinct, per-site shares; a page stored
before its anchors came is sent again, in batches."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from streams.core.anchors import MAX_ANCHORS, MAX_PER_SITE, add_anchor, anchor_texts
from streams.stages.anchors import AnchorsStage
from streams.store.pagestore import PageStore


def test_distinct_texts_and_per_site_shares() -> None:
    entry = add_anchor(None, "  The   zebra page ", "a.example")
    assert entry == [["The zebra page", "a.example"]]
    assert add_anchor(entry, "The zebra page", "a.example") is None  # already there
    assert add_anchor(entry, "", "b.example") is None
    grown = add_anchor(entry, "The zebra page", "b.example")
    assert grown is not None and anchor_texts(grown) == ["The zebra page"]
    for i in range(MAX_PER_SITE * 2):
        grown = add_anchor(grown, f"text {i}", "farm.example") or grown
    assert sum(1 for _t, site in grown if site == "farm.example") == MAX_PER_SITE


def test_an_anchor_flood_stays_bounded() -> None:
    entry: Any = None
    writes = 0
    for i in range(100_000):
        grown = add_anchor(entry, f"link {i % 7}", f"site{i}.example")
        if grown is not None:
            entry, writes = grown, writes + 1
    assert len(entry) == MAX_ANCHORS and writes == MAX_ANCHORS


class Out:
    """The outbox calls the stages make here."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def add_record(self, spec: Any, partition: int, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def log(self, record: dict[str, Any]) -> None:
        pass


def test_a_stored_page_with_new_anchors_is_sent_again(tmp_path: Path) -> None:
    store = PageStore(str(tmp_path / "pages"))
    url = "http://a.example/zebra"
    for stored in (url, "http://a.example/other"):
        store.put(
            url=stored,
            status=200,
            headers=[("Content-Type", "text/html")],
            body=b"<title>Z</title><p>Zebras are striped equines of the savanna.</p>",
            fetched_at=1.0,
            ip="127.0.0.1",
        )
    ctx: Any = SimpleNamespace(counters=SimpleNamespace(documents=0), url_partition=lambda url: 0)
    now = [100.0]
    table: dict[str, Any] = {}
    stage = AnchorsStage(ctx, table, store, None, 2.0, clock=lambda: now[0])
    out = Out()
    batch = {
        "anchors": [
            {"url": url, "text": "striped horses", "site": "b.example"},
            {"url": url, "text": "zebra facts", "site": "c.example"},
            {"url": "http://a.example/other", "text": "home", "site": "a.example"},
            {"url": "http://a.example/not-stored", "text": "later", "site": "b.example"},
        ]
    }
    stage.step(0, batch, out)  # type: ignore[arg-type]
    assert anchor_texts(table[url]) == ["striped horses", "zebra facts"]
    assert anchor_texts(table["http://a.example/other"]) == ["home"]
    # the page not stored yet gets them in its document; a same-site anchor of a
    # stored page waits for the page's next document
    assert list(stage.dirty) == [url]
    assert not stage.due()
    now[0] += 2.5
    assert stage.due() and stage.refresh(out) == 1  # type: ignore[arg-type]
    assert not stage.dirty and [key for key, _ in out.records] == [url.encode()]
    store.close()


def test_a_resend_starts_from_the_document_sent_and_a_deletion_forgets_it(
    tmp_path: Path,
) -> None:
    from streams import codec
    from streams.core.doccache import DocumentCache
    from streams.stages import documents
    from tests.unit.codec_helpers import EXAMPLES

    cache = DocumentCache(1 << 20)
    ctx: Any = SimpleNamespace(
        counters=SimpleNamespace(documents=0, deletions=0),
        url_partition=lambda url: 0,
        document_cache=cache,
    )
    url = "https://example.com/a?ref=x"
    sent = codec.encode("document", EXAMPLES["document"][0])
    cache.put(url, "https://example.com/a", sent)
    out: Any = Out()
    assert documents.resend_cached(ctx, out, url, ["new anchor", "another"])
    ((key, value),) = out.records
    assert key == b"https://example.com/a" and value is not None
    again = codec.decode("document", value)
    assert again["anchors"] == ["new anchor", "another"]
    assert again["text"] == EXAMPLES["document"][0]["text"]
    documents.send_deletion(ctx, out, url)
    assert not documents.resend_cached(ctx, out, url, ["more"])  # not brought back


def test_the_document_cache_is_bounded_in_bytes() -> None:
    import os

    from streams.core.doccache import DocumentCache

    cache = DocumentCache(100)
    for i in range(10):
        cache.put(f"u{i}", f"u{i}", os.urandom(30))  # random bytes do not compress
    assert cache.bytes <= 100 and len(cache) == 2
    assert cache.get("u9") is not None and cache.get("u0") is None
    cache.put("big", "big", os.urandom(101))  # larger than the whole bound: not kept
    assert cache.get("big") is None and cache.bytes <= 100
    text = b"the same words again and again " * 100
    cache.put("text", "id", text)
    assert cache.get("text") == ("id", text)


def test_resends_grow_sparser_as_other_sites_name_a_page(tmp_path: Path) -> None:
    store = PageStore(str(tmp_path / "pages"))
    url = "http://a.example/zebra"
    store.put(url=url, status=200, headers=[], body=b"<p>zebra</p>", fetched_at=1.0, ip="127.0.0.1")
    ctx: Any = SimpleNamespace(counters=SimpleNamespace(documents=0), url_partition=lambda u: 0)
    stage = AnchorsStage(ctx, {}, store, None, 2.0, clock=lambda: 100.0)
    marked = []
    for i in range(1, 10):
        stage.dirty.clear()
        batch = {"anchors": [{"url": url, "text": f"t{i}", "site": f"s{i}.example"}]}
        stage.step(0, batch, Out())  # type: ignore[arg-type]
        if stage.dirty:
            marked.append(i)
    assert marked == [1, 2, 4, 8]
    store.close()
