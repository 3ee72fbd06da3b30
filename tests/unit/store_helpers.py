"""What the page store's tests (tests/unit/test_store_*.py) share: paths of the
conformance data and of warcio's CLI, and readers of the segments a store wrote."""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

CONFORMANCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "conformance"
CHECKLIST = CONFORMANCE / "warc11_record_checklist.json"
WARCIO = Path(sys.executable).parent / "warcio"

HTML = [("Content-Type", "text/html; charset=utf-8"), ("Server", "test")]


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def segments(root: Path) -> list[Path]:
    return sorted((root / "segments").glob("*.warc.gz"))


def records(path: Path) -> list[tuple[int, Any, bytes]]:
    """(offset, record headers, raw payload) of every record, read sequentially."""
    out = []
    with path.open("rb") as f:
        it = ArchiveIterator(f)
        for rec in it:
            payload = rec.raw_stream.read()
            out.append((it.get_record_offset(), rec, payload))
    return out
