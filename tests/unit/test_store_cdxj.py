"""CDXJ export (streams/store/cdxj.py): sorted lines whose offsets address records."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from streams.store import cdxj
from streams.store.pagestore import PageStore
from streams.store.surt import surt
from tests.unit.store_helpers import (
    HTML,
)


@pytest.fixture
def store(tmp_path: Path):
    with PageStore(tmp_path / "ps") as s:
        yield s


def test_export_cdxj(tmp_path: Path) -> None:
    root = tmp_path / "ps"
    with PageStore(root, segment_max_bytes=2000) as s:
        for u in [
            "http://www.b.example/Z",
            "https://a.example/x?b=2&a=1",
            "http://c.example:8080/",
        ]:
            s.put(u, status=200, headers=HTML, body=u.encode(), fetched_at=1_700_000_000.5)
        o = s.put("http://a.example/", status=200, headers=[], body=b"o", fetched_at=1.0)
        s.put_revisit(
            "http://a.example/",
            original_url=o.url,
            original_digest=o.digest,
            original_date=o.fetched_at,
            status=200,
            headers=[],
            fetched_at=2.0,
        )
        buf = io.StringIO()
        n = s.export_cdxj(buf)
    lines = buf.getvalue().splitlines()
    assert n == len(lines) == 5
    assert lines == sorted(lines)
    keys = [ln.split(" ", 2)[0] for ln in lines]
    assert keys == [
        "example,a)/",
        "example,a)/",
        "example,a)/x?a=1&b=2",
        "example,b)/z",
        "example,c:8080)/",
    ]
    for ln in lines:
        key, ts, js = ln.split(" ", 2)
        assert re.fullmatch(r"\d{14}", ts)
        block = json.loads(js)
        assert set(block) == {"url", "mime", "status", "digest", "length", "offset", "filename"}
        assert surt(block["url"]) == key
        assert re.fullmatch(r"[A-Z2-7]{32}", block["digest"])
        # offset/length address exactly the record in that file.
        raw = (root / "segments" / block["filename"]).read_bytes()
        member = raw[int(block["offset"]) : int(block["offset"]) + int(block["length"])]
        rec = next(iter(ArchiveIterator(io.BytesIO(member))))
        assert rec.rec_headers.get_header("WARC-Target-URI") == block["url"]
        assert rec.rec_headers.get_header("WARC-Payload-Digest") == "sha1:" + block["digest"]
        assert block["status"] == "200"
    first, second = (json.loads(ln.split(" ", 2)[2]) for ln in lines[:2])
    assert lines[0].split(" ")[1] == "19700101000001" and first["mime"] == "unk"
    assert second["mime"] == "warc/revisit"
    assert json.loads(lines[2].split(" ", 2)[2])["mime"] == "text/html"
    assert lines[2].split(" ")[1] == "20231114221320"


def test_export_cdxj_external_merge_matches_in_memory(tmp_path: Path, monkeypatch) -> None:
    with PageStore(tmp_path / "ps") as s:
        s.put_many(
            [
                {
                    "url": f"http://h{i % 7}.example/p{i}",
                    "status": 200,
                    "headers": [],
                    "body": b"%d" % i,
                    "fetched_at": 1e9 + i,
                }
                for i in range(40)
            ]
        )
        whole = io.StringIO()
        assert s.export_cdxj(whole) == 40
        monkeypatch.setattr(cdxj, "_CDXJ_SORT_CHUNK", 6)
        merged = io.StringIO()
        assert s.export_cdxj(merged) == 40
    assert merged.getvalue() == whole.getvalue()
    assert whole.getvalue().splitlines() == sorted(whole.getvalue().splitlines())


def test_export_cdxj_empty(store: PageStore) -> None:
    buf = io.StringIO()
    assert store.export_cdxj(buf) == 0 and buf.getvalue() == ""
