"""WARC records the page store writes (streams/store/warc.py): conformance to WARC 1.1,
digests, and the hand-written response records against warcio's, byte for byte."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from streams.store import warc
from streams.store.pagestore import PageStore
from tests.unit.store_helpers import (
    CHECKLIST,
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


# ----------------------------------------------------------- WARC conformance


def fill(s: PageStore) -> None:
    o = s.put("http://c.example/", status=200, headers=HTML, body=b"<p>c</p>", ip="1.2.3.4")
    s.put("http://c.example/t", status=200, headers=HTML, body=b"trunc", truncated=True)
    s.put("http://c.example/e", status=301, headers=[("Location", "/")], body=b"")
    s.put_revisit(
        "http://c.example/",
        original_url=o.url,
        original_digest=o.digest,
        original_date=o.fetched_at,
        status=200,
        headers=HTML,
    )
    s.put(
        "http://c.example/near",
        status=200,
        headers=HTML,
        body=b"<p>c, seen 2 times</p>",
        near_duplicate_of=o.url,
        near_distance=2,
        simhash=0xFEDC_BA98_7654_3210,
    )


def test_warcio_check_passes(tmp_path: Path) -> None:
    with PageStore(tmp_path / "ps", segment_max_bytes=800) as s:
        fill(s)
    segs = segments(tmp_path / "ps")
    assert len(segs) > 1
    proc = subprocess.run(
        [str(WARCIO), "check", "-v", *map(str, segs)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "digest pass" in proc.stdout


def test_every_record_meets_checklist(tmp_path: Path) -> None:
    if not CHECKLIST.is_file():
        pytest.skip(f"conformance checklist not found at {CHECKLIST}")
    checklist = json.loads(CHECKLIST.read_text())
    mandatory = [f.split(" ", 1)[0] for f in checklist["mandatory_all_records"]]
    assert mandatory == ["WARC-Record-ID", "Content-Length", "WARC-Date", "WARC-Type"]
    date_re = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
    with PageStore(tmp_path / "ps") as s:
        fill(s)
    seen: dict[str, int] = {}
    ids: set[str] = set()
    last_response_id = None
    for seg in segments(tmp_path / "ps"):
        with seg.open("rb") as f:
            assert f.read(2) == b"\x1f\x8b"
        with gzip.open(seg) as g:
            assert g.read(10) == b"WARC/1.1\r\n"
        with seg.open("rb") as f:
            for rec in ArchiveIterator(f, check_digests=True):
                h = rec.rec_headers
                rec.content_stream().read()
                assert h.protocol == "WARC/1.1"
                names = [n.lower() for n, _ in h.headers]
                assert len(names) == len(set(names)), f"repeated field in {h.headers}"
                for name in mandatory:
                    assert h.get_header(name) is not None, (name, rec.rec_type)
                assert date_re.match(h.get_header("WARC-Date"))
                rid = h.get_header("WARC-Record-ID")
                assert re.fullmatch(r"<[^\s<>]+>", rid) and rid not in ids
                ids.add(rid)
                assert int(h.get_header("Content-Length")) == rec.length
                seen[rec.rec_type] = seen.get(rec.rec_type, 0) + 1
                if rec.rec_type == "warcinfo":
                    assert h.get_header("WARC-Target-URI") is None  # forbidden
                    assert h.get_header("WARC-Filename") == seg.name
                    continue
                assert h.get_header("WARC-Target-URI").startswith("http://c.example/")
                if rec.rec_type == "metadata":  # a near-duplicate's mark, after its response
                    assert h.get_header("Content-Type") == "application/warc-fields"
                    assert h.get_header("WARC-Refers-To") == last_response_id
                    assert h.get_header("WARC-Target-URI") == "http://c.example/near"
                    assert h.get_header("WARC-Block-Digest").startswith("sha1:")
                    assert rec.digest_checker.passed is not False, rec.digest_checker.problems
                    continue
                assert h.get_header("Content-Type") == "application/http;msgtype=response"
                assert h.get_header("WARC-Payload-Digest").startswith("sha1:")
                assert h.get_header("WARC-Block-Digest").startswith("sha1:")
                if rec.rec_type == "response":
                    last_response_id = rid
                    assert rec.digest_checker.passed is True, rec.digest_checker.problems
                    assert rec.http_headers.protocol == "HTTP/1.1"
                else:
                    assert rec.rec_type == "revisit"
                    assert h.get_header("WARC-Refers-To-Target-URI") == "http://c.example/"
                    assert date_re.match(h.get_header("WARC-Refers-To-Date"))
    assert seen == {"warcinfo": 1, "response": 4, "revisit": 1, "metadata": 1}


def test_payload_digests_verify(store: PageStore) -> None:
    bodies = [b"", b"a", bytes(range(256)), b"<html>" * 500]
    for i, b in enumerate(bodies):
        store.put(f"http://d.example/{i}", status=200, headers=HTML, body=b)
    n = 0
    for _, rec, payload in records(segments(store.path)[0]):
        if rec.rec_type == "response":
            assert rec.rec_headers.get_header("WARC-Payload-Digest") == sha1_b32(payload)
            assert payload == bodies[n]
            n += 1
    assert n == len(bodies)


def test_ip_and_truncated_fields(store: PageStore) -> None:
    store.put("http://ip.example/", status=200, headers=[], body=b"x", ip="::1", truncated=True)
    store.put("http://noip.example/", status=200, headers=[], body=b"x")
    recs = {
        r.rec_headers.get_header("WARC-Target-URI"): r
        for _, r, _ in records(segments(store.path)[0])
    }
    a, b = recs["http://ip.example/"].rec_headers, recs["http://noip.example/"].rec_headers
    assert a.get_header("WARC-IP-Address") == "::1" and a.get_header("WARC-Truncated") == "length"
    assert b.get_header("WARC-IP-Address") is None and b.get_header("WARC-Truncated") is None
    assert store.get("http://noip.example/").ip is None  # type: ignore[union-attr]


# ------------------------------------------------------- hand-written records


def _warcio_response(p: Any, record_id: str) -> bytes:
    """A response record as the page store wrote it through warcio up to a154ff3 (the
    reference of the hand-written records), inflated."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=False, warc_version="1.1")
    http = StatusAndHeaders(warc.status_line(p.status), list(p.headers), protocol="HTTP/1.1")
    rec_headers = [
        ("WARC-Type", "response"),
        ("WARC-Record-ID", record_id),
        ("WARC-Date", warc.warc_date(p.micros)),
        ("WARC-Target-URI", p.url),
    ]
    if p.ip:
        rec_headers.append(("WARC-IP-Address", warc.clean_header(p.ip)))
    http.compute_headers_buffer()
    block = hashlib.sha1(http.headers_buff)
    block.update(p.body)
    rec_headers.append(("WARC-Payload-Digest", p.digest))
    rec_headers.append(
        ("WARC-Block-Digest", "sha1:" + base64.b32encode(block.digest()).decode("ascii"))
    )
    if p.truncated:
        rec_headers.append(("WARC-Truncated", "length"))
    record = writer.create_warc_record(
        p.url,
        "response",
        payload=io.BytesIO(p.body),
        length=len(p.body),
        warc_content_type=warc.MIME_HTTP_RESPONSE,
        warc_headers=StatusAndHeaders("", rec_headers, protocol="WARC/1.1"),
        http_headers=http,
    )
    writer.write_record(record)
    return buf.getvalue()


def test_response_records_are_warcio_s_byte_for_byte(tmp_path: Path) -> None:
    """The page store writes response records by hand: every byte is what warcio wrote
    (given the same record id), for bodies empty to several read buffers long, with and
    without IP, truncated, odd and non-ASCII headers and URLs, and a near-duplicate
    (whose metadata record follows)."""
    rng = random.Random(7)
    cases: list[dict[str, Any]] = [
        {"url": "http://a.example/", "status": 200, "headers": [], "body": b""},
        {
            "url": "http://a.example/big",
            "status": 404,
            "headers": [("Content-Type", "text/html; charset=utf-8"), ("X-A", "b")],
            "body": rng.randbytes(40_000),
            "ip": "127.0.0.1",
            "truncated": True,
        },
        {
            "url": "https://b.example/caf\u00e9?q=\u65e5",
            "status": 299,
            "headers": [("X-\u00c9", "v\u00e4l\r\nue"), ("Content-Encoding", "gzip")],
            "body": b"<p>x" * 5000,
            "ip": "::1",
        },
        {
            "url": "http://c.example/near",
            "status": 200,
            "headers": [("Content-Length", "999"), ("Transfer-Encoding", "chunked")],
            "body": b"near",
            "near_duplicate_of": "http://c.example/orig",
            "near_distance": 2,
            "simhash": 12345,
        },
    ]
    for i, case in enumerate(cases):
        case["fetched_at"] = 1_700_000_000.25 + i
    store = PageStore(tmp_path / "s")
    captures = store.put_many([dict(c) for c in cases])
    store.close()
    for case, capture in zip(cases, captures, strict=True):
        member = (tmp_path / "s").rglob(capture.segment).__next__().read_bytes()
        stored = gzip.decompress(member[capture.offset : capture.offset + capture.length])
        kw = dict(case)
        url = kw.pop("url")
        p = warc.Pending(
            url=url,
            url_b=url.encode(),
            micros=warc.to_micros(kw["fetched_at"]),
            status=kw["status"],
            headers=warc.normalize_headers(kw["headers"], len(kw["body"])),
            body=kw["body"],
            ip=kw.get("ip"),
            digest=warc.payload_digest(kw["body"]),
            truncated=bool(kw.get("truncated")),
            revisit_of=None,
            orig_micros=0,
        )
        found = re.search(rb"WARC-Record-ID: (<urn:uuid:[0-9a-f-]+>)\r\n", stored)
        assert found is not None
        assert stored == _warcio_response(p, found[1].decode())
    with (tmp_path / "s").rglob(captures[0].segment).__next__().open("rb") as f:
        types = [r.rec_type for r in ArchiveIterator(f, check_digests="raise")]
    assert types == ["warcinfo", "response", "response", "response", "response", "metadata"]


def test_record_header_helpers_match_the_library_forms() -> None:
    """The hand-made WARC-Date, base32 digest and record id are what datetime, base64
    and uuid give (they replaced them on the write path for speed)."""
    import uuid
    from datetime import UTC, datetime, timedelta

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rng = random.Random(5)
    micros = [0, 1, 999_999, 1_000_000, 1_700_000_000_123_456, warc.MAX_TS_MICROS]
    micros += [rng.randrange(warc.MAX_TS_MICROS) for _ in range(300)]
    for m in micros:
        expected = (epoch + timedelta(microseconds=m)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert warc.warc_date(m) == expected
    for data in [b"", b"x", *(rng.randbytes(rng.randrange(100)) for _ in range(300))]:
        digest = hashlib.sha1(data).digest()
        assert warc.sha1_base32(digest) == base64.b32encode(digest).decode("ascii")
        assert warc.payload_digest(data) == sha1_b32(data)
    ids = {warc.record_id() for _ in range(300)}
    assert len(ids) == 300
    for rid in ids:
        assert rid.startswith("<urn:uuid:") and rid.endswith(">")
        parsed = uuid.UUID(rid[len("<urn:uuid:") : -1])
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert rid == f"<urn:uuid:{parsed}>"
