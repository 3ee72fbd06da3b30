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
