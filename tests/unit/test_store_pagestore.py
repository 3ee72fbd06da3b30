"""PageStore (streams/store/pagestore.py): puts, gets, revisits, batches, the stored
HTTP block, read-only readers, near-duplicates; real files in tmp_path."""

from __future__ import annotations

import logging
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from streams.store.pagestore import Capture, PageStore, ReadOnlyError
from tests.unit.store_helpers import (
    HTML,
    WARCIO,
    records,
    segments,
    sha1_b32,
)


@pytest.fixture
def store(tmp_path: Path):
    with PageStore(tmp_path / "ps") as s:
        yield s


# --------------------------------------------------------------------- basics


def test_put_get_round_trip(store: PageStore) -> None:
    body = b"<html><body>hello</body></html>"
    c = store.put(
        "http://example.com/",
        status=200,
        headers=HTML,
        body=body,
        fetched_at=1_700_000_000.123456,
        ip="93.184.216.34",
    )
    assert isinstance(c, Capture)
    assert c.digest == sha1_b32(body)
    assert c.segment.startswith("seine-") and c.segment.endswith(".warc.gz")

    g = store.get("http://example.com/")
    assert g is not None
    assert g.body == body
    assert g.status == 200
    assert g.headers == HTML
    assert g.ip == "93.184.216.34"
    assert g.fetched_at == pytest.approx(1_700_000_000.123456, abs=1e-6)
    assert g.digest == c.digest
    assert (g.segment, g.offset, g.length) == (c.segment, c.offset, c.length)
    assert g.truncated is False and g.revisit_of is None


def test_unknown_contains_and_urls(store: PageStore) -> None:
    assert store.get("http://nope.example/") is None
    assert "http://nope.example/" not in store
    for u in ["http://b.example/", "http://a.example/x", "http://a.example/", "http://b.example/"]:
        store.put(u, status=200, headers=HTML, body=u.encode())
    assert "http://a.example/" in store
    assert "http://a.example" not in store  # prefix of a stored URL is not that URL
    assert "http://a.example/x" in store
    assert list(store.urls()) == ["http://a.example/", "http://a.example/x", "http://b.example/"]


def test_multiple_captures_and_at(store: PageStore) -> None:
    url = "http://example.com/news"
    for t in (100.0, 200.0, 300.0):
        store.put(url, status=200, headers=HTML, body=f"v{t:.0f}".encode(), fetched_at=t)
    latest = store.get(url)
    assert latest is not None and latest.body == b"v300"
    assert store.get(url, at=250.0).body == b"v200"  # type: ignore[union-attr]
    assert store.get(url, at=200.0).body == b"v200"  # type: ignore[union-attr]
    assert store.get(url, at=1e12).body == b"v300"  # type: ignore[union-attr]
    assert store.get(url, at=float("inf")).body == b"v300"  # type: ignore[union-attr]
    assert store.get(url, at=-1.0) is None
    assert store.get(url, at=99.0) is None  # nothing at or before
    caps = store.captures(url)
    assert [c.body for c in caps] == [b"v100", b"v200", b"v300"]
    assert [c.fetched_at for c in caps] == [100.0, 200.0, 300.0]
    assert store.captures("http://example.com/other") == []
    assert list(store.urls()) == [url]


def test_fetched_since_asks_for_a_capture_at_or_after_a_time(store: PageStore) -> None:
    """What an adoption asks of a fetch in flight at a crash: is its page stored?"""
    url = "http://example.com/news"
    assert not store.fetched_since(url, 0.0)
    store.put(url, status=200, headers=HTML, body=b"v100", fetched_at=100.0)
    assert store.fetched_since(url, 99.5) and store.fetched_since(url, 100.0)
    assert not store.fetched_since(url, 100.001)  # dispatched after the one stored
    store.put(url, status=200, headers=HTML, body=b"v300", fetched_at=300.0)
    assert store.fetched_since(url, 250.0)  # the latest capture counts
    assert not store.fetched_since("http://example.com/new", 0.0)  # a prefix of the URL
    assert not store.fetched_since("http://example.com/newsroom", 0.0)  # it as a prefix
    assert not store.fetched_since("", 0.0)


def test_same_url_and_time_is_idempotent(store: PageStore) -> None:
    """A Kafka re-delivery (same url + fetched_at) replaces, never duplicates."""
    store.put("http://e.example/", status=200, headers=HTML, body=b"one", fetched_at=5.0)
    store.put("http://e.example/", status=200, headers=HTML, body=b"two", fetched_at=5.0)
    caps = store.captures("http://e.example/")
    assert len(caps) == 1 and caps[0].body == b"two"


def test_untimed_puts_of_one_url_never_collide(store: PageStore) -> None:
    for i in range(20):
        store.put("http://t.example/", status=200, headers=HTML, body=str(i).encode())
    caps = store.captures("http://t.example/")
    assert [c.body for c in caps] == [str(i).encode() for i in range(20)]


def test_revisit_returns_original_body(store: PageStore) -> None:
    body = b"<html>same</html>"
    orig = store.put("http://a.example/", status=200, headers=HTML, body=body, fetched_at=10.0)
    # Same URL recrawled, unchanged.
    r1 = store.put_revisit(
        "http://a.example/",
        original_url=orig.url,
        original_digest=orig.digest,
        original_date=orig.fetched_at,
        status=200,
        headers=[("Content-Type", "text/html"), ("ETag", '"x"')],
        fetched_at=20.0,
        ip="10.0.0.1",
    )
    # A different URL with identical content.
    store.put_revisit(
        "http://mirror.example/a",
        original_url=orig.url,
        original_digest=orig.digest,
        original_date=orig.fetched_at,
        status=200,
        headers=HTML,
        fetched_at=30.0,
    )
    assert r1.revisit_of == "http://a.example/" and r1.body == b""  # not resolved on put

    g = store.get("http://a.example/")
    assert g is not None
    assert g.body == body
    assert g.revisit_of == "http://a.example/"
    assert g.digest == orig.digest
    assert g.headers == [("Content-Type", "text/html"), ("ETag", '"x"')]
    assert g.ip == "10.0.0.1"
    assert g.fetched_at == 20.0
    m = store.get("http://mirror.example/a")
    assert m is not None and m.body == body and m.revisit_of == "http://a.example/"
    # The original stays reachable as of its own time.
    first = store.get("http://a.example/", at=15.0)
    assert first is not None and first.revisit_of is None and first.body == body

    revisits = [r for seg in segments(store.path) for _, r, _ in records(seg)]
    revisits = [r for r in revisits if r.rec_type == "revisit"]
    assert len(revisits) == 2
    h = revisits[0].rec_headers
    assert h.get_header("WARC-Profile") == (
        "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    )
    assert h.get_header("WARC-Refers-To-Target-URI") == "http://a.example/"
    assert h.get_header("WARC-Refers-To-Date") == "1970-01-01T00:00:10.000000Z"
    assert h.get_header("WARC-Payload-Digest") == orig.digest


def _copy_of_a_page_elsewhere(store: PageStore, original: str) -> None:
    """A revisit of `original`, which this store does not hold."""
    store.put_revisit(
        "http://x.example/",
        original_url=original,
        original_digest=sha1_b32(original.encode()),
        original_date=1.0,
        status=200,
        headers=HTML,
    )


def test_revisit_with_missing_original_has_empty_body(store: PageStore) -> None:
    _copy_of_a_page_elsewhere(store, "http://gone.example/")
    g = store.get("http://x.example/")
    assert g is not None and g.body == b"" and g.revisit_of == "http://gone.example/"


def test_a_revisit_read_without_following_it_names_its_original(
    store: PageStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller that skips copies (the anchors' document resends) does not look for
    the original, which under --workers N may be in another worker's store."""
    _copy_of_a_page_elsewhere(store, "http://elsewhere.example/")
    with caplog.at_level(logging.WARNING):
        g = store.get("http://x.example/", follow_revisits=False)
    assert g is not None and g.body == b"" and g.revisit_of == "http://elsewhere.example/"
    assert not caplog.records  # no "original not found" warning


def test_revisit_finds_original_by_digest_when_date_is_off(store: PageStore) -> None:
    a = store.put("http://o.example/", status=200, headers=HTML, body=b"A", fetched_at=10.0)
    store.put("http://o.example/", status=200, headers=HTML, body=b"B", fetched_at=20.0)
    store.put_revisit(
        "http://r.example/",
        original_url="http://o.example/",
        original_digest=a.digest,
        original_date=25.0,  # latest at/before is "B": digest mismatch, so search by digest
        status=200,
        headers=HTML,
    )
    assert store.get("http://r.example/").body == b"A"  # type: ignore[union-attr]


# ----------------------------------------------------------------- HTTP block


def test_decoded_body_makes_http_block_self_consistent(store: PageStore) -> None:
    body = b"<html>" + b"x" * 1000 + b"</html>"
    headers = [
        ("Content-Type", "text/html"),
        ("Content-Encoding", "gzip"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "57"),
    ]
    c = store.put("http://gz.example/", status=200, headers=headers, body=body)
    assert c.headers == [
        ("Content-Type", "text/html"),
        ("X-Seine-Orig-Content-Encoding", "gzip"),
        ("X-Seine-Orig-Transfer-Encoding", "chunked"),
        ("X-Seine-Orig-Content-Length", "57"),
        ("Content-Length", str(len(body))),
    ]
    assert store.get("http://gz.example/").headers == c.headers  # type: ignore[union-attr]
    # A generic WARC reader now decodes the payload to exactly the stored body.
    with segments(store.path)[0].open("rb") as f:
        f.seek(c.offset)
        rec = next(iter(ArchiveIterator(f)))
        assert rec.content_stream().read() == body


def test_untouched_headers_kept_verbatim(store: PageStore) -> None:
    headers = [("Content-Length", "3"), ("Content-Encoding", "identity"), ("X-A", "1")]
    c = store.put("http://v.example/", status=404, headers=headers, body=b"abc")
    assert c.headers == headers
    assert store.get("http://v.example/").status == 404  # type: ignore[union-attr]


def test_header_injection_and_non_ascii(store: PageStore) -> None:
    c = store.put(
        "http://h.example/",
        status=200,
        headers=[("X-Evil", "a\r\nWARC-Type: revisit"), ("X-Name", "café"), ("X-Raw", "\udcff")],
        body=b"ok",
    )
    assert c.headers == [
        ("X-Evil", "a  WARC-Type: revisit"),
        ("X-Name", "caf%C3%A9"),
        ("X-Raw", "%FF"),
    ]
    g = store.get("http://h.example/")
    assert g is not None and g.headers == c.headers and g.body == b"ok"


def test_unusual_status_code(store: PageStore) -> None:
    store.put("http://s.example/", status=299, headers=[], body=b"")
    g = store.get("http://s.example/")
    assert g is not None and g.status == 299 and g.headers == []


@pytest.mark.parametrize("bad", [0, 99, 1000, "200"])
def test_bad_status_rejected(store: PageStore, bad: Any) -> None:
    with pytest.raises(ValueError):
        store.put("http://s.example/", status=bad, headers=[], body=b"")


# ------------------------------------------------------------ bodies and URLs


def test_binary_empty_and_large_bodies(store: PageStore) -> None:
    binary = bytes(range(256)) * 4 + b"\r\n\r\nHTTP/1.1 200 OK\r\n\r\nWARC/1.1\r\n"
    big = random.Random(7).randbytes(5 * 1024 * 1024)
    store.put("http://bin.example/", status=200, headers=[], body=binary)
    store.put("http://empty.example/", status=204, headers=[], body=b"")
    store.put("http://big.example/", status=200, headers=[], body=big, truncated=True)
    assert store.get("http://bin.example/").body == binary  # type: ignore[union-attr]
    e = store.get("http://empty.example/")
    assert e is not None and e.body == b"" and e.status == 204 and e.digest == sha1_b32(b"")
    g = store.get("http://big.example/")
    assert g is not None and g.body == big and g.truncated is True
    (seg,) = segments(store.path)
    with seg.open("rb") as f:
        f.seek(g.offset)
        rec = next(iter(ArchiveIterator(f)))
        assert rec.rec_headers.get_header("WARC-Truncated") == "length"


URLS = [
    "http://example.com/café?q=ü",
    "http://例え.jp/パス",
    "https://xn--r8jz45g.jp/%E3%83%91%E3%82%B9",
    "http://example.com/a%20b%2Fc?x=%26&y=1",
    "http://example.com/a b",
    "http://example.com/#frag",
    "http://example.com:8080/",
]


def test_unicode_and_percent_encoded_urls(store: PageStore) -> None:
    for i, u in enumerate(URLS):
        store.put(u, status=200, headers=HTML, body=str(i).encode())
    for i, u in enumerate(URLS):
        g = store.get(u)
        assert g is not None and g.url == u and g.body == str(i).encode()
        assert u in store
    assert list(store.urls()) == sorted(set(URLS))
    # Percent-encoded and raw forms are different URLs: the store does not normalise.
    assert "http://example.com/caf%C3%A9?q=%C3%BC" not in store


@pytest.mark.parametrize("bad", ["", "http://x/\x00", "http://x/\r\n", "http://x/\ty"])
def test_bad_urls_rejected(store: PageStore, bad: str) -> None:
    with pytest.raises(ValueError):
        store.put(bad, status=200, headers=[], body=b"")
    assert bad not in store


# -------------------------------------------------------------------- batches


class CountingDB:
    """Delegates to the real Rdict, counting write() calls (one per WriteBatch)."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.writes = 0

    def write(self, batch: Any) -> None:
        self.writes += 1
        self._db.write(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_put_many_is_one_write_batch(store: PageStore) -> None:
    counting = CountingDB(store._db)
    store._db = counting  # type: ignore[assignment]
    items: list[dict[str, Any]] = [
        {"url": f"http://b.example/{i}", "status": 200, "headers": HTML, "body": b"p%d" % i}
        for i in range(50)
    ]
    items.append(
        {
            "url": "http://b.example/dup",
            "original_url": "http://b.example/7",
            "original_digest": sha1_b32(b"p7"),
            "original_date": 4e9,
            "status": 200,
            "headers": HTML,
        }
    )
    caps = store.put_many(items)
    assert counting.writes == 1
    assert len(caps) == 51 and caps[-1].revisit_of == "http://b.example/7"
    for i in range(50):
        assert store.get(f"http://b.example/{i}").body == b"p%d" % i  # type: ignore[union-attr]
    assert store.get("http://b.example/dup").body == b"p7"  # type: ignore[union-attr]
    assert store.put_many([]) == []
    assert counting.writes == 1


def test_put_many_without_captures_stores_the_same(tmp_path: Path) -> None:
    """link-extract's ``captures=False``: nothing returned, the same records stored."""
    items: list[dict[str, Any]] = [
        {
            "url": f"http://b.example/{i}",
            "status": 200,
            "headers": HTML,
            "body": b"p%d" % i,
            "fetched_at": 1e9 + i,
        }
        for i in range(5)
    ]
    items.append(
        {
            "url": "http://b.example/dup",
            "original_url": "http://b.example/2",
            "original_digest": sha1_b32(b"p2"),
            "original_date": 1e9 + 2,
            "status": 200,
            "headers": HTML,
            "fetched_at": 1e9 + 9,
        }
    )
    stored = {}
    for with_captures in (True, False):
        s = PageStore(str(tmp_path / str(with_captures)))
        got = s.put_many([dict(i) for i in items], captures=with_captures)
        assert len(got) == (6 if with_captures else 0)
        caps = [s.get(i["url"]) for i in items]
        assert all(c is not None for c in caps)
        stored[with_captures] = [
            (
                c.url,
                c.fetched_at,
                c.status,
                c.headers,
                c.body,
                c.digest,
                c.revisit_of,
                c.near_duplicate_of,
                c.truncated,
            )  # (offsets differ: the segment's name and record ids are new each time)
            for c in caps
            if c is not None
        ]
        s.close()
    assert stored[True] == stored[False]


def test_put_many_bad_item_writes_nothing(store: PageStore) -> None:
    store.put("http://first.example/", status=200, headers=[], body=b"x")
    (seg,) = segments(store.path)
    size = seg.stat().st_size
    with pytest.raises(TypeError):
        store.put_many(
            [
                {"url": "http://ok.example/", "status": 200, "headers": [], "body": b"y"},
                {"url": "http://bad.example/", "status": 200, "headers": [], "bodyy": b"z"},
            ]
        )
    assert seg.stat().st_size == size
    assert list(store.urls()) == ["http://first.example/"]


# -------------------------------------------------------- readers and closing


def test_read_only_while_writer_open(tmp_path: Path) -> None:
    root = tmp_path / "ps"
    writer = PageStore(root)
    try:
        writer.put_many(
            [
                {"url": f"http://w.example/{i}", "status": 200, "headers": [], "body": b"%d" % i}
                for i in range(10)
            ]
        )
        with PageStore(root, read_only=True) as ro:
            assert ro.get("http://w.example/3").body == b"3"  # type: ignore[union-attr]
            assert len(list(ro.urls())) == 10
            with pytest.raises(ReadOnlyError):
                ro.put("http://w.example/x", status=200, headers=[], body=b"")
            with pytest.raises(ReadOnlyError):
                ro.put_many(
                    [{"url": "http://w.example/x", "status": 200, "headers": [], "body": b""}]
                )
            ro.flush()  # no-op, must not raise
            # The writer keeps working while a reader is open.
            writer.put("http://w.example/late", status=200, headers=[], body=b"late")
            # A second reader can be open at the same time.
            with PageStore(root, read_only=True) as ro2:
                assert ro2.get("http://w.example/late").body == b"late"  # type: ignore[union-attr]
    finally:
        writer.close()
    with PageStore(root, read_only=True) as ro:
        assert ro.get("http://w.example/late").body == b"late"  # type: ignore[union-attr]
        assert len(list(ro.urls())) == 11


def test_read_only_missing_store(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        PageStore(tmp_path / "nothing", read_only=True)
    assert not (tmp_path / "nothing").exists()
    # a writer starting up has made the index directory, not yet RocksDB's CURRENT
    # (test_recrawl's reader met that under load: a bare RocksDB IO error)
    (tmp_path / "starting" / "index").mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        PageStore(tmp_path / "starting", read_only=True)


def test_closed_store_rejects_writes(tmp_path: Path) -> None:
    s = PageStore(tmp_path / "ps")
    s.close()
    s.close()  # idempotent
    with pytest.raises(ValueError):
        s.put("http://x.example/", status=200, headers=[], body=b"")
    with pytest.raises(ValueError):
        s.get("http://x.example/")


# ------------------------------------------------------------ near-duplicates


def test_near_duplicate_is_stored_whole_and_marked(tmp_path: Path) -> None:
    with PageStore(tmp_path / "ps", segment_max_bytes=600) as s:
        o = s.put("http://a.example/", status=200, headers=HTML, body=b"<p>day 1</p>")
        c = s.put(
            "http://b.example/",
            status=200,
            headers=HTML,
            body=b"<p>day 2</p>",
            near_duplicate_of=o.url,
            near_distance=0,
            simhash=5,
        )
        assert c.near_duplicate_of == o.url and c.revisit_of is None
        s.put("http://c.example/", status=200, headers=HTML, body=b"<p>other</p>")
    with PageStore(tmp_path / "ps", read_only=True) as r:
        got = r.get("http://b.example/")
        assert got is not None and got.body == b"<p>day 2</p>"  # its own bytes, not a revisit
        assert got.near_duplicate_of == "http://a.example/"
        assert r.get("http://a.example/").near_duplicate_of is None  # type: ignore[union-attr]
        assert r.get("http://c.example/").near_duplicate_of is None  # type: ignore[union-attr]
    # The metadata record follows its response in the same segment (no rotation between).
    for seg in segments(tmp_path / "ps"):
        recs = records(seg)
        types = [r.rec_type for _, r, _ in recs]
        if "metadata" in types:
            i = types.index("metadata")
            assert types[i - 1] == "response"
            response, meta = recs[i - 1][1], recs[i][1]
            assert meta.rec_headers.get_header("WARC-Refers-To") == response.rec_headers.get_header(
                "WARC-Record-ID"
            )
            assert recs[i][2] == (
                b"near-duplicate-of: http://a.example/\r\nsimhash-distance: 0\r\n"
                b"simhash: 0000000000000005\r\n"
            )
            break
    else:
        raise AssertionError("no metadata record")
    proc = subprocess.run(
        [str(WARCIO), "check", "-v", *map(str, segments(tmp_path / "ps"))],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_near_duplicate_rejects_bad_original(store: PageStore) -> None:
    with pytest.raises(ValueError, match="control"):
        store.put(
            "http://b.example/", status=200, headers=[], body=b"x", near_duplicate_of="http://\n/"
        )
    assert "http://b.example/" not in store
