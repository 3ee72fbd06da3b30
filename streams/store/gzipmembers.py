"""One WARC record a gzip member: the deflating stream the writer writes through, and
the hand-written readers that inflate one member and split it without warcio.

Why by hand: the index says where the one member of a record is (offset and length),
so a read is one inflate (ISA-L when installed) plus a few C-level scans; warcio's
``ArchiveIterator`` stays the fallback for a record of any other shape.  Only the
standard library, ``isal`` and warcio.
"""

from __future__ import annotations

import io
import zlib
from typing import IO, Any, NamedTuple

from warcio.archiveiterator import ArchiveIterator

from streams.store.index import Entry

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
_READ_BLOCK = 1 << 18  # warcio read chunk: one record member is usually one chunk


class GzipMembers:
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
        #: Inflated size of the last member written: the index keeps it (``index.Entry``).
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


class Record(NamedTuple):
    """What a read needs from a stored record: HTTP headers, IP address, payload."""

    headers: list[tuple[str, str]]
    ip: str | None
    body: bytes


_GZIP_WBITS = 16 + zlib.MAX_WBITS
_HTTP_RECORD_TYPES = (b"response", b"revisit")
HTTP_SCHEMES = ("http:", "https:")
_HTTP_STATUS_PREFIXES = ("HTTP/1.1 ", "HTTP/1.0 ")
_WARC_VERSION_LINES = (b"WARC/1.1\r\n", b"WARC/1.0\r\n")
# ASCII characters str.strip() treats as whitespace but bytes.strip() does not, plus NUL.
_ODD_SPACES = b"\x00\x1c\x1d\x1e\x1f"


def parse_member(data: bytes) -> Record | None:
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
    return Record(headers, ip, raw[hend + 4 : stop])


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


def slice_record(data: bytes, raw_len: int, http_start: int, body_start: int) -> Record | None:
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
    return Record(headers, ip, raw[body_start : raw_len - 4])


def read_record(data: bytes, e: Entry) -> Record:
    """HTTP headers, WARC-IP-Address and payload of the record ``data`` (the gzip
    member at ``e``).

    The record is one gzip member our own writer produced: a version-2 entry says
    where its parts lie (``slice_record``); otherwise ``parse_member`` inflates and
    splits it by hand; warcio's ``ArchiveIterator`` is only the fallback for a record
    of another shape.
    """
    if e.raw_len and e.url.startswith(HTTP_SCHEMES):
        sliced = slice_record(data, e.raw_len, e.http_start, e.body_start)
        if sliced is not None:
            return sliced
    parsed = parse_member(data)
    if parsed is not None:
        return parsed
    for record in ArchiveIterator(io.BytesIO(data), block_size=_READ_BLOCK):
        body = record.raw_stream.read()
        http = record.http_headers
        return Record(
            list(http.headers) if http is not None else [],
            record.rec_headers.get_header("WARC-IP-Address"),
            body,
        )
    raise OSError(f"no WARC record in {e.segment} at {e.offset}")
