"""WARC 1.1 records as the page store writes them: dates, digests, record ids, the
stored HTTP header block, and the response, revisit, metadata and warcinfo records.

Response records are written by hand, byte for byte what warcio's ``WARCWriter``
writes (tested against it); the other records go through warcio.  Only the standard
library and warcio.

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
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote_from_bytes

from warcio.statusandheaders import StatusAndHeaders
from warcio.utils import BUFF_SIZE as _WARCIO_BUFF_SIZE
from warcio.warcwriter import WARCWriter

from streams.store.index import url_bytes

_SOFTWARE = "seine/0.1.0"
MIME_HTTP_RESPONSE = "application/http;msgtype=response"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Latest representable WARC-Date (9999-12-31T23:59:59.999999Z).
MAX_TS_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - EPOCH) // timedelta(
    microseconds=1
)
_CRLF_RE = re.compile(r"[\r\n]")
# Every printable ASCII character passes through; only non-ASCII is percent-encoded.
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F)) + "\t"


class Pending(NamedTuple):
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


def to_micros(ts: float) -> int:
    micros = round(ts * 1_000_000)
    if not 0 <= micros <= MAX_TS_MICROS:
        raise ValueError(f"timestamp out of range: {ts!r}")
    return int(micros)


def warc_date(micros: int) -> str:
    """W3C-ISO8601 UTC with microseconds (WARC 1.1 allows 1-9 fraction digits)."""
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{_warc_second(seconds)}.{fraction:06d}Z"


@functools.lru_cache(maxsize=64)
def _warc_second(seconds: int) -> str:
    """A WARC date to the second: the pages of a batch share a few (strftime cost
    ~3 µs a record)."""
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


#: Base32 (RFC 4648) of every 10-bit value: a 20-byte sha1 digest is 16 of them.
_B32_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in _B32_ALPHABET for b in _B32_ALPHABET]


def sha1_base32(digest: bytes) -> str:
    """``base64.b32encode(digest).decode()`` of a 20-byte digest (160 bits, no padding),
    in a third less time (base64's base32 is Python, and built for any length)."""
    n = int.from_bytes(digest, "big")
    return "".join([_B32_PAIRS[(n >> shift) & 0x3FF] for shift in range(150, -1, -10)])


def record_id() -> str:
    """``f"<urn:uuid:{uuid.uuid4()}>"`` without building a UUID object (~2 instead of
    ~3.5 µs a record): 122 random bits, version 4, RFC 4122 variant."""
    n = int.from_bytes(os.urandom(16), "big")
    n = n & ~(0xF000 << 64 | 0xC000 << 48) | (0x4000 << 64 | 0x8000 << 48)
    h = f"{n:032x}"
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}>"


def payload_digest(body: bytes) -> str:
    """The WARC payload digest of a body (sha1, base32), as the store writes it: parse
    takes it once, and it keys the hand-off, content-dedup's table and the revisit
    record, so all must agree with the store."""
    return "sha1:" + sha1_base32(hashlib.sha1(body).digest())


#: The same, for functions whose ``payload_digest`` parameter hides the function.
_payload_digest = payload_digest


def clean_header(s: str) -> str:
    if "\r" in s or "\n" in s:  # (two scans cost a quarter of the regex's call)
        s = _CRLF_RE.sub(" ", s)
    if s.isascii():
        return s
    return quote_from_bytes(s.encode("utf-8", "surrogateescape"), safe=_HEADER_SAFE)


def status_line(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"{status} {phrase}"


def normalize_headers(
    headers: list[tuple[str, str]], body_len: int | None
) -> list[tuple[str, str]]:
    """Headers for the stored HTTP block, self-consistent with a decoded body.

    ``body_len`` is None for revisits (no body in the record: only the encodings are
    renamed, Content-Length is left alone).  See the module docstring for why.
    """
    out: list[tuple[str, str]] = []
    changed = False
    for raw_name, raw_value in headers:
        name, value = clean_header(str(raw_name)), clean_header(str(raw_value))
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


def http_block(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The HTTP header block of a stored response, as warcio's ``to_ascii_bytes``."""
    text = "".join(
        ["HTTP/1.1 ", status_line(status), "\r\n", *[f"{n}: {v}\r\n" for n, v in headers], "\r\n"]
    )
    if text.isascii():
        return text.encode("ascii")
    http = StatusAndHeaders(status_line(status), list(headers), protocol="HTTP/1.1")
    http.compute_headers_buffer()
    return bytes(http.headers_buff)


def mime_of(headers: list[tuple[str, str]]) -> str:
    for name, value in headers:
        if name.strip().lower() == "content-type":
            mime = value.split(";", 1)[0].strip()
            return mime or "unk"
    return "unk"


class _Members(Protocol):
    """Where a record's bytes go: ``flush()`` ends its gzip member (``GzipMembers``)."""

    def write(self, data: bytes) -> int: ...

    def flush(self) -> None: ...


def write_response(members: _Members, p: Pending) -> tuple[str, int]:
    """Write a response record, the bytes warcio's writer gives, by hand; return its
    record id and the size of its HTTP header block.

    Why: warcio's record building (header objects, digest checks, per-record
    conversions) cost about as much as deflating the record. This writes the same
    bytes in the same pieces (tested byte for byte against warcio): the WARC header
    block with ``Content-Type`` and ``Content-Length`` last, the HTTP header block
    (ASCII: ``normalize_headers`` percent-encodes the rest; anything else goes
    through warcio's encoder), the body in warcio's read size, CRLF CRLF.
    """
    assert p.body is not None
    http = http_block(p.status, p.headers)
    block = hashlib.sha1(http)
    block.update(p.body)
    rec_id = record_id()
    lines = [
        "WARC/1.1\r\nWARC-Type: response\r\nWARC-Record-ID: ",
        rec_id,
        "\r\nWARC-Date: ",
        warc_date(p.micros),
        "\r\nWARC-Target-URI: ",
        p.url,
        "\r\n",
    ]
    if p.ip:
        lines += ["WARC-IP-Address: ", clean_header(p.ip), "\r\n"]
    lines += [
        "WARC-Payload-Digest: ",
        p.digest,
        "\r\nWARC-Block-Digest: sha1:",
        sha1_base32(block.digest()),
        "\r\n",
    ]
    if p.truncated:
        lines.append("WARC-Truncated: length\r\n")
    length = len(p.body)
    lines += [
        "Content-Type: ",
        MIME_HTTP_RESPONSE,
        "\r\nContent-Length: ",
        str(len(http) + length),
        "\r\n\r\n",
    ]
    members.write("".join(lines).encode("utf-8"))
    members.write(http)
    body = p.body
    for start in range(0, length, _WARCIO_BUFF_SIZE):
        members.write(body[start : start + _WARCIO_BUFF_SIZE])
    members.write(b"\r\n\r\n")
    members.flush()
    return rec_id, len(http)


def revisit_record(writer: WARCWriter, p: Pending) -> Any:
    """The ``revisit`` record (profile identical-payload-digest) of ``p``: its HTTP
    headers only, referring to the original's URL and date."""
    assert p.revisit_of is not None
    http = StatusAndHeaders(status_line(p.status), list(p.headers), protocol="HTTP/1.1")
    rec_headers: list[tuple[str, str]] = [
        ("WARC-Type", "revisit"),
        ("WARC-Record-ID", record_id()),
        ("WARC-Date", warc_date(p.micros)),
        ("WARC-Target-URI", p.url),
    ]
    if p.ip:
        rec_headers.append(("WARC-IP-Address", clean_header(p.ip)))
    rec_headers += [
        ("WARC-Profile", writer.REVISIT_PROFILE_1_1),
        ("WARC-Refers-To-Target-URI", p.revisit_of),
        ("WARC-Refers-To-Date", warc_date(p.orig_micros)),
        ("WARC-Payload-Digest", p.digest),
    ]
    return writer.create_warc_record(
        p.url,
        "revisit",
        payload=io.BytesIO(),
        length=0,
        warc_content_type=MIME_HTTP_RESPONSE,
        warc_headers=StatusAndHeaders("", rec_headers, protocol="WARC/1.1"),
        http_headers=http,
    )


def near_dup_metadata(writer: WARCWriter, p: Pending, refers_to: str) -> Any:
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
    block = "".join(f"{n}: {clean_header(v)}\r\n" for n, v in fields).encode("ascii")
    headers = [
        ("WARC-Type", "metadata"),
        ("WARC-Record-ID", record_id()),
        ("WARC-Date", warc_date(p.micros)),
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


def warcinfo_record(writer: WARCWriter, name: str) -> Any:
    """The ``warcinfo`` record that starts every segment, so each is self-describing."""
    return writer.create_warcinfo_record(
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


def response_pending(
    url: str,
    micros_of: Callable[[float | None], int],
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
) -> Pending:
    """A response to store (``PageStore.put``'s arguments), validated; nothing written.

    ``micros_of`` turns ``fetched_at`` into the capture's microseconds (the store's
    clock when None).  ``payload_digest``: the body's ``sha1:`` digest when the caller
    took it already (link-extract does, to find a capture stored before), so the body is
    not hashed twice; it must be the body's (warcio's check verifies it)."""
    url_b = url_bytes(url)
    if near_duplicate_of is not None:
        url_bytes(near_duplicate_of)
    _check_status(status)
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError("body must be bytes")
    body = bytes(body)
    return Pending(
        url=url,
        url_b=url_b,
        micros=micros_of(fetched_at),
        status=status,
        headers=normalize_headers(_check_headers(headers), len(body)),
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


def revisit_pending(
    url: str,
    micros_of: Callable[[float | None], int],
    *,
    original_url: str,
    original_digest: str,
    original_date: float,
    status: int,
    headers: list[tuple[str, str]],
    fetched_at: float | None = None,
    ip: str | None = None,
) -> Pending:
    """A revisit to store (``PageStore.put_revisit``'s arguments), validated."""
    url_b = url_bytes(url)
    url_bytes(original_url)
    _check_status(status)
    if not original_digest or ":" not in original_digest:
        raise ValueError(f"original_digest must be a labelled digest: {original_digest!r}")
    return Pending(
        url=url,
        url_b=url_b,
        micros=micros_of(fetched_at),
        status=status,
        headers=normalize_headers(_check_headers(headers), None),
        body=None,
        ip=ip,
        digest=original_digest,
        truncated=False,
        revisit_of=original_url,
        orig_micros=to_micros(original_date),
    )


def _check_status(status: int) -> None:
    if not isinstance(status, int) or not 100 <= status <= 999:
        raise ValueError(f"HTTP status must be an int in 100..999: {status!r}")


def _check_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for h in headers:
        name, value = h
        out.append((str(name), str(value)))
    return out
