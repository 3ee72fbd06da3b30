"""CDXJ export: one sorted line per capture, the index pywb and other replay tools read.

Lines are ``SURT-key 14-digit-timestamp {json}``, built from the page index alone (no
segment reads).  The index is URL-ordered, not SURT-ordered, so lines are sorted in
chunks spilled to temp files and merged: bounded memory.  Only the standard library
(the index is any rocksdict ``Rdict`` in raw mode).
"""

from __future__ import annotations

import heapq
import json
import tempfile
from datetime import timedelta
from typing import IO, Any, TextIO

from streams.store.index import Entry, decode
from streams.store.surt import surt
from streams.store.warc import EPOCH

_CDXJ_SORT_CHUNK = 500_000  # lines sorted in memory before spilling to a temp file


def export(db: Any, out: TextIO) -> int:
    """Write a sorted CDXJ line for every entry of the index ``db``; return the count."""
    chunks: list[IO[str]] = []
    buf: list[str] = []
    n = 0
    try:
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            buf.append(cdxj_line(decode(bytes(it.key()), bytes(it.value()))))
            n += 1
            if len(buf) >= _CDXJ_SORT_CHUNK:
                chunks.append(_spill(buf))
                buf = []
            it.next()
        buf.sort()
        if not chunks:
            out.writelines(buf)
        else:
            chunks.append(_spill(buf))
            out.writelines(heapq.merge(*chunks))
    finally:
        for c in chunks:
            c.close()
    return n


def cdxj_line(e: Entry) -> str:
    """The CDXJ line of one capture: digest without ``sha1:``, offset and length of its
    gzip member, filename the segment's name (pywb resolves it against its archive
    paths)."""
    digest = e.digest.split(":", 1)[1] if ":" in e.digest else e.digest
    block = {
        "url": e.url,
        "mime": e.mime,
        "status": str(e.status),
        "digest": digest,
        "length": str(e.length),
        "offset": str(e.offset),
        "filename": e.segment,
    }
    return f"{surt(e.url)} {_ts14(e.micros)} {json.dumps(block)}\n"


def _ts14(micros: int) -> str:
    return (EPOCH + timedelta(microseconds=micros)).strftime("%Y%m%d%H%M%S")


def _spill(lines: list[str]) -> IO[str]:
    lines.sort()
    f = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
    f.writelines(lines)
    f.seek(0)
    return f
