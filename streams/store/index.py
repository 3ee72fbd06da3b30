"""The page index's keys and values: how a capture is found and where its record lies.

The index (a RocksDB database in raw mode, opened by ``streams.store.pagestore``) maps
``url + b"\\x00" + big-endian uint64 microseconds`` to a compact record pointer.  URLs
never contain C0 control characters (``url_bytes`` rejects them), so all captures of one
URL are contiguous and time-ordered.  Only the standard library.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple


class Entry(NamedTuple):
    """Decoded index value plus its key; enough to build a CDXJ line without I/O."""

    url: str
    micros: int
    status: int
    segment: str
    offset: int
    length: int
    digest: str
    mime: str
    truncated: bool
    revisit_of: str | None
    orig_micros: int
    near_duplicate_of: str | None = None
    # Layout of the inflated record (index version 2; all 0 for version 1 entries).
    raw_len: int = 0
    http_start: int = 0
    body_start: int = 0


_CONTROL_RE = re.compile(r"[\x00-\x1f]")
MAX_MICROS = (1 << 64) - 1  # seek bound: above every valid key

# Version 1 (stores written before the read-path layout was kept in the index):
# version, flags, status, offset, length, original fetch time (micros; revisits only),
# then segment, digest, mime, other URL, each as a uint16 length and UTF-8 bytes.
_VAL_HEAD = struct.Struct("<BBHQQQ")
_VAL_VERSION = 1
# Version 2 adds where the parts of the inflated record lie, so a read slices the record
# instead of parsing its WARC and HTTP headers (``gzipmembers.slice_record``), and moves
# the four string lengths into the fixed head, so decoding is one unpack and four slices:
# version, flags, status, offset, length, original fetch time, inflated record size,
# start of the HTTP block, start of the payload, then the four string lengths.
VAL_HEAD2 = struct.Struct("<BBHQIQIIIHHHH")
VAL_VERSION2 = 2
FLAG_TRUNCATED = 1
FLAG_REVISIT = 2
FLAG_NEAR_DUP = 4  # a response whose page near-duplicates the URL in the last string
_STR_LEN = struct.Struct("<H")
MICROS = struct.Struct(">Q")
_U32_MAX = 0xFFFFFFFF


def make_key(url_b: bytes, micros: int) -> bytes:
    """The index key of the capture of ``url_b`` fetched at ``micros``."""
    return url_b + b"\x00" + MICROS.pack(micros)


def key_prefix(url_b: bytes) -> bytes:
    """What every index key of ``url_b``'s captures starts with."""
    return url_b + b"\x00"


def encode_value(
    *,
    status: int,
    segment: str,
    offset: int,
    length: int,
    digest: str,
    mime: str,
    truncated: bool,
    revisit_of: str | None,
    orig_micros: int,
    near_duplicate_of: str | None = None,
    raw_len: int = 0,
    http_start: int = 0,
    body_start: int = 0,
) -> bytes:
    """Version 2 index value; ``raw_len`` 0 means "layout unknown" (reads parse)."""
    flags = (FLAG_TRUNCATED if truncated else 0) | (FLAG_REVISIT if revisit_of is not None else 0)
    if near_duplicate_of is not None and revisit_of is None:
        flags |= FLAG_NEAR_DUP
    if not (0 <= length <= _U32_MAX and 0 <= raw_len <= _U32_MAX):
        # One gzip member per page: bodies are bounded far below this by the fetcher.
        raise ValueError(f"record too large for the page index: {length} bytes")
    strs = [
        s.encode("utf-8", "surrogateescape")[:0xFFFF]
        for s in (segment, digest, mime, revisit_of or near_duplicate_of or "")
    ]
    head = VAL_HEAD2.pack(
        VAL_VERSION2,
        flags,
        status,
        offset,
        length,
        orig_micros,
        raw_len,
        http_start,
        body_start,
        *map(len, strs),
    )
    return head + b"".join(strs)


def decode(key: bytes, value: bytes) -> Entry:
    """The entry of an index key and value, of either value version."""
    if value[0] != VAL_VERSION2:
        return _decode_v1(key, value)
    (
        _v,
        flags,
        status,
        offset,
        length,
        orig_micros,
        raw_len,
        http_start,
        body_start,
        n_seg,
        n_dig,
        n_mime,
        n_other,
    ) = VAL_HEAD2.unpack_from(value)
    a = VAL_HEAD2.size
    b = a + n_seg
    c = b + n_dig
    d = c + n_mime
    other = value[d : d + n_other].decode("utf-8", "surrogateescape") if n_other else None
    return Entry(
        key[:-9].decode("utf-8", "surrogateescape"),
        MICROS.unpack_from(key, len(key) - 8)[0],
        status,
        value[a:b].decode("utf-8", "surrogateescape"),
        offset,
        length,
        value[b:c].decode("utf-8", "surrogateescape"),
        value[c:d].decode("utf-8", "surrogateescape"),
        bool(flags & FLAG_TRUNCATED),
        other if flags & FLAG_REVISIT else None,
        orig_micros,
        other if flags & FLAG_NEAR_DUP else None,
        raw_len,
        http_start,
        body_start,
    )


def _decode_v1(key: bytes, value: bytes) -> Entry:
    version, flags, status, offset, length, orig_micros = _VAL_HEAD.unpack_from(value, 0)
    if version != _VAL_VERSION:
        raise ValueError(f"unknown page index value version {version}")
    pos = _VAL_HEAD.size
    strs: list[str] = []
    for _ in range(4):
        (n,) = _STR_LEN.unpack_from(value, pos)
        pos += _STR_LEN.size
        strs.append(value[pos : pos + n].decode("utf-8", "surrogateescape"))
        pos += n
    segment, digest, mime, other_url = strs
    return Entry(
        url=key[:-9].decode("utf-8", "surrogateescape"),
        micros=MICROS.unpack_from(key, len(key) - 8)[0],
        status=status,
        segment=segment,
        offset=offset,
        length=length,
        digest=digest,
        mime=mime,
        truncated=bool(flags & FLAG_TRUNCATED),
        revisit_of=other_url if flags & FLAG_REVISIT else None,
        orig_micros=orig_micros,
        near_duplicate_of=other_url if flags & FLAG_NEAR_DUP else None,
    )


def url_bytes(url: str) -> bytes:
    """Index key bytes of a URL; rejects what would break key ordering or WARC headers."""
    if not isinstance(url, str) or not url:
        raise ValueError("url must be a non-empty str")
    if _CONTROL_RE.search(url):
        raise ValueError(f"url contains control characters: {url!r}")
    return url.encode("utf-8", "surrogateescape")
