"""Page store: every stored page retrievable by URL, kept as WARC 1.1 plus a RocksDB index.

Why this shape
--------------
* **WARC segments** (``segments/seine-<yyyymmddhhmmss>-<seq>-<writer>-<random>.warc.gz``)
  are the archival format every web-archive tool reads (warcio, pywb, OpenWayback,
  ...), so a crawl can be replayed or handed to someone else without this code.  Each
  record is its own gzip member, which makes ``(offset, length)`` address exactly one
  record: a reader seeks,
  reads ``length`` bytes and decompresses only that.  Every segment starts with a
  ``warcinfo`` record so it is self-describing on its own.  A segment is closed once it
  has passed ``segment_max_bytes`` and the next record opens a new one; a process that
  re-opens the store never appends to an existing segment (the tail of a segment written
  by a crashed process may be a torn gzip member, and appending after it would hide every
  later record from sequential readers).  A segment name is unique across processes and
  machines, not only within one store: ``<writer>`` is the writer's id (the worker's,
  or host name and pid by default) and ``<random>`` 32 random bits, so segments of many
  workers can share one directory or bucket, and a CDXJ ``filename`` names one file.
* **The index** (``index/``, a RocksDB database through rocksdict in raw mode) maps
  ``url + b"\\x00" + big-endian uint64 microseconds`` to a compact record pointer.  URLs
  never contain C0 control characters (we reject them), so all captures of one URL are
  contiguous and time-ordered: the latest capture is one ``seek_for_prev``.  The pointer
  (index value version 2) also keeps where the record's parts lie once inflated -- its
  size, the start of the HTTP block and of the payload -- so a read inflates the one
  gzip member into a buffer of the right size and slices it, checking only that the
  offsets fit this record, instead of parsing WARC and HTTP headers (``_slice_record``).
  Entries of version 1 (stores written before) have no offsets and are read by parsing.
* **Write order** is WARC bytes first (flushed to the OS), index second.  A crash between
  the two leaves an orphan WARC record, never an index entry pointing at missing bytes.
  ``flush()`` additionally fsyncs the segment and syncs the RocksDB WAL: call it before
  committing Kafka offsets when durability against power loss matters.
* **Re-delivery is idempotent**: the index key is ``(url, fetched_at)``, so a Kafka
  message replayed after a crash overwrites the same index entries instead of creating
  phantom captures (the first copy's WARC records stay in the segment as orphans).

Choices worth knowing about
---------------------------
* **Decoded bodies and the HTTP block.**  The fetcher hands us the entity body *after*
  transfer- and content-decoding.  Storing ``Content-Encoding: gzip`` next to an already
  decoded body would make the record lie (replay tools would try to gunzip plain HTML,
  and the WARC payload digest would not match what a reader decodes).  So, in the stored
  HTTP block, a non-identity ``Content-Encoding`` is renamed ``X-Seine-Orig-Content-
  Encoding``, ``Transfer-Encoding`` is renamed ``X-Seine-Orig-Transfer-Encoding``, a
  ``Content-Length`` that does not match the stored body is renamed ``X-Seine-Orig-
  Content-Length``, and if any of that happened a correct ``Content-Length`` is appended.
  Nothing is lost and the record is self-consistent.  A response that needs none of this
  is stored exactly as given.  ``Capture.headers`` returns the *stored* headers.
* **Header hygiene.**  CR/LF inside header names or values is replaced by a space
  (header injection would corrupt the record); non-ASCII characters are percent-encoded
  as UTF-8 (surrogate-escaped bytes from aiohttp are kept byte-exact), because the HTTP
  block must be ASCII.
* **``get(url, at=T)``** returns the latest capture fetched at or before ``T`` (the page
  "as of" T, like a point-in-time read), or ``None`` if the first capture is after ``T``.
* **Revisits.**  ``put_revisit`` writes a ``revisit`` record (profile
  identical-payload-digest, WARC 1.1) with only the HTTP headers.  ``get`` follows
  ``revisit_of`` to the original capture (the latest capture of ``original_url`` at or
  before ``original_date`` with the same payload digest, or any capture of it with that
  digest) and returns *its* body.  If the original is missing the body is ``b""`` and a
  warning is logged.  The ``Capture`` *returned by* ``put_revisit``/``put_many`` for a
  revisit has ``body=b""``: resolving it would cost a read per duplicate on the hot path.
* **Not thread-safe.**  One ``PageStore`` per thread (or an external lock).  One writer
  per directory (RocksDB's lock enforces it); any number of ``read_only=True`` readers,
  each seeing the index as of the moment it was opened.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import io
import json
import logging
import os
import re
import secrets
import socket
import struct
import tempfile
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple, TextIO
from urllib.parse import SplitResultBytes, quote_from_bytes, unquote_to_bytes

from rocksdict import AccessType, BlockBasedOptions, Cache, Options, Rdict, WriteBatch
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.utils import BUFF_SIZE as _WARCIO_BUFF_SIZE
from warcio.warcwriter import WARCWriter

__all__ = ["Capture", "PageStore", "ReadOnlyError", "surt"]

_inflate: Any = zlib
#: Compressor of records and its level. ISA-L at level 3 deflates an 8 KB page in
#: ~60 us against zlib level 6's ~200 us (a third of the write path's CPU), to the
#: same size (3,325 vs 3,331 bytes on the demo web's pages); the output is plain gzip.
#: Level 2 (session 8) takes about half of level 3's time for the same size on the
#: bench's pages (40 vs 71 us a page) and 2.4% more on real HTML (400 documentation
#: pages of 29 KB: 93 vs 219 us, ratio 0.291 vs 0.284); level 1 is as fast as 2 and
#: larger. The records themselves (inflated) are the same bytes at any level.
_deflate: Any = zlib
_DEFLATE_LEVEL = 6
try:  # ISA-L inflates a record about twice as fast as zlib (measured: 20 vs 39 us)
    from isal import isal_zlib

    _inflate = isal_zlib
    _deflate, _DEFLATE_LEVEL = isal_zlib, 2
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    pass
_INFLATE_ERRORS: tuple[type[BaseException], ...] = (zlib.error, _inflate.error)

log = logging.getLogger(__name__)

_SOFTWARE = "seine/0.1.0"
# seine-<yyyymmddhhmmss>-<seq>[-<writer>-<random hex>].warc.gz (older stores lack the tail)
_SEGMENT_RE = re.compile(r"^seine-(\d{14})-(\d+)(?:-([A-Za-z0-9._]+)-([0-9a-f]+))?\.warc\.gz$")
_WRITER_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._]+")
_MIME_HTTP_RESPONSE = "application/http;msgtype=response"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MICROS = (1 << 64) - 1  # seek bound: above every valid key
# Latest representable WARC-Date (9999-12-31T23:59:59.999999Z).
_MAX_TS_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _EPOCH) // timedelta(
    microseconds=1
)
_INDEX_CACHE_BYTES = 64 << 20  # RocksDB block cache of the index, per store
_READ_HANDLES = 64  # open segment file descriptors kept for reads (LRU)
_READ_BLOCK = 1 << 18  # warcio read chunk: one record member is usually one chunk
_CDXJ_SORT_CHUNK = 500_000  # lines sorted in memory before spilling to a temp file
_REVISIT_DEPTH = 8  # how many revisit->original hops get() follows before giving up


class ReadOnlyError(PermissionError):
    """Raised when writing to a store opened with ``read_only=True``."""


@dataclass(frozen=True)
class Capture:
    """One stored fetch of a URL, with where it lives in the WARC segments.

    ``headers`` are the HTTP headers as stored (see the module docstring for the
    Content-Encoding rename).  For a revisit, ``body`` is the original capture's body and
    ``revisit_of`` the original's URL; ``digest`` is the shared payload digest.
    """

    url: str
    fetched_at: float
    status: int
    headers: list[tuple[str, str]]
    body: bytes = field(repr=False)
    ip: str | None
    digest: str
    segment: str
    offset: int
    length: int
    truncated: bool
    revisit_of: str | None
    near_duplicate_of: str | None = None


class _Entry(NamedTuple):
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


# --------------------------------------------------------------------------- index codec

# Version 1 (stores written before the read-path layout was kept in the index):
# version, flags, status, offset, length, original fetch time (micros; revisits only),
# then segment, digest, mime, other URL, each as a uint16 length and UTF-8 bytes.
_VAL_HEAD = struct.Struct("<BBHQQQ")
_VAL_VERSION = 1
# Version 2 adds where the parts of the inflated record lie, so a read slices the record
# instead of parsing its WARC and HTTP headers (see ``_slice_record``), and moves the
# four string lengths into the fixed head, so decoding is one unpack and four slices:
# version, flags, status, offset, length, original fetch time, inflated record size,
# start of the HTTP block, start of the payload, then the four string lengths.
_VAL_HEAD2 = struct.Struct("<BBHQIQIIIHHHH")
_VAL_VERSION2 = 2
_FLAG_TRUNCATED = 1
_FLAG_REVISIT = 2
_FLAG_NEAR_DUP = 4  # a response whose page near-duplicates the URL in the last string
_STR_LEN = struct.Struct("<H")
_MICROS = struct.Struct(">Q")
_U32_MAX = 0xFFFFFFFF


def _key(url_b: bytes, micros: int) -> bytes:
    return url_b + b"\x00" + _MICROS.pack(micros)


def _key_prefix(url_b: bytes) -> bytes:
    return url_b + b"\x00"


def _encode_value(
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
    flags = (_FLAG_TRUNCATED if truncated else 0) | (_FLAG_REVISIT if revisit_of is not None else 0)
    if near_duplicate_of is not None and revisit_of is None:
        flags |= _FLAG_NEAR_DUP
    if not (0 <= length <= _U32_MAX and 0 <= raw_len <= _U32_MAX):
        # One gzip member per page: bodies are bounded far below this by the fetcher.
        raise ValueError(f"record too large for the page index: {length} bytes")
    strs = [
        s.encode("utf-8", "surrogateescape")[:0xFFFF]
        for s in (segment, digest, mime, revisit_of or near_duplicate_of or "")
    ]
    head = _VAL_HEAD2.pack(
        _VAL_VERSION2,
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


def _decode(key: bytes, value: bytes) -> _Entry:
    if value[0] != _VAL_VERSION2:
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
    ) = _VAL_HEAD2.unpack_from(value)
    a = _VAL_HEAD2.size
    b = a + n_seg
    c = b + n_dig
    d = c + n_mime
    other = value[d : d + n_other].decode("utf-8", "surrogateescape") if n_other else None
    return _Entry(
        key[:-9].decode("utf-8", "surrogateescape"),
        _MICROS.unpack_from(key, len(key) - 8)[0],
        status,
        value[a:b].decode("utf-8", "surrogateescape"),
        offset,
        length,
        value[b:c].decode("utf-8", "surrogateescape"),
        value[c:d].decode("utf-8", "surrogateescape"),
        bool(flags & _FLAG_TRUNCATED),
        other if flags & _FLAG_REVISIT else None,
        orig_micros,
        other if flags & _FLAG_NEAR_DUP else None,
        raw_len,
        http_start,
        body_start,
    )


def _decode_v1(key: bytes, value: bytes) -> _Entry:
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
    return _Entry(
        url=key[:-9].decode("utf-8", "surrogateescape"),
        micros=_MICROS.unpack_from(key, len(key) - 8)[0],
        status=status,
        segment=segment,
        offset=offset,
        length=length,
        digest=digest,
        mime=mime,
        truncated=bool(flags & _FLAG_TRUNCATED),
        revisit_of=other_url if flags & _FLAG_REVISIT else None,
        orig_micros=orig_micros,
        near_duplicate_of=other_url if flags & _FLAG_NEAR_DUP else None,
    )


# --------------------------------------------------------------------------- small helpers

_CONTROL_RE = re.compile(r"[\x00-\x1f]")
_CRLF_RE = re.compile(r"[\r\n]")
# Every printable ASCII character passes through; only non-ASCII is percent-encoded.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F)) + "\t"


def _url_bytes(url: str) -> bytes:
    """Index key bytes of a URL; rejects what would break key ordering or WARC headers."""
    if not isinstance(url, str) or not url:
        raise ValueError("url must be a non-empty str")
    if _CONTROL_RE.search(url):
        raise ValueError(f"url contains control characters: {url!r}")
    return url.encode("utf-8", "surrogateescape")


def _to_micros(ts: float) -> int:
    micros = round(ts * 1_000_000)
    if not 0 <= micros <= _MAX_TS_MICROS:
        raise ValueError(f"timestamp out of range: {ts!r}")
    return int(micros)


def _micros_to_dt(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _warc_date(micros: int) -> str:
    """W3C-ISO8601 UTC with microseconds (WARC 1.1 allows 1-9 fraction digits)."""
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{_warc_second(seconds)}.{fraction:06d}Z"


@functools.lru_cache(maxsize=64)
def _warc_second(seconds: int) -> str:
    """A WARC date to the second: the pages of a batch share a few (strftime cost
    ~3 µs a record)."""
    return (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


#: Base32 (RFC 4648) of every 10-bit value: a 20-byte sha1 digest is 16 of them.
_B32_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in _B32_ALPHABET for b in _B32_ALPHABET]


def _sha1_base32(digest: bytes) -> str:
    """``base64.b32encode(digest).decode()`` of a 20-byte digest (160 bits, no padding),
    in a third less time (base64's base32 is Python, and built for any length)."""
    n = int.from_bytes(digest, "big")
    return "".join([_B32_PAIRS[(n >> shift) & 0x3FF] for shift in range(150, -1, -10)])


def _record_id() -> str:
    """``f"<urn:uuid:{uuid.uuid4()}>"`` without building a UUID object (~2 instead of
    ~3.5 µs a record): 122 random bits, version 4, RFC 4122 variant."""
    n = int.from_bytes(os.urandom(16), "big")
    n = n & ~(0xF000 << 64 | 0xC000 << 48) | (0x4000 << 64 | 0x8000 << 48)
    h = f"{n:032x}"
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"


def _ts14(micros: int) -> str:
    return _micros_to_dt(micros).strftime("%Y%m%d%H%M%S")


def payload_digest(body: bytes) -> str:
    """The WARC payload digest of a body (sha1, base32), as the store writes it: parse
    takes it once, and it keys the hand-off, content-dedup's table and the revisit
    record, so all must agree with the store."""
    return "sha1:" + _sha1_base32(hashlib.sha1(body).digest())


#: The same, for methods whose ``payload_digest`` parameter hides the function.
_payload_digest = payload_digest


def _clean_header(s: str) -> str:
    if "\r" in s or "\n" in s:  # (two scans cost a quarter of the regex's call)
        s = _CRLF_RE.sub(" ", s)
    if s.isascii():
        return s
    return quote_from_bytes(s.encode("utf-8", "surrogateescape"), safe=_HEADER_SAFE)


def _status_line(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"{status} {phrase}"


def _normalize_headers(
    headers: list[tuple[str, str]], body_len: int | None
) -> list[tuple[str, str]]:
    """Headers for the stored HTTP block, self-consistent with a decoded body.

    ``body_len`` is None for revisits (no body in the record: only the encodings are
    renamed, Content-Length is left alone).  See the module docstring for why.
    """
    out: list[tuple[str, str]] = []
    changed = False
    for raw_name, raw_value in headers:
        name, value = _clean_header(str(raw_name)), _clean_header(str(raw_value))
        lname = name.strip().lower()
        if lname == "content-encoding" and value.strip().lower() not in ("", "identity"):
            out.append(("X-Seine-Orig-Content-Encoding", value))
            changed = True
        elif lname == "transfer-encoding":
            out.append(("X-Seine-Orig-Transfer-Encoding", value))
            changed = True
        elif lname == "content-length" and body_len is not None and value.strip() != str(body_len):
            out.append(("X-Seine-Orig-Content-Length", value))
            changed = True
        else:
            out.append((name, value))
    if changed and body_len is not None:
        out = [(n, v) for n, v in out if n.strip().lower() != "content-length"]
        out.append(("Content-Length", str(body_len)))
    return out


def _http_block(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The HTTP header block of a stored response, as warcio's ``to_ascii_bytes``."""
    text = "".join(
        ["HTTP/1.1 ", _status_line(status), "\r\n", *[f"{n}: {v}\r\n" for n, v in headers], "\r\n"]
    )
    if text.isascii():
        return text.encode("ascii")
    http = StatusAndHeaders(_status_line(status), list(headers), protocol="HTTP/1.1")
    http.compute_headers_buffer()
    return bytes(http.headers_buff)


def _mime_of(headers: list[tuple[str, str]]) -> str:
    for name, value in headers:
        if name.strip().lower() == "content-type":
            mime = value.split(";", 1)[0].strip()
            return mime or "unk"
    return "unk"


# --------------------------------------------------------------------------- SURT

_HAS_SCHEME_RE = re.compile(rb"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
_MULTI_HTTP_RE = re.compile(rb"^(https?://)+")
_URI_RE = re.compile(rb"^(?:([a-zA-Z][a-zA-Z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?")
_WWW_RE = re.compile(rb"^www\d*\.")
_DECIMAL_IP_RE = re.compile(rb"^[1-9][0-9]*(?:\.[0-9]+){0,3}$")
_OCTAL_IP_RE = re.compile(rb"^0[0-7]*(?:\.[0-7]+){0,3}$")
_SURT_SAFE = b"!\"$&'()*+,-./:;<=>?@[\\]^_`{|}~"
_PATH_SESSION_RES = (
    re.compile(rb"^(.*/)\((?:[a-z]\([0-9a-z]{24}\))+\)/([^?]+\.aspx.*)$", re.I),
    re.compile(rb"^(.*/)\([0-9a-z]{24}\)/([^?]+\.aspx.*)$", re.I),
)
_QUERY_SESSION_RES = tuple(
    re.compile(rb"^(.*)(?:" + p + rb")(?:&(.*))?$", re.I)
    for p in (
        rb"jsessionid=[0-9a-z]{32}",
        rb"phpsessid=[0-9a-z]{32}",
        rb"sid=[0-9a-z]{32}",
        rb"aspsessionid[a-z]{8}=[a-z]{24}",
        rb"cfid=[^&]+&cftoken=[^&]+",
    )
)


def _unescape_all(b: bytes) -> bytes:
    while True:
        un = unquote_to_bytes(b)
        if un == b:
            return b
        b = un


def _escape_once(b: bytes) -> bytes:
    return quote_from_bytes(b, safe=_SURT_SAFE).encode("ascii")


def _dot_segments(path: bytes) -> bytes:
    kept: list[bytes] = []
    for seg in path.split(b"/")[1:]:
        if seg == b".":
            continue
        if seg == b"..":
            if kept:
                kept.pop()
            else:
                kept.append(seg)
            continue
        kept.append(seg)
    if not kept:
        return b"/"
    return b"/" + b"".join(p + b"/" for p in kept[:-1] if p) + kept[-1]


def _numeric_host(host: bytes) -> bytes | None:
    """Dotted-quad form of an IPv4 host written as one number, octal or short form.

    ``inet_aton`` parses these forms locally, the way the resolver would, so the key never
    depends on the network.
    """
    if host.isdigit():
        return socket.inet_ntoa(struct.pack(">L", int(host) & 0xFFFFFFFF)).encode()
    if _DECIMAL_IP_RE.match(host) or _OCTAL_IP_RE.match(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host.decode("ascii"))).encode()
        except OSError:
            return None
    return None


def surt(url: str) -> str:
    """SURT key of ``url`` as pywb computes it for CDXJ lookups.

    Why our own: pywb canonicalises lookups with the ``surt`` package's default
    (Google + IA canonicalisers, no scheme); a CDXJ whose keys differ is silently
    unfindable.  This reimplements that transform without the dependency: host lower-
    cased, IDNA, ``www\\d*.`` stripped, labels reversed with commas; default port
    dropped; path unescaped, dot-segments and empty segments removed, re-escaped and
    lowercased, trailing slash dropped; query lowercased, session ids stripped, arguments
    sorted; fragment dropped.  (Unlike ``surt``, numeric/octal host forms are not resolved
    through DNS: the key must not depend on the network.)
    """
    b = url.encode("utf-8", "surrogateescape").strip()
    b = b.replace(b"\t", b"").replace(b"\r", b"").replace(b"\n", b"")
    if not b:
        return "-"
    if not _HAS_SCHEME_RE.match(b):
        b = b"http://" + b
    b = _MULTI_HTTP_RE.sub(lambda m: m.group(1), b)
    m = _URI_RE.match(b)
    assert m is not None  # the pattern matches any string
    scheme = m.group(1) or b""
    netloc = (m.group(2) or b"").rstrip(b":")
    path = m.group(3) or b""
    query = m.group(4)

    split = SplitResultBytes(scheme, netloc, path, b"", b"")
    host = split.hostname or b""
    try:
        port = split.port or None
    except ValueError:
        port = None
    if scheme.startswith(b"http") and not host and path:
        head, _, tail = path.lstrip(b"/").partition(b"/")
        host, path = head, b"/" + tail

    if query:
        query = _escape_once(_unescape_all(query))
    if host:
        host = _unescape_all(host)
        if not host.isascii():
            with contextlib.suppress(ValueError):  # not IDNA-encodable: keep escaped bytes
                host = host.decode("utf-8", "ignore").encode("idna")
        host = host.replace(b"..", b".").strip(b".")
        host = _numeric_host(host) or _escape_once(host).lower()
        if scheme != b"dns":
            host = _WWW_RE.sub(b"", host, count=1)
    path = _unescape_all(path)
    if host:
        path = _dot_segments(path)
    path = _escape_once(path).lower()
    for rx in _PATH_SESSION_RES:
        pm = rx.match(path)
        if pm:
            path = pm.group(1) + pm.group(2)
    if len(path) > 1 and path.endswith(b"/"):
        path = path[:-1]
    default_port = {b"http": 80, b"https": 443}.get(scheme.lower())
    if port == default_port:
        port = None

    if query:
        for rx in _QUERY_SESSION_RES:
            qm = rx.match(query)
            if qm:
                query = qm.group(1) + (qm.group(2) or b"")
        query = query.lower()
        if len(query) > 1:
            args = sorted(tuple(a.split(b"=", 1)) for a in query.split(b"&"))
            query = b"&".join(b"=".join(a) for a in args)

    if host:
        out = b",".join(reversed(host.split(b".")))
        if port is not None:
            out += b":%d" % port
        out += b")"
    else:
        out = scheme + b":"
    if path:
        out += path
    elif query:
        out += b"/"
    if query:
        out += b"?" + query
    return out.decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- segments


class _ReadHandles:
    """LRU of read-only descriptors, so a get() is one pread and no open()."""

    def __init__(self, directory: Path, capacity: int) -> None:
        self._dir = directory
        self._cap = capacity
        self._fds: OrderedDict[str, int] = OrderedDict()

    def pread(self, segment: str, offset: int, length: int) -> bytes:
        fd = self._fds.get(segment)
        if fd is None:
            if "/" in segment or segment.startswith("."):
                raise ValueError(f"bad segment name in index: {segment!r}")
            fd = os.open(self._dir / segment, os.O_RDONLY)
            self._fds[segment] = fd
            if len(self._fds) > self._cap:
                _, old = self._fds.popitem(last=False)
                os.close(old)
        else:
            self._fds.move_to_end(segment)
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise OSError(f"short read in {segment} at {offset}: {len(data)} of {length} bytes")
        return data

    def close(self) -> None:
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)


class _GzipMembers:
    """Output stream for warcio's ``WARCWriter(gzip=False)``: one gzip member per record.

    warcio's own ``gzip=True`` does the same framing but at zlib level 9, which measured
    2.4x slower than level 6 on HTML-like text for under 1% smaller output; compression
    was most of the write path's CPU (now ISA-L, see ``_deflate``).  ``WARCWriter``
    calls ``flush()`` exactly once, at the end of each record, which is where a member
    ends.  The segment file itself is only
    flushed per batch (one write syscall per batch, not per record).
    """

    def __init__(self, raw: IO[bytes], level: int = _DEFLATE_LEVEL) -> None:
        self._raw = raw
        self._level = level
        self._z: Any = None
        self._n = 0
        #: Inflated size of the last member written: the index keeps it (see ``_Entry``).
        self.last_member_raw = 0

    def write(self, data: bytes) -> int:
        if self._z is None:
            self._z = _deflate.compressobj(self._level, _deflate.DEFLATED, 16 + _deflate.MAX_WBITS)
        self._raw.write(self._z.compress(data))
        self._n += len(data)
        return len(data)

    def flush(self) -> None:
        if self._z is not None:
            self._raw.write(self._z.flush())
            self._z = None
            self.last_member_raw, self._n = self._n, 0


class _Pending(NamedTuple):
    """A record about to be written: the index fields known before the write."""

    url: str
    url_b: bytes
    micros: int
    status: int
    headers: list[tuple[str, str]]
    body: bytes | None  # None for a revisit
    ip: str | None
    digest: str
    truncated: bool
    revisit_of: str | None
    orig_micros: int
    near_of: str | None = None  # a response: the URL whose page this near-duplicates
    near_distance: int = 0
    simhash: int | None = None


# --------------------------------------------------------------------------- record reads


class _Record(NamedTuple):
    """What a read needs from a stored record: HTTP headers, IP address, payload."""

    headers: list[tuple[str, str]]
    ip: str | None
    body: bytes


_GZIP_WBITS = 16 + zlib.MAX_WBITS
_HTTP_RECORD_TYPES = (b"response", b"revisit")
_HTTP_SCHEMES = ("http:", "https:")
_HTTP_STATUS_PREFIXES = ("HTTP/1.1 ", "HTTP/1.0 ")
_WARC_VERSION_LINES = (b"WARC/1.1\r\n", b"WARC/1.0\r\n")
# ASCII characters str.strip() treats as whitespace but bytes.strip() does not, plus NUL.
_ODD_SPACES = b"\x00\x1c\x1d\x1e\x1f"


def _parse_member(data: bytes) -> _Record | None:
    """Parse one gzip member holding one WARC record, as warcio would; None = not sure.

    Why: warcio's ``ArchiveIterator`` reads headers line by line through three stream
    wrappers and measured ~200 us a record, most of a ``get()``; the index already says
    where the one member is, so this path is one inflate (ISA-L) plus a few C-level scans
    and splits (~70-120 us a ``get()`` of an 8 KB page here, a quarter of it the inflate).
    It accepts only the shape our writer produces -- an ASCII WARC/1.0-1.1 header without
    continuation lines, an http(s) ``response``/``revisit`` whose block starts with an
    ``HTTP/1.x`` status line and UTF-8 headers with no bare CR or LF -- and returns None
    for anything else, so the caller falls back to warcio and the result is always what
    warcio returns (same trimming of names and values, lines without a colon dropped,
    first of repeated WARC fields, payload = the block after the blank line, cut at the
    record's Content-Length).
    """
    try:
        # Raises on a truncated member; 4x the input is the usual size of HTML inflated.
        raw = _inflate.decompress(data, _GZIP_WBITS, 4 * len(data) + 1024)
    except _INFLATE_ERRORS:
        return None
    end = raw.find(b"\r\n\r\n")
    if end < 0 or not raw.startswith(_WARC_VERSION_LINES):
        return None
    wh = raw[:end]
    crlf_b = wh.count(b"\r\n")
    if (
        not wh.isascii()
        # bytes.strip() and warcio's str.strip() agree only without these (and NUL):
        or len(wh.translate(None, _ODD_SPACES)) != len(wh)
        or wh.count(b"\n") != crlf_b
        or wh.count(b"\r") != crlf_b  # a bare line break
        or b"\r\n " in wh
        or b"\r\n\t" in wh  # a folded line
    ):
        return None
    fields: dict[bytes, bytes] = {}
    for line in wh.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:  # warcio drops a line without a colon; the first of a name wins
            fields.setdefault(name.rstrip(b" \t").lower(), value)
    try:
        length = int(fields.get(b"content-length", b"-1"))
    except ValueError:
        return None
    if (
        fields.get(b"warc-type", b"").strip() not in _HTTP_RECORD_TYPES
        or not fields.get(b"warc-target-uri", b"").strip().startswith((b"http:", b"https:"))
        or length <= 0
    ):
        return None
    ip_b = fields.get(b"warc-ip-address")
    ip = None if ip_b is None else ip_b.strip().decode("ascii")
    start, stop = end + 4, end + 4 + length
    if stop > len(raw):
        return None
    # Offsets into ``raw`` rather than slices: no copy of the body but the one returned.
    hend = raw.find(b"\r\n\r\n", start, stop)
    if hend < 0:
        return None
    try:
        head = raw[start:hend].decode("utf-8")
    except UnicodeDecodeError:
        return None  # warcio would retry the line as ISO-8859-1
    crlf = head.count("\r\n")
    if (
        head.count("\n") != crlf
        or head.count("\r") != crlf
        or not head[:9].upper().startswith(_HTTP_STATUS_PREFIXES)
    ):
        return None
    headers = _http_header_lines(head)
    if headers is None:
        return None
    return _Record(headers, ip, raw[hend + 4 : stop])


def _http_header_lines(head: str) -> list[tuple[str, str]] | None:
    """Header lines after the status line, trimmed as warcio trims them; None = unsure."""
    headers: list[tuple[str, str]] = []
    for hline in head.split("\r\n")[1:]:
        hline = hline.rstrip()
        if not hline or hline[0] in " \t":
            return None  # warcio ends the headers at a blank-ish line, or joins a fold
        name_s, sep_s, value_s = hline.partition(":")
        if sep_s:
            headers.append((name_s.rstrip(" \t"), value_s.lstrip()))
    return headers


_WARC_IP_FIELD = b"\r\nWARC-IP-Address:"
_CRLF2 = b"\r\n\r\n"


def _slice_record(data: bytes, raw_len: int, http_start: int, body_start: int) -> _Record | None:
    """The record at a version-2 index entry, cut at the offsets the entry keeps.

    Why: parsing the WARC and HTTP headers to find the payload was ~20 us of a ~90 us
    ``get()``; the index entry was written with the record and says where its parts
    lie, so a read inflates the member (into a buffer of the exact size) and checks
    only what proves the offsets fit *this* record: the inflated size, the first blank
    line at the end of the WARC headers, the first blank line of the HTTP block at the
    payload, and the record's closing CRLF CRLF.  The WARC header is not re-validated
    field by field (our writer made it), only the IP address is looked up in it; the
    HTTP header lines are split as warcio splits them.  None (fall back to parsing) if
    anything does not fit.  Only for http(s) records: warcio parses HTTP headers of no
    other scheme, and the caller checks that.
    """
    try:
        raw = _inflate.decompress(data, _GZIP_WBITS, raw_len)
    except _INFLATE_ERRORS:
        return None
    hend = body_start - 4
    if (
        len(raw) != raw_len
        or raw.find(_CRLF2, 0, http_start) != http_start - 4
        or raw.find(_CRLF2, http_start, body_start) != hend
        or raw[raw_len - 4 :] != _CRLF2
        or not raw.startswith(_WARC_VERSION_LINES)
    ):
        return None
    ip: str | None = None
    i = raw.find(_WARC_IP_FIELD, 0, http_start)
    if i >= 0:
        i += len(_WARC_IP_FIELD)
        try:
            ip = raw[i : raw.index(b"\r\n", i)].strip().decode("ascii")
        except (ValueError, UnicodeDecodeError):
            return None
    try:
        head = raw[http_start:hend].decode("utf-8")
    except UnicodeDecodeError:
        return None  # warcio would retry the line as ISO-8859-1
    if not head[:9].upper().startswith(_HTTP_STATUS_PREFIXES):
        return None
    headers = _http_header_lines(head)
    if headers is None:
        return None
    return _Record(headers, ip, raw[body_start : raw_len - 4])


# --------------------------------------------------------------------------- the store


class PageStore:
    """WARC 1.1 segments + RocksDB index; see the module docstring for the design."""

    def __init__(
        self,
        path: str | Path,
        *,
        segment_max_bytes: int = 1 << 30,
        read_only: bool = False,
        writer_id: str | None = None,
        index_cache_bytes: int = _INDEX_CACHE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.writer_id = _writer_tag(writer_id)
        self.read_only = read_only
        self.segment_max_bytes = segment_max_bytes
        self._seg_dir = self.path / "segments"
        index_dir = self.path / "index"
        opts = Options(raw_mode=True)
        # A block cache that holds the hot part of the index: RocksDB's default (8 MB)
        # is a ninth of a million-page index, so random reads kept re-reading and
        # re-checksumming blocks through the OS.
        table = BlockBasedOptions()
        table.set_block_cache(Cache(max(1 << 20, index_cache_bytes)))
        opts.set_block_based_table_factory(table)
        if read_only:
            # (CURRENT, not the directory: a writer starting up makes the directory
            # first, and RocksDB's open then failed with a bare IO error, not this)
            if not (index_dir / "CURRENT").is_file():
                raise FileNotFoundError(f"no page store index at {index_dir}")
            # error_if_log_file_exist=False: a live writer always has a WAL; the
            # read-only open replays it, so we see everything written before we opened.
            self._db = Rdict(str(index_dir), opts, access_type=AccessType.read_only(False))
        else:
            self._seg_dir.mkdir(parents=True, exist_ok=True)
            opts.create_if_missing(True)
            self._db = Rdict(str(index_dir), opts)
        self._reads = _ReadHandles(self._seg_dir, _READ_HANDLES)
        # One iterator serves every lookup (creating one per get() was ~5% of a read);
        # it sees the index as of its creation, so every index write drops it.
        self._lookup_it: Any = None
        self._writer: WARCWriter | None = None
        self._members: _GzipMembers | None = None
        self._out: IO[bytes] | None = None
        self._segment: str | None = None
        self._next_seq = self._scan_next_seq()
        self._last_auto_micros = 0
        self._closed = False

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> PageStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def put(
        self,
        url: str,
        *,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        fetched_at: float | None = None,
        ip: str | None = None,
        truncated: bool = False,
        near_duplicate_of: str | None = None,
        near_distance: int = 0,
        simhash: int | None = None,
    ) -> Capture:
        """Store one response; a batch of one (see ``put_many``).

        ``near_duplicate_of`` marks the page as a near-duplicate of that URL's page: it
        is stored whole (its bytes differ), followed by a ``metadata`` record that
        refers to it and names the original, the simhash distance and the simhash.
        """
        return self._write_batch(
            [
                self._prepare_response(
                    url,
                    status=status,
                    headers=headers,
                    body=body,
                    fetched_at=fetched_at,
                    ip=ip,
                    truncated=truncated,
                    near_duplicate_of=near_duplicate_of,
                    near_distance=near_distance,
                    simhash=simhash,
                )
            ]
        )[0]

    def put_revisit(
        self,
        url: str,
        *,
        original_url: str,
        original_digest: str,
        original_date: float,
        status: int,
        headers: list[tuple[str, str]],
        fetched_at: float | None = None,
        ip: str | None = None,
    ) -> Capture:
        """Store an exact duplicate as a revisit record (no body written twice)."""
        return self._write_batch(
            [
                self._prepare_revisit(
                    url,
                    original_url=original_url,
                    original_digest=original_digest,
                    original_date=original_date,
                    status=status,
                    headers=headers,
                    fetched_at=fetched_at,
                    ip=ip,
                )
            ]
        )[0]

    def put_many(self, items: list[dict[str, Any]], *, captures: bool = True) -> list[Capture]:
        """Store many pages with one segment flush and one index WriteBatch.

        Each item holds ``put``'s keyword arguments plus ``"url"``; an item with an
        ``"original_url"`` key takes ``put_revisit``'s instead.  Every item is validated
        before anything is written, so a bad item fails the batch without side effects.
        ``captures=False`` returns an empty list: link-extract, which stores and never
        reads them back, does not pay for a ``Capture`` (and a copy of its headers) a
        page.
        """
        pending: list[_Pending] = []
        for item in items:
            kw = dict(item)
            url = kw.pop("url")
            if "original_url" in kw:
                pending.append(self._prepare_revisit(url, **kw))
            else:
                pending.append(self._prepare_response(url, **kw))
        return self._write_batch(pending, captures)

    def flush(self) -> None:
        """Make everything written so far durable (segment fsync + synced WAL)."""
        if self.read_only or self._closed:
            return
        if self._out is not None:
            self._out.flush()
            os.fsync(self._out.fileno())
        self._db.flush_wal(True)

    def close(self) -> None:
        """Flush and release the segment, the read descriptors and the index lock."""
        if self._closed:
            return
        try:
            if not self.read_only:
                self.flush()
            self._close_segment()
        finally:
            self._reads.close()
            self._lookup_it = None
            self._db.close()
            self._closed = True

    # ------------------------------------------------------------------ reads

    def get(self, url: str, at: float | None = None) -> Capture | None:
        """Latest capture of ``url``; with ``at``, the latest fetched at or before ``at``.

        One index seek and one segment read (plus the same again for a revisit's
        original).  Returns None if there is no such capture.
        """
        self._check_open()
        at_micros: int | None = None
        if at is not None:
            if at != at:
                raise ValueError("at is NaN")
            if at < 0:
                return None
            # Any time past the last representable one means "latest".
            at_micros = _MAX_MICROS if at >= 2**63 / 1e6 else min(round(at * 1e6), _MAX_MICROS)
        found = self._seek(_url_bytes(url), at_micros)
        if found is None:
            return None
        key, value = found
        if value[0] == _VAL_VERSION2 and not value[1] & _FLAG_REVISIT:
            capture = self._get_sliced(url, key, value)
            if capture is not None:
                return capture
        return self._load(_decode(key, value))

    def fetched_since(self, url: str, since: float) -> bool:
        """Is a capture of `url` fetched at or after `since` (unix seconds) stored? One
        index seek, no segment read: how a worker adopting a host tells a fetch in
        flight at a crash whose page got stored from one to do again."""
        self._check_open()
        try:
            found = self._seek(_url_bytes(url), None)
        except ValueError:
            return False
        return found is not None and _MICROS.unpack(found[0][-8:])[0] >= _to_micros(since)

    def __contains__(self, url: object) -> bool:
        self._check_open()
        if not isinstance(url, str):
            return False
        try:
            prefix = _key_prefix(_url_bytes(url))
        except ValueError:
            return False
        it = self._db.iter()
        it.seek(prefix)
        return bool(it.valid() and bytes(it.key()).startswith(prefix))

    def urls(self) -> Iterator[str]:
        """Every stored URL once, in byte order of its UTF-8 form (== code point order)."""
        self._check_open()
        it = self._db.iter()
        it.seek_to_first()
        last: bytes | None = None
        while it.valid():
            url_b = bytes(it.key())[:-9]
            if url_b != last:
                yield url_b.decode("utf-8", "surrogateescape")
                last = url_b
            it.next()

    def captures(self, url: str) -> list[Capture]:
        """All captures of ``url``, oldest first."""
        self._check_open()
        return [self._load(e) for e in self._entries(_url_bytes(url))]

    def export_cdxj(self, out: TextIO) -> int:
        """Write a sorted CDXJ index of every capture (pywb's format); return line count.

        Lines are ``SURT-key 14-digit-timestamp {json}`` with url, mime, status, digest
        (base32, no ``sha1:``), length and offset (of the gzip member) and filename
        (segment name, relative: pywb resolves it against its archive paths).  Built from
        the index alone, no segment reads.  The index is URL-ordered, not SURT-ordered, so
        lines are sorted in chunks spilled to temp files and merged: bounded memory.
        """
        self._check_open()
        chunks: list[IO[str]] = []
        buf: list[str] = []
        n = 0
        try:
            it = self._db.iter()
            it.seek_to_first()
            while it.valid():
                buf.append(self._cdxj_line(_decode(bytes(it.key()), bytes(it.value()))))
                n += 1
                if len(buf) >= _CDXJ_SORT_CHUNK:
                    chunks.append(self._spill(buf))
                    buf = []
                it.next()
            buf.sort()
            if not chunks:
                out.writelines(buf)
            else:
                chunks.append(self._spill(buf))
                out.writelines(heapq.merge(*chunks))
        finally:
            for c in chunks:
                c.close()
        return n

    # ------------------------------------------------------------------ internals: write

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("PageStore is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise ReadOnlyError("PageStore was opened read_only")

    def _fetch_micros(self, fetched_at: float | None) -> int:
        if fetched_at is not None:
            return _to_micros(fetched_at)
        # Strictly increasing, so two un-timed puts of one URL never share an index key.
        micros = max(time.time_ns() // 1000, self._last_auto_micros + 1)
        self._last_auto_micros = micros
        return micros

    def _prepare_response(
        self,
        url: str,
        *,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        fetched_at: float | None = None,
        ip: str | None = None,
        truncated: bool = False,
        near_duplicate_of: str | None = None,
        near_distance: int = 0,
        simhash: int | None = None,
        payload_digest: str | None = None,
    ) -> _Pending:
        """``payload_digest``: the body's ``sha1:`` digest when the caller took it already
        (link-extract does, to find a capture stored before), so the body is not hashed
        twice; it must be the body's (warcio's check verifies it)."""
        self._check_writable()
        url_b = _url_bytes(url)
        if near_duplicate_of is not None:
            _url_bytes(near_duplicate_of)
        _check_status(status)
        if not isinstance(body, bytes | bytearray | memoryview):
            raise TypeError("body must be bytes")
        body = bytes(body)
        return _Pending(
            url=url,
            url_b=url_b,
            micros=self._fetch_micros(fetched_at),
            status=status,
            headers=_normalize_headers(_check_headers(headers), len(body)),
            body=body,
            ip=ip,
            digest=_payload_digest(body) if payload_digest is None else payload_digest,
            truncated=bool(truncated),
            revisit_of=None,
            orig_micros=0,
            near_of=near_duplicate_of,
            near_distance=int(near_distance),
            simhash=None if simhash is None else int(simhash) & ((1 << 64) - 1),
        )

    def _prepare_revisit(
        self,
        url: str,
        *,
        original_url: str,
        original_digest: str,
        original_date: float,
        status: int,
        headers: list[tuple[str, str]],
        fetched_at: float | None = None,
        ip: str | None = None,
    ) -> _Pending:
        self._check_writable()
        url_b = _url_bytes(url)
        _url_bytes(original_url)
        _check_status(status)
        if not original_digest or ":" not in original_digest:
            raise ValueError(f"original_digest must be a labelled digest: {original_digest!r}")
        return _Pending(
            url=url,
            url_b=url_b,
            micros=self._fetch_micros(fetched_at),
            status=status,
            headers=_normalize_headers(_check_headers(headers), None),
            body=None,
            ip=ip,
            digest=original_digest,
            truncated=False,
            revisit_of=original_url,
            orig_micros=_to_micros(original_date),
        )

    def _write_batch(self, pending: list[_Pending], with_captures: bool = True) -> list[Capture]:
        """WARC records first (flushed), then one index WriteBatch: see module docstring.
        ``with_captures=False``: the same writes, an empty list returned."""
        if not pending:
            return []
        batch = WriteBatch(raw_mode=True)
        captures: list[Capture] = []
        for p in pending:
            try:
                segment, offset, length, layout = self._write_record(p)
            except BaseException:
                # The segment may now end in a torn gzip member; never append after one.
                with contextlib.suppress(OSError):
                    self._close_segment()
                raise
            mime = "warc/revisit" if p.revisit_of is not None else _mime_of(p.headers)
            batch.put(
                _key(p.url_b, p.micros),
                _encode_value(
                    status=p.status,
                    segment=segment,
                    offset=offset,
                    length=length,
                    digest=p.digest,
                    mime=mime,
                    truncated=p.truncated,
                    revisit_of=p.revisit_of,
                    orig_micros=p.orig_micros,
                    near_duplicate_of=p.near_of,
                    raw_len=layout[0],
                    http_start=layout[1],
                    body_start=layout[2],
                ),
            )
            if not with_captures:
                continue
            captures.append(
                Capture(
                    url=p.url,
                    fetched_at=p.micros / 1_000_000,
                    status=p.status,
                    headers=list(p.headers),
                    body=p.body if p.body is not None else b"",
                    ip=p.ip,
                    digest=p.digest,
                    segment=segment,
                    offset=offset,
                    length=length,
                    truncated=p.truncated,
                    revisit_of=p.revisit_of,
                    near_duplicate_of=p.near_of,
                )
            )
        if self._out is not None:
            self._out.flush()
        self._lookup_it = None
        self._db.write(batch)
        return captures

    def _write_record(self, p: _Pending) -> tuple[str, int, int, tuple[int, int, int]]:
        """Write one record; return its segment, offset, length and inflated layout.

        The layout (inflated size, start of the HTTP block, start of the payload) follows
        from how warcio lays a record out -- WARC headers, HTTP headers, payload, CRLF
        CRLF -- and the sizes we know: the member's inflated size, counted as it is
        deflated, the HTTP header block and the body.
        """
        writer, out, segment = self._current_segment()
        if p.revisit_of is None and self._members is not None:
            return self._write_response(p, out, segment)
        http = StatusAndHeaders(_status_line(p.status), list(p.headers), protocol="HTTP/1.1")
        record_id = _record_id()
        rec_headers: list[tuple[str, str]] = [
            ("WARC-Type", "response" if p.revisit_of is None else "revisit"),
            ("WARC-Record-ID", record_id),
            ("WARC-Date", _warc_date(p.micros)),
            ("WARC-Target-URI", p.url),
        ]
        if p.ip:
            rec_headers.append(("WARC-IP-Address", _clean_header(p.ip)))
        if p.revisit_of is None:
            assert p.body is not None
            http.compute_headers_buffer()
            block = hashlib.sha1(http.headers_buff)
            block.update(p.body)
            rec_headers.append(("WARC-Payload-Digest", p.digest))
            rec_headers.append(("WARC-Block-Digest", "sha1:" + _sha1_base32(block.digest())))
            if p.truncated:
                rec_headers.append(("WARC-Truncated", "length"))
            payload = io.BytesIO(p.body)
            length = len(p.body)
        else:
            rec_headers += [
                ("WARC-Profile", writer.REVISIT_PROFILE_1_1),
                ("WARC-Refers-To-Target-URI", p.revisit_of),
                ("WARC-Refers-To-Date", _warc_date(p.orig_micros)),
                ("WARC-Payload-Digest", p.digest),
            ]
            payload = io.BytesIO()
            length = 0
        record = writer.create_warc_record(
            p.url,
            "response" if p.revisit_of is None else "revisit",
            payload=payload,
            length=length,
            warc_content_type=_MIME_HTTP_RESPONSE,
            warc_headers=StatusAndHeaders("", rec_headers, protocol="WARC/1.1"),
            http_headers=http,
        )
        offset = out.tell()
        writer.write_record(record)
        end = out.tell()
        assert self._members is not None
        raw_len = self._members.last_member_raw
        body_start = raw_len - 4 - length
        http_start = body_start - len(record.http_headers.headers_buff)
        if p.near_of is not None:
            # In the same segment, right after the response it describes.
            writer.write_record(_near_dup_metadata(writer, p, record_id))
        if end >= self.segment_max_bytes:
            self._close_segment()
        return segment, offset, end - offset, (raw_len, http_start, body_start)

    def _write_response(
        self, p: _Pending, out: IO[bytes], segment: str
    ) -> tuple[str, int, int, tuple[int, int, int]]:
        """``_write_record`` of a response, the bytes warcio's writer gives, by hand.

        Why: warcio's record building (header objects, digest checks, per-record
        conversions) cost about as much as deflating the record. This writes the same
        bytes in the same pieces (tested byte for byte against warcio): the WARC header
        block with ``Content-Type`` and ``Content-Length`` last, the HTTP header block
        (ASCII: ``_normalize_headers`` percent-encodes the rest; anything else goes
        through warcio's encoder), the body in warcio's read size, CRLF CRLF.
        """
        assert p.body is not None and self._members is not None
        members = self._members
        http_block = _http_block(p.status, p.headers)
        block = hashlib.sha1(http_block)
        block.update(p.body)
        record_id = _record_id()
        lines = [
            "WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: ",
            record_id,
            "\r\nWARC-Date: ",
            _warc_date(p.micros),
            "\r\nWARC-Target-URI: ",
            p.url,
            "\r\n",
        ]
        if p.ip:
            lines += ["WARC-IP-Address: ", _clean_header(p.ip), "\r\n"]
        lines += [
            "WARC-Payload-Digest: ",
            p.digest,
            "\r\nWARC-Block-Digest: sha1:",
            _sha1_base32(block.digest()),
            "\r\n",
        ]
        if p.truncated:
            lines.append("WARC-Truncated: length\r\n")
        length = len(p.body)
        lines += [
            "Content-Type: ",
            _MIME_HTTP_RESPONSE,
            "\r\nContent-Length: ",
            str(len(http_block) + length),
            "\r\n\r\n",
        ]
        offset = out.tell()
        members.write("".join(lines).encode("utf-8"))
        members.write(http_block)
        body = p.body
        for start in range(0, length, _WARCIO_BUFF_SIZE):
            members.write(body[start : start + _WARCIO_BUFF_SIZE])
        members.write(b"\r\n\r\n")
        members.flush()
        end = out.tell()
        raw_len = members.last_member_raw
        body_start = raw_len - 4 - length
        http_start = body_start - len(http_block)
        if p.near_of is not None:
            # In the same segment, right after the response it describes.
            writer = self._writer
            assert writer is not None
            writer.write_record(_near_dup_metadata(writer, p, record_id))
        if end >= self.segment_max_bytes:
            self._close_segment()
        return segment, offset, end - offset, (raw_len, http_start, body_start)

    def _current_segment(self) -> tuple[WARCWriter, IO[bytes], str]:
        if self._writer is None or self._out is None or self._segment is None:
            stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
            name = f"seine-{stamp}-{self._next_seq:05d}-{self.writer_id}-{secrets.token_hex(4)}"
            name += ".warc.gz"
            self._next_seq += 1
            out = open(self._seg_dir / name, "xb", buffering=1 << 20)  # noqa: SIM115
            self._members = _GzipMembers(out)
            writer = WARCWriter(self._members, gzip=False, warc_version="1.1")
            info = writer.create_warcinfo_record(
                name,
                {
                    "software": _SOFTWARE,
                    "format": "WARC File Format 1.1",
                    "conformsTo": "https://iipc.github.io/warc-specifications/"
                    "specifications/warc-format/warc-1.1/",
                    "hostname": socket.gethostname(),
                    "description": "Seine crawl page store segment",
                },
            )
            writer.write_record(info)
            self._writer, self._out, self._segment = writer, out, name
        return self._writer, self._out, self._segment

    def _close_segment(self) -> None:
        out, self._out, self._writer, self._segment = self._out, None, None, None
        self._members = None
        if out is not None:
            try:
                out.flush()
                os.fsync(out.fileno())
            finally:
                out.close()

    def _scan_next_seq(self) -> int:
        """Next segment sequence number: a reopened store never reuses a name."""
        best = 0
        if self._seg_dir.is_dir():
            for entry in os.scandir(self._seg_dir):
                m = _SEGMENT_RE.match(entry.name)
                if m:
                    best = max(best, int(m.group(2)))
        return best + 1

    # ------------------------------------------------------------------ internals: read

    def _lookup(self, url_b: bytes, at_micros: int | None) -> _Entry | None:
        found = self._seek(url_b, at_micros)
        return None if found is None else _decode(*found)

    def _seek(self, url_b: bytes, at_micros: int | None) -> tuple[bytes, bytes] | None:
        """Key and value of the latest capture at or before ``at_micros`` (None: latest)."""
        prefix = _key_prefix(url_b)
        it = self._lookup_it
        if it is None:
            it = self._lookup_it = self._db.iter()
        it.seek_for_prev(prefix + _MICROS.pack(_MAX_MICROS if at_micros is None else at_micros))
        if not it.valid():
            return None
        key = bytes(it.key())
        if not key.startswith(prefix) or len(key) != len(prefix) + 8:
            return None
        return key, bytes(it.value())

    def _get_sliced(self, url: str, key: bytes, value: bytes) -> Capture | None:
        """``get()`` of a version-2 response entry, straight from the value's bytes.

        The hot path of a read: no ``_Entry`` in between, the URL is the caller's, and
        the record is cut at the entry's offsets (``_slice_record``).  None if the
        record does not fit them (the caller then parses it) or is not http(s).
        """
        if not url.startswith(_HTTP_SCHEMES):
            return None
        (
            _v,
            flags,
            status,
            offset,
            length,
            _orig,
            raw_len,
            http_start,
            body_start,
            n_seg,
            n_dig,
            n_mime,
            n_other,
        ) = _VAL_HEAD2.unpack_from(value)
        a = _VAL_HEAD2.size
        b = a + n_seg
        segment = value[a:b].decode("utf-8", "surrogateescape")
        rec = _slice_record(
            self._reads.pread(segment, offset, length), raw_len, http_start, body_start
        )
        if rec is None:
            return None
        c = b + n_dig
        d = c + n_mime
        return Capture(
            url,
            _MICROS.unpack_from(key, len(key) - 8)[0] / 1_000_000,
            status,
            rec.headers,
            rec.body,
            rec.ip,
            value[b:c].decode("utf-8", "surrogateescape"),
            segment,
            offset,
            length,
            bool(flags & _FLAG_TRUNCATED),
            None,
            value[d : d + n_other].decode("utf-8", "surrogateescape")
            if flags & _FLAG_NEAR_DUP
            else None,
        )

    def _entries(self, url_b: bytes) -> Iterator[_Entry]:
        prefix = _key_prefix(url_b)
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                return
            if len(key) == len(prefix) + 8:
                yield _decode(key, bytes(it.value()))
            it.next()

    def _read_record(self, e: _Entry) -> _Record:
        """HTTP headers, WARC-IP-Address and payload of the record at ``e``.

        The record is one gzip member our own writer produced: a version-2 entry says
        where its parts lie (``_slice_record``); otherwise ``_parse_member`` inflates
        and splits it by hand; warcio's ``ArchiveIterator`` is only the fallback for a
        record of another shape.
        """
        data = self._reads.pread(e.segment, e.offset, e.length)
        if e.raw_len and e.url.startswith(_HTTP_SCHEMES):
            sliced = _slice_record(data, e.raw_len, e.http_start, e.body_start)
            if sliced is not None:
                return sliced
        parsed = _parse_member(data)
        if parsed is not None:
            return parsed
        for record in ArchiveIterator(io.BytesIO(data), block_size=_READ_BLOCK):
            body = record.raw_stream.read()
            http = record.http_headers
            return _Record(
                list(http.headers) if http is not None else [],
                record.rec_headers.get_header("WARC-IP-Address"),
                body,
            )
        raise OSError(f"no WARC record in {e.segment} at {e.offset}")

    def _load(self, e: _Entry) -> Capture:
        headers, ip, body = self._read_record(e)
        if e.revisit_of is not None:
            body = self._original_body(e)
        return Capture(
            url=e.url,
            fetched_at=e.micros / 1_000_000,
            status=e.status,
            headers=headers,
            body=body,
            ip=ip,
            digest=e.digest,
            segment=e.segment,
            offset=e.offset,
            length=e.length,
            truncated=e.truncated,
            revisit_of=e.revisit_of,
            near_duplicate_of=e.near_duplicate_of,
        )

    def _original_body(self, e: _Entry) -> bytes:
        """Body of the response a revisit points at, following revisit chains."""
        for _ in range(_REVISIT_DEPTH):
            if e.revisit_of is None:
                return self._read_record(e)[2]
            orig_b = _url_bytes(e.revisit_of)
            cand = self._lookup(orig_b, e.orig_micros)
            if cand is None or cand.digest != e.digest:
                cand = next(
                    (c for c in reversed(list(self._entries(orig_b))) if c.digest == e.digest),
                    None,
                )
            if cand is None:
                break
            e = cand
        log.warning("revisit of %s: original %s not found in page store", e.url, e.revisit_of)
        return b""

    # ------------------------------------------------------------------ internals: CDXJ

    @staticmethod
    def _cdxj_line(e: _Entry) -> str:
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

    @staticmethod
    def _spill(lines: list[str]) -> IO[str]:
        lines.sort()
        f = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        f.writelines(lines)
        f.seek(0)
        return f


def _near_dup_metadata(writer: WARCWriter, p: _Pending, refers_to: str) -> Any:
    """The ``metadata`` record that marks a response as a near-duplicate.

    Why a metadata record: a near-duplicate's bytes differ from the original's (a date,
    a counter), so a ``revisit`` (identical payload) would lie and lose them.  The
    response is kept whole and this record, ``WARC-Refers-To`` it, says which page it
    near-duplicates, as ``application/warc-fields`` (the format Heritrix uses for its
    metadata records), so any WARC reader sees the relation without Seine's index.
    """
    assert p.near_of is not None
    fields = [
        ("near-duplicate-of", p.near_of),
        ("simhash-distance", str(p.near_distance)),
    ]
    if p.simhash is not None:
        fields.append(("simhash", f"{p.simhash:016x}"))
    block = "".join(f"{n}: {_clean_header(v)}\r\n" for n, v in fields).encode("ascii")
    headers = [
        ("WARC-Type", "metadata"),
        ("WARC-Record-ID", _record_id()),
        ("WARC-Date", _warc_date(p.micros)),
        ("WARC-Target-URI", p.url),
        ("WARC-Refers-To", refers_to),
    ]
    return writer.create_warc_record(
        p.url,
        "metadata",
        payload=io.BytesIO(block),
        length=len(block),
        warc_content_type="application/warc-fields",
        warc_headers=StatusAndHeaders("", headers, protocol="WARC/1.1"),
    )


def _writer_tag(writer_id: str | None) -> str:
    """The writer part of segment names: the given id, else host name and process id.

    Only ``[A-Za-z0-9._]`` survive (other runs become ``_``) so the name stays a safe
    file name and object key and the ``-`` separators stay unambiguous.
    """
    if writer_id is None or not writer_id.strip():
        writer_id = f"{socket.gethostname().split('.')[0]}_{os.getpid()}"
    return _WRITER_UNSAFE_RE.sub("_", writer_id.strip())[:48] or "w"


def _check_status(status: int) -> None:
    if not isinstance(status, int) or not 100 <= status <= 999:
        raise ValueError(f"HTTP status must be an int in 100..999: {status!r}")


def _check_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for h in headers:
        name, value = h
        out.append((str(name), str(value)))
    return out
