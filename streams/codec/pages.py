"""The records that carry a page: page_batch (fetched pages, `PackedPage`) and
parsed_batch (parsed pages, `ParsedPage`), with a page's headers as lines. Imports
streams.codec.packing only."""

from __future__ import annotations

import struct
from typing import Any

from streams.codec.packing import DecodeError, lines, unlines

#: The first bytes of every page_batch message (a page's numbers and strings packed).
PAGE_LAYOUT = b"\x01\x07"
#: The first bytes of every parsed_batch message (a page's numbers and flags as bytes,
#: its strings as one).
PARSED_LAYOUT = b"\x01\x05"


def _headers_wire(headers: Any) -> tuple[str, list[str], list[str]]:
    """A page's headers -> (header_lines, header_names, header_values)."""
    parts: list[str] = []
    for h in headers or ():
        parts.append(h["name"])
        parts.append(h["value"])
    packed = lines(parts)
    if packed is not None:
        return packed, [], []
    return "", parts[::2], parts[1::2]


def _headers_from_wire(
    header_lines: str, names: list[str], values: list[str], what: str
) -> list[dict[str, str]]:
    if header_lines:
        if names or values:
            raise DecodeError(f"{what}: headers both packed and listed")
        parts = unlines(header_lines, [], f"{what} header_lines")
        if len(parts) % 2:
            raise DecodeError(f"{what}: header_lines hold a name without a value")
        names, values = parts[::2], parts[1::2]
    elif len(names) != len(values):
        raise DecodeError(f"{what}: {len(names)} header names but {len(values)} header values")
    return [{"name": n, "value": v} for n, v in zip(names, values, strict=False)]


# --- page_batch: a fetched page ------------------------------------------------------

_TRUNCATED, _HANDOFF, _NOFOLLOW, _NOINDEX, _SIMHASH = 1, 2, 4, 8, 16

#: A fetched page's numbers and flags, then the lengths of its strings in `text`.
_FETCHED_NUMBERS = struct.Struct("<iiBdd3i")


def _page_packed(page: dict[str, Any]) -> dict[str, Any]:
    """A fetched page (stage dict) -> PackedPage: 5 Avro fields instead of 11."""
    url, ip = page["url"], page.get("ip")
    header_lines, header_names, header_values = _headers_wire(page.get("headers"))
    return {
        "numbers": _FETCHED_NUMBERS.pack(
            page["status"],
            page.get("depth", 0),
            _TRUNCATED if page.get("truncated") else 0,
            page["fetched_at"],
            page["elapsed_ms"],
            len(url),
            -1 if ip is None else len(ip),
            len(header_lines),
        ),
        "text": url + (ip or "") + header_lines,
        "header_names": header_names,
        "header_values": header_values,
        "body": page["body"],
    }


def _page_unpacked(wire: dict[str, Any]) -> dict[str, Any]:
    try:
        status, depth, flags, fetched_at, elapsed_ms, n_url, n_ip, n_headers = (
            _FETCHED_NUMBERS.unpack(wire["numbers"])
        )
    except struct.error as exc:
        raise DecodeError(f"PackedPage: numbers are not {_FETCHED_NUMBERS.size} bytes") from exc
    text = wire["text"]
    if (
        flags & ~_TRUNCATED
        or min(n_url, n_headers) < 0
        or n_ip < -1
        or n_url + max(n_ip, 0) + n_headers != len(text)
    ):
        raise DecodeError(
            f"PackedPage: flags {flags:#x} or lengths {(n_url, n_ip, n_headers)} "
            f"do not fit a text of {len(text)}"
        )
    ip = None if n_ip < 0 else text[n_url : n_url + n_ip]
    return {
        "url": text[:n_url],
        "status": status,
        "headers": _headers_from_wire(
            text[n_url + max(n_ip, 0) :], wire["header_names"], wire["header_values"], "PackedPage"
        ),
        "body": wire["body"],
        "fetched_at": fetched_at,
        "elapsed_ms": elapsed_ms,
        "ip": ip,
        "depth": depth,
        "truncated": bool(flags & _TRUNCATED),
    }


def to_wire_page_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"layout": PAGE_LAYOUT, "pages": [_page_packed(p) for p in record["pages"]]}


def from_wire_page_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"pages": [_page_unpacked(p) for p in record["pages"]]}


# --- parsed_batch: a parsed page -----------------------------------------------------

#: A parsed page's numbers and flags, then the lengths of its strings in `text` (the
#: `numbers` field of ParsedPage).
_PAGE_NUMBERS = struct.Struct("<iiiBqqdd8i")
_FLAGS = _TRUNCATED | _HANDOFF | _NOFOLLOW | _NOINDEX | _SIMHASH


def _parsed_packed(item: dict[str, Any]) -> dict[str, Any]:
    """A parsed page (stage dict) -> ParsedPage: its numbers and flags as bytes, its
    strings as one (fastavro pays per field; a join and the slices cost ~0.05 µs each)."""
    page = item["page"]
    body = page["body"]
    digest = item.get("digest") or ""
    simhash = item.get("simhash")
    flags = (
        (_TRUNCATED if page.get("truncated") else 0)
        | (_NOFOLLOW if item.get("nofollow") else 0)
        | (_NOINDEX if item.get("noindex") else 0)
        | (0 if simhash is None else _SIMHASH)
    )
    size = item["size"] if "size" in item else len(body or b"")
    if body is None:
        if not digest:
            raise ValueError("ParsedPage: a page handed off without its body needs its digest")
        flags |= _HANDOFF
        body = b""
    header_lines, header_names, header_values = _headers_wire(page.get("headers"))
    links = item["links"]
    link_lines = lines(links)
    if link_lines is None:
        link_lines = ""
    else:
        links = []
    url, ip, fingerprint, title, base = (
        page["url"],
        page.get("ip"),
        item["fingerprint"],
        item.get("title", ""),
        item.get("base"),
    )
    strings = (url, ip or "", digest, fingerprint, title, base or "", header_lines, link_lines)
    return {
        "numbers": _PAGE_NUMBERS.pack(
            page["status"],
            page.get("depth", 0),
            item.get("band", 0),
            flags,
            size,
            simhash or 0,
            page["fetched_at"],
            page["elapsed_ms"],
            len(url),
            -1 if ip is None else len(ip),
            len(digest),
            len(fingerprint),
            len(title),
            -1 if base is None else len(base),
            len(header_lines),
            len(link_lines),
        ),
        "text": "".join(strings),
        "header_names": header_names,
        "header_values": header_values,
        "links": links,
        "body": body,
        "duplicate_of": item.get("duplicate_of"),
        "near_duplicate_of": item.get("near_duplicate_of"),
    }


def _parsed_unpacked(wire: dict[str, Any]) -> dict[str, Any]:
    """ParsedPage -> the stage's dict of a parsed page, with its page's dict."""
    try:
        (status, depth, band, flags, size, simhash, fetched_at, elapsed_ms, *lengths) = (
            _PAGE_NUMBERS.unpack(wire["numbers"])
        )
    except struct.error as exc:
        raise DecodeError(f"ParsedPage: numbers are not {_PAGE_NUMBERS.size} bytes") from exc
    if flags & ~_FLAGS:
        raise DecodeError(f"ParsedPage: unknown flags {flags:#x}")
    text = wire["text"]
    n_url, n_ip, n_digest, n_fingerprint, n_title, n_base, n_headers, n_links = lengths
    if (
        min(n_url, n_digest, n_fingerprint, n_title, n_headers, n_links) < 0
        or n_ip < -1
        or n_base < -1
        or sum(lengths) + (n_ip < 0) + (n_base < 0) != len(text)
    ):
        raise DecodeError(f"ParsedPage: string lengths {lengths} do not cut a text of {len(text)}")
    end = n_url
    url = text[:end]
    ip = None
    if n_ip >= 0:
        ip = text[end : end + n_ip]
        end += n_ip
    digest = text[end : end + n_digest]
    end += n_digest
    fingerprint = text[end : end + n_fingerprint]
    end += n_fingerprint
    title = text[end : end + n_title]
    end += n_title
    base = None
    if n_base >= 0:
        base = text[end : end + n_base]
        end += n_base
    header_lines = text[end : end + n_headers]
    link_lines = text[end + n_headers :]
    body = wire["body"]
    if flags & _HANDOFF:
        if body:
            raise DecodeError("ParsedPage: body both handed off and inline")
        if not digest:
            raise DecodeError("ParsedPage: body handed off without its digest")
        body = None
    page = {
        "url": url,
        "status": status,
        "headers": _headers_from_wire(
            header_lines, wire["header_names"], wire["header_values"], "ParsedPage"
        ),
        "body": body,
        "fetched_at": fetched_at,
        "elapsed_ms": elapsed_ms,
        "ip": ip,
        "depth": depth,
        "truncated": bool(flags & _TRUNCATED),
    }
    return {
        "page": page,
        "digest": digest,
        "size": size,
        "fingerprint": fingerprint,
        "title": title,
        "links": unlines(link_lines, wire["links"], "ParsedPage links"),
        "base": base,
        "nofollow": bool(flags & _NOFOLLOW),
        "noindex": bool(flags & _NOINDEX),
        "duplicate_of": wire["duplicate_of"],
        "simhash": simhash if flags & _SIMHASH else None,
        "band": band,
        "near_duplicate_of": wire["near_duplicate_of"],
    }


def to_wire_parsed_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"layout": PARSED_LAYOUT, "pages": [_parsed_packed(p) for p in record["pages"]]}


def from_wire_parsed_batch(record: dict[str, Any]) -> dict[str, Any]:
    del record["layout"]  # checked before the record was read (streams.codec.wire.decode)
    record["pages"] = [_parsed_unpacked(p) for p in record["pages"]]
    return record
