"""What link-extract sends to the documents topic (streams/stages/documents.py): a
document under the page's id, or a deletion: noindex, a duplicate, a near-duplicate.
Canonicals: same-site obeyed (and queued), cross-site and conflicting ones not (and
logged). The value is plain Avro that fastavro reads with schemas/document.avsc alone."""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fastavro

from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.handoff import HandoffCache
from streams.stages import link_extract
from streams.store.pagestore import PageStore


class Out:
    def __init__(self) -> None:
        self.added: list[tuple[str, dict[str, Any]]] = []
        self.records: list[tuple[str, bytes, bytes | None]] = []
        self.logs: list[dict[str, Any]] = []

    def add(self, spec: Any, partition: int, item: dict[str, Any]) -> None:
        self.added.append((spec.name, item))

    def add_record(self, spec: Any, partition: int, key: bytes, value: bytes | None) -> None:
        self.records.append((spec.name, key, value))

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)

    def add_frontier(self, *args: Any) -> None:
        pass

    def documents(self) -> dict[str, Any]:
        schema = fastavro.parse_schema(
            json.loads(resources.files("schemas").joinpath("document.avsc").read_text())
        )
        return {
            key.decode(): None
            if value is None
            else fastavro.schemaless_reader(io.BytesIO(value), schema, None)
            for name, key, value in self.records
            if name == "documents"
        }


def ctx() -> Any:
    return SimpleNamespace(
        limits=SimpleNamespace(max_url_bytes=8192),
        settings=SimpleNamespace(
            crawl=SimpleNamespace(near_dup_extract_links=False, max_outlinks=1000)
        ),
        counters=SimpleNamespace(pages_stored=0, documents=0, deletions=0),
        url_partition=lambda url: 0,
        handoff=HandoffCache(0),
    )


def parsed(url: str, body: bytes, headers: dict[str, str] | None = None, **more: Any) -> Any:
    return {
        "page": {
            "url": url,
            "status": 200,
            "headers": [
                {"name": k, "value": v}
                for k, v in {"Content-Type": "text/html; charset=utf-8", **(headers or {})}.items()
            ],
            "body": body,
            "fetched_at": 1000.0,
            "ip": "127.0.0.1",
            "truncated": False,
            "depth": 2,
        },
        "fingerprint": url,
        "title": "T",
        "links": [],
        "base": None,
        "nofollow": False,
        "noindex": False,
        "duplicate_of": None,
        "near_duplicate_of": None,
        **more,
    }


def run(tmp_path: Path, *pages: Any, revisits: RevisitSchedule | None = None) -> Out:
    out = Out()
    store = PageStore(str(tmp_path / "pages"))
    if revisits is None:
        revisits = RevisitSchedule({}, RevisitPolicy(), lambda url: 0, clock=lambda: 1000.0)
    link_extract.handle(ctx(), {"pages": list(pages)}, store, out, revisits)  # type: ignore[arg-type]
    store.close()
    return out


ARTICLE = (
    b"<html><head><title>T</title><meta name=description content='About zebras'></head>"
    b"<body><nav><a href=/home>Home</a></nav><h1>Zebras</h1>"
    b"<p>Zebras are African equines with distinctive black-and-white striped coats.</p>"
    b"<p>See <a href='/horses' rel=nofollow>horses</a> and "
    b"<a href='http://other.example/x'>elsewhere</a>.</p></body></html>"
)


def test_a_page_is_a_document_with_named_fields(tmp_path: Path) -> None:
    out = run(tmp_path, parsed("http://a.example/zebra", ARTICLE))
    doc = out.documents()["http://a.example/zebra"]
    assert doc is not None
    assert doc["canonical"] == doc["url"] == "http://a.example/zebra"
    assert doc["title"] == "T" and doc["description"] == "About zebras"
    assert "striped coats" in doc["text"] and doc["headings"] == ["Zebras"]
    assert doc["language"] == "en" and doc["charset"] == "utf-8"
    assert doc["content_type"] == "text/html" and doc["site"] == "a.example"
    assert doc["depth"] == 2 and doc["size"] == len(ARTICLE)
    assert {"url": "http://a.example/horses", "anchor": "horses", "nofollow": True} in doc[
        "outlinks"
    ]
    assert {"url": "http://other.example/x", "anchor": "elsewhere", "nofollow": False} in doc[
        "outlinks"
    ]


def test_noarchive_is_in_the_document(tmp_path: Path) -> None:
    meta = ARTICLE.replace(b"<title>", b"<meta name=robots content=noarchive><title>")
    out = run(
        tmp_path,
        parsed("http://a.example/meta", meta),
        parsed("http://a.example/header", ARTICLE, {"X-Robots-Tag": "seinebot: noarchive"}),
        parsed("http://a.example/other-bot", ARTICLE, {"X-Robots-Tag": "otherbot: noarchive"}),
    )
    docs = out.documents()
    assert docs["http://a.example/meta"]["noarchive"]
    assert docs["http://a.example/header"]["noarchive"]
    assert not docs["http://a.example/other-bot"]["noarchive"]


def test_noindex_and_near_duplicates_are_deletions(tmp_path: Path) -> None:
    out = run(
        tmp_path,
        parsed("http://a.example/hidden", ARTICLE, noindex=True),
        parsed(
            "http://a.example/near",
            ARTICLE + b"<!-- -->",
            near_duplicate_of={"url": "http://a.example/zebra", "distance": 1},
        ),
    )
    assert out.documents() == {"http://a.example/hidden": None, "http://a.example/near": None}


def test_an_exact_copy_of_another_page_is_a_deletion(tmp_path: Path) -> None:
    original = {"url": "http://a.example/zebra", "digest": "sha1:X", "fetched_at": 1.0}
    out = run(tmp_path, parsed("http://a.example/copy", ARTICLE, duplicate_of=original))
    assert out.documents() == {"http://a.example/copy": None}


def test_a_same_site_canonical_is_the_id_and_is_queued(tmp_path: Path) -> None:
    body = b"<html><head><link rel=canonical href='/main'></head><body><p>x</p></body></html>"
    out = run(tmp_path, parsed("http://a.example/page?session=1", body))
    doc = out.documents()["http://a.example/main"]
    assert doc is not None and doc["url"] == "http://a.example/page?session=1"
    assert ("url-filter", "http://a.example/main") in [(n, i["url"]) for n, i in out.added]


def test_a_link_header_canonical_counts_too(tmp_path: Path) -> None:
    headers = {"Link": '<http://www.a.example/main>; rel="canonical"'}
    out = run(tmp_path, parsed("http://a.example/page", b"<p>x</p>", headers))
    assert list(out.documents()) == ["http://www.a.example/main"]


def test_cross_site_and_conflicting_canonicals_are_logged_not_obeyed(tmp_path: Path) -> None:
    cross = b"<html><head><link rel=canonical href='http://evil.example/'></head></html>"
    conflicting = b"<html><head><link rel=canonical href='/one'></head></html>"
    out = run(
        tmp_path,
        parsed("http://a.example/cross", cross),
        parsed("http://a.example/both", conflicting, {"Link": '</two>; rel="canonical"'}),
    )
    assert sorted(out.documents()) == ["http://a.example/both", "http://a.example/cross"]
    reasons = {
        log["url"]: log["reason"] for log in out.logs if log["outcome"] == "canonical-ignored"
    }
    assert "cross-site canonical http://evil.example/" in reasons["http://a.example/cross"]
    assert "conflicting canonicals" in reasons["http://a.example/both"]


def test_a_canonical_loop_and_hostile_html_stay_bounded(tmp_path: Path) -> None:
    loop_a = b"<html><head><link rel=canonical href='/b'></head><body>a</body></html>"
    loop_b = b"<html><head><link rel=canonical href='/a'></head><body>b</body></html>"
    nested = b"<div>" * 50_000 + b"deep" + b"<a href=/x>" * 5000
    out = run(
        tmp_path,
        parsed("http://a.example/a", loop_a),
        parsed("http://a.example/b", loop_b),
        parsed("http://a.example/nested", nested),
        parsed("http://a.example/unknown", "ꕥꔤꕮ ꔳꕩ ꕉꕜꕮ".encode() * 50),
    )
    docs = out.documents()
    assert set(docs) == {
        "http://a.example/a",
        "http://a.example/b",
        "http://a.example/nested",
        "http://a.example/unknown",
    }
    nested_doc = docs["http://a.example/nested"]
    assert nested_doc is not None and len(nested_doc["outlinks"]) <= 1000


def test_a_recrawl_sends_a_changed_page_again_and_an_unchanged_one_not(tmp_path: Path) -> None:
    revisits = RevisitSchedule({}, RevisitPolicy(), lambda url: 0, clock=lambda: 1000.0)
    url = "http://a.example/zebra"
    first = run(tmp_path, parsed(url, ARTICLE), revisits=revisits)
    assert list(first.documents()) == [url]
    same = parsed(url, ARTICLE)
    same["page"]["fetched_at"] = 2000.0
    assert run(tmp_path, same, revisits=revisits).documents() == {}
    changed = parsed(url, ARTICLE.replace(b"striped", b"spotted"))
    changed["page"]["fetched_at"] = 3000.0
    doc = run(tmp_path, changed, revisits=revisits).documents()[url]
    assert doc is not None and "spotted coats" in doc["text"]


def test_page_text_reads_what_a_rebuilt_document_needs() -> None:
    from streams.core.text import page_text

    found = page_text(
        b"<html><head><title> A \n title </title><base href='/docs/'>"
        b"<meta name=robots content='NOARCHIVE'><meta name=mybot content=noindex></head>"
        b"<body><p>text</p></body></html>",
        agent="MyBot",
    )
    assert found.title == "A title" and found.base == "/docs/"
    assert found.robots == "noarchive,noindex"
    assert page_text(b"<meta name=mybot content=noindex><p>x</p>").robots == ""


def test_bot_specific_meta_follows_the_user_agent() -> None:
    from streams.core.parsing import parse_pages

    page = b"<html><head><meta name='mybot' content='noindex, nofollow'></head><p>x</p></html>"
    (mine,) = parse_pages([(page, None)], agent="MyBot")
    (other,) = parse_pages([(page, None)], agent="SeineBot")
    assert mine.noindex and mine.nofollow
    assert not other.noindex and not other.nofollow


def test_a_rebuilt_document_keeps_the_simhash_and_obeys_noindex(tmp_path: Path) -> None:
    from streams.stages import documents

    store = PageStore(str(tmp_path / "pages"))
    store.put(url="http://a.example/z", status=200, headers=[], body=ARTICLE, fetched_at=1.0, ip="")
    store.put(
        url="http://a.example/hidden",
        status=200,
        headers=[("X-Robots-Tag", "seinebot: noindex")],
        body=ARTICLE,
        fetched_at=1.0,
        ip="",
    )
    out = Out()
    the_ctx = ctx()
    for url in ("http://a.example/z", "http://a.example/hidden"):
        capture = store.get(url)
        assert capture is not None
        documents.resend_document(the_ctx, out, capture, ["from b"], 3, -42)  # type: ignore[arg-type]
    store.close()
    docs = out.documents()
    assert list(docs) == ["http://a.example/z"]
    doc = docs["http://a.example/z"]
    assert doc["simhash"] == -42 and doc["anchors"] == ["from b"] and doc["title"] == "T"
    assert doc["depth"] == 3 and "striped coats" in doc["text"]
