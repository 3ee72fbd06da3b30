"""The page store's fast read path agrees with warcio on every record our writer makes.

`get()` parses the one gzip member the index points at by hand (zlib + splits) and
only falls back to warcio's ArchiveIterator for a record of another shape; these
cases pin that both give the same headers, IP address and payload.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from streams.store import gzipmembers, index
from streams.store.pagestore import Capture, PageStore

CASES: list[tuple[str, list[tuple[str, str]], bytes, str | None]] = [
    ("plain", [("Content-Type", "text/html; charset=utf-8")], b"<p>hello</p>", "127.0.0.1"),
    ("empty body", [("Content-Type", "text/html")], b"", None),
    ("binary", [("Content-Type", "application/octet-stream")], bytes(range(256)) * 40, "::1"),
    ("many headers", [(f"X-H{i}", f"value {i}") for i in range(60)], b"x" * 9000, "10.0.0.7"),
    (
        "odd header values",
        [
            ("Set-Cookie", "a=b; Path=/"),
            ("X-Empty", ""),
            ("X-Unicode", "caf\u00e9 \u2603"),
            ("X-Colon", "a: b: c"),
        ],
        "<p>ünïcödé</p>".encode(),
        None,
    ),
    ("encoded upstream", [("Content-Encoding", "gzip"), ("Content-Length", "3")], b"abc", None),
]


def _put_revisit(
    store: PageStore,
    url: str,
    original: Capture,
    headers: list[tuple[str, str]],
    ip: str | None = None,
) -> Capture:
    return store.put_revisit(
        url,
        original_url=original.url,
        original_digest=original.digest,
        original_date=original.fetched_at,
        status=200,
        headers=headers,
        ip=ip,
    )


def _warcio(data: bytes) -> tuple[list[tuple[str, str]], str | None, bytes]:
    for record in ArchiveIterator(io.BytesIO(data)):
        http = record.http_headers
        return (
            list(http.headers) if http is not None else [],
            record.rec_headers.get_header("WARC-IP-Address"),
            record.raw_stream.read(),
        )
    raise AssertionError("no record")


@pytest.mark.parametrize(("name", "headers", "body", "ip"), CASES, ids=[c[0] for c in CASES])
def test_fast_path_matches_warcio(
    tmp_path: Path, name: str, headers: list[tuple[str, str]], body: bytes, ip: str | None
) -> None:
    with PageStore(tmp_path / "store") as store:
        capture = store.put(
            f"http://example.test/{name.replace(' ', '-')}",
            status=200,
            headers=headers,
            body=body,
            ip=ip,
        )
        original = store.put("http://example.test/original", status=200, headers=[], body=body)
        revisit = _put_revisit(store, "http://example.test/copy", original, headers, ip=ip)
        store.flush()
        for cap in (capture, revisit):
            raw = (tmp_path / "store" / "segments" / cap.segment).read_bytes()
            data = raw[cap.offset : cap.offset + cap.length]
            fast = gzipmembers.parse_member(data)
            assert fast is not None, f"{name}: the fast path refused our own record"
            assert (fast.headers, fast.ip, fast.body) == _warcio(data)
        got = store.get(capture.url)
        assert got is not None and got.body == body
        copy = store.get("http://example.test/copy")
        assert copy is not None and copy.body == body and copy.revisit_of == original.url


# ----------------------------------------------------------------- offsets in the index


def _index_entries(store: PageStore) -> dict[bytes, bytes]:
    it = store._db.iter()
    it.seek_to_first()
    out: dict[bytes, bytes] = {}
    while it.valid():
        out[bytes(it.key())] = bytes(it.value())
        it.next()
    return out


@pytest.mark.parametrize(("name", "headers", "body", "ip"), CASES, ids=[c[0] for c in CASES])
def test_offsets_in_the_index_cut_the_record_as_warcio_does(
    tmp_path: Path, name: str, headers: list[tuple[str, str]], body: bytes, ip: str | None
) -> None:
    """Responses, revisits and near-duplicates (a metadata record follows) alike."""
    with PageStore(tmp_path / "store") as store:
        original = store.put("http://example.test/o", status=200, headers=headers, body=body, ip=ip)
        _put_revisit(store, "https://example.test/copy", original, headers, ip=ip)
        store.put(
            "http://example.test/near",
            status=200,
            headers=headers,
            body=body + b"!",
            ip=ip,
            near_duplicate_of=original.url,
            near_distance=1,
        )
        store.flush()
        entries = _index_entries(store)
        assert len(entries) == 3
        for key, value in entries.items():
            e = index.decode(key, value)
            assert e.raw_len > 0 and 0 < e.http_start < e.body_start <= e.raw_len - 4
            data = (tmp_path / "store" / "segments" / e.segment).read_bytes()
            data = data[e.offset : e.offset + e.length]
            sliced = gzipmembers.slice_record(data, e.raw_len, e.http_start, e.body_start)
            assert sliced is not None, f"{name}: offsets refused for {e.url}"
            assert (sliced.headers, sliced.ip, sliced.body) == _warcio(data)


def _v1_value(e: index.Entry) -> bytes:
    """An index value as stores written before version 2 hold them."""
    flags = (1 if e.truncated else 0) | (2 if e.revisit_of is not None else 0)
    flags |= 4 if e.near_duplicate_of is not None else 0
    parts = [index._VAL_HEAD.pack(1, flags, e.status, e.offset, e.length, e.orig_micros)]
    for s in (e.segment, e.digest, e.mime, e.revisit_of or e.near_duplicate_of or ""):
        b = s.encode()
        parts += [index._STR_LEN.pack(len(b)), b]
    return b"".join(parts)


def test_stores_with_version_1_index_entries_read_the_same(tmp_path: Path) -> None:
    """Backward compatibility: a v1 entry has no offsets, so the record is parsed."""
    headers = [("Content-Type", "text/html"), ("X-A", "1")]
    with PageStore(tmp_path / "store") as store:
        a = store.put(
            "http://example.test/a", status=200, headers=headers, body=b"<p>a</p>", ip="::1"
        )
        _put_revisit(store, "http://example.test/b", a, headers)
        store.put("http://example.test/c", status=404, headers=[], body=b"gone", truncated=True)
        before = {u: store.get(u) for u in store.urls()}
        with io.StringIO() as f:
            store.export_cdxj(f)
            cdxj_before = f.getvalue()
        entries = _index_entries(store)
        for key, value in entries.items():
            store._db[key] = _v1_value(index.decode(key, value))
        store._lookup_it = None
        assert all(v[0] == 1 for v in _index_entries(store).values())
        after = {u: store.get(u) for u in store.urls()}
        with io.StringIO() as f:
            store.export_cdxj(f)
            assert f.getvalue() == cdxj_before
    assert after == before and len(after) == 3
    b = after["http://example.test/b"]
    assert b is not None and b.body == b"<p>a</p>" and b.revisit_of == a.url


def test_offsets_that_do_not_fit_the_record_fall_back_to_parsing(tmp_path: Path) -> None:
    """An entry whose offsets are off (by one byte, or past the end) still reads right."""
    with PageStore(tmp_path / "store") as store:
        cap = store.put(
            "http://example.test/x", status=200, headers=[("A", "b")], body=b"body", ip="10.0.0.1"
        )
        ((key, value),) = _index_entries(store).items()
        e = index.decode(key, value)
        data = (tmp_path / "store" / "segments" / e.segment).read_bytes()[
            e.offset : e.offset + e.length
        ]
        bad = [
            (e.raw_len - 1, e.http_start, e.body_start),
            (e.raw_len, e.http_start + 1, e.body_start),
            (e.raw_len, e.http_start, e.body_start - 1),
            (e.raw_len, e.http_start, e.raw_len + 10),
        ]
        for raw_len, http_start, body_start in bad:
            assert gzipmembers.slice_record(data, raw_len, http_start, body_start) is None
            store._db[key] = index.encode_value(
                status=e.status,
                segment=e.segment,
                offset=e.offset,
                length=e.length,
                digest=e.digest,
                mime=e.mime,
                truncated=e.truncated,
                revisit_of=None,
                orig_micros=0,
                raw_len=raw_len,
                http_start=http_start,
                body_start=body_start,
            )
            store._lookup_it = None
            got = store.get(cap.url)
            assert got is not None
            assert (got.body, got.headers, got.ip) == (b"body", [("A", "b")], "10.0.0.1")


def test_a_non_http_url_is_read_through_warcio(tmp_path: Path) -> None:
    """warcio parses HTTP headers only for http(s) records: so must we."""
    with PageStore(tmp_path / "store") as store:
        store.put("ftp://example.test/f", status=200, headers=[("A", "b")], body=b"data")
        got = store.get("ftp://example.test/f")
        assert got is not None and got.segment
        data = (tmp_path / "store" / "segments" / got.segment).read_bytes()
        expected = _warcio(data[got.offset : got.offset + got.length])
        assert (got.headers, got.ip, got.body) == expected
