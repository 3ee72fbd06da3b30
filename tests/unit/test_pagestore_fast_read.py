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

from streams.core.pagestore import PageStore, _parse_member

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
        revisit = store.put_revisit(
            "http://example.test/copy",
            original_url=original.url,
            original_digest=original.digest,
            original_date=original.fetched_at,
            status=200,
            headers=headers,
            ip=ip,
        )
        store.flush()
        for cap in (capture, revisit):
            raw = (tmp_path / "store" / "segments" / cap.segment).read_bytes()
            data = raw[cap.offset : cap.offset + cap.length]
            fast = _parse_member(data)
            assert fast is not None, f"{name}: the fast path refused our own record"
            assert (fast.headers, fast.ip, fast.body) == _warcio(data)
        got = store.get(capture.url)
        assert got is not None and got.body == body
        copy = store.get("http://example.test/copy")
        assert copy is not None and copy.body == body and copy.revisit_of == original.url
