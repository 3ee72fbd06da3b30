"""The page index's value codec (streams/store/index.py)."""

from __future__ import annotations

import os

from streams.store import index


def test_index_value_codec_round_trip() -> None:
    key = index.make_key(b"http://k.example/", 123_456_789)
    val = index.encode_value(
        status=206,
        segment="seine-20240101000000-00001.warc.gz",
        offset=1 << 40,
        length=12345,
        digest="sha1:ABC",
        mime="text/html",
        truncated=True,
        revisit_of="http://o.example/",
        orig_micros=42,
        raw_len=70_000,
        http_start=400,
        body_start=650,
    )
    e = index.decode(key, val)
    assert (e.raw_len, e.http_start, e.body_start) == (70_000, 400, 650)
    assert e.digest == "sha1:ABC" and e.mime == "text/html" and e.near_duplicate_of is None
    assert e.url == "http://k.example/" and e.micros == 123_456_789 and e.status == 206
    assert e.offset == 1 << 40 and e.length == 12345 and e.truncated
    assert e.revisit_of == "http://o.example/" and e.orig_micros == 42
    assert os.path.basename(e.segment) == e.segment
