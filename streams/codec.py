"""The Avro codec, registered once and used by every stage.

Topics carry raw bytes and each stage decodes with `decode(schema, data)` itself,
rather than letting Faust deserialize: a message that is not the schema must end
in dead-letters with a reason, and a Faust value_serializer would swallow that
error before the agent ever sees the message. fastavro's schemaless encoding is
~7 µs a record here against ~49 µs for the reference `avro` package.

What goes on the wire is not always the shape the stages handle. fastavro pays
~0.4 µs per field of every record it writes or reads, so a batch of many small
records costs a lot more than its bytes: the URL candidates of `url_batch` and of
`frontier_event` travel as columns (`UrlPacked`, `UrlColumns`), the URLs and kinds
of `url_batch`, a page's headers and a parsed page's links as one string of lines
(or, when one holds a line feed, as arrays: fastavro reads a string of an array in
~0.37 µs, a split ~0.05), and `url_batch`'s numbers as one bytes field of 32-bit
ints (fastavro pays ~0.2 µs an int of an array each way, struct ~0.01); a parsed
page's numbers and flags travel as one bytes field too, and its strings joined as
one string cut by lengths kept with the numbers (26 Avro fields a page -> 8), and
so do a frontier event's fetch completions (one record for all of them). `encode`
turns the stages' dicts into that wire form and `decode` turns it back (`wire_form`
shows the wire record), so a stage still sees one dict per URL with every field
set, and one dict per header.

fastavro's `schemaless_writer`/`schemaless_reader` re-resolve the schema's named
types on every call (~4 µs a message); the codec calls the compiled
`write_data`/`_read_data` underneath them with the names resolved once, and falls
back to the public functions when that fastavro build lacks them.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from itertools import repeat
from operator import itemgetter
from typing import Any

import fastavro

from streams.core.urlstate import RETIER_VIA
from streams.store.warc import payload_digest

_compiled_read: Any
_compiled_write: Any
try:  # the compiled fastavro internals under schemaless_writer/reader
    from fastavro import _read as _compiled_read
    from fastavro import _write as _compiled_write
except ImportError:  # pragma: no cover - pure-Python fastavro build
    _compiled_read = _compiled_write = None
_fast_read: Any = getattr(_compiled_read, "_read_data", None)
_fast_write: Any = getattr(_compiled_write, "write_data", None)

#: Parse order matters: later schemas refer to named types of earlier ones.
SCHEMA_FILES = (
    "seed",
    "url_batch_v1",
    "url_batch_v2",
    "url_batch",
    "frontier_event_v1",
    "frontier_event_v2",
    "frontier_event",
    "fetch_batch_v1",
    "fetch_batch",
    "page_batch_v1",
    "page_batch",
    "parsed_batch_v2",
    "parsed_batch",
    "parsed_batch_v1",
    "crawl_log",
    "dead_letter",
)

_WRITE_OPTIONS = {"strict": False, "strict_allow_default": False, "disable_tuple_notation": False}
_READ_OPTIONS = {
    "return_record_name": False,
    "return_record_name_override": False,
    "return_named_type": False,
    "return_named_type_override": False,
    "handle_unicode_errors": "strict",
}


#: The first bytes of every parsed_batch message of the current layout (a page's
#: numbers and flags as bytes). A message of the oldest layout starts with its page
#: count, an Avro long that fastavro writes as a zigzag varint of a count >= 0: its
#: first byte is even or has the high bit set, never 0x01 (which would be a negative
#: block count).
PARSED_LAYOUT = b"\x01\x05"
#: The marker of parsed_batch_v2 (the body hand-off, a page's numbers as Avro fields).
PARSED_LAYOUT_V2 = b"\x01\x02"
#: The same for url_batch (the candidates' numbers packed as bytes); its oldest
#: layout starts with the count of its `url` array.
URL_LAYOUT = b"\x01\x04"
#: The marker of url_batch_v2 (the URLs and kinds as lines, the numbers as arrays).
URL_LAYOUT_V2 = b"\x01\x03"
#: The same for frontier_event (its candidates and completions packed, re-tier slots
#: a field of their own); its oldest layout starts with the count of its candidates'
#: `url` array.
FRONTIER_LAYOUT = b"\x01\x09"
#: The marker of frontier_event_v2 (a re-tier request's slot inside its via string).
FRONTIER_LAYOUT_V2 = b"\x01\x06"
#: The same for page_batch (a page's numbers and strings packed); its older layout
#: starts with its page count.
PAGE_LAYOUT = b"\x01\x07"
#: The same for fetch_batch (its requests as columns); its older layout starts with
#: its request count.
FETCH_LAYOUT = b"\x01\x08"
#: Schemas with older layouts still read: (the current layout's marker, the schema of
#: each older marked layout by its marker, the schema of the unmarked oldest layout).
_OLDER_LAYOUT: dict[str, tuple[bytes, dict[bytes, str], str]] = {
    "parsed_batch": (PARSED_LAYOUT, {PARSED_LAYOUT_V2: "parsed_batch_v2"}, "parsed_batch_v1"),
    "url_batch": (URL_LAYOUT, {URL_LAYOUT_V2: "url_batch_v2"}, "url_batch_v1"),
    "frontier_event": (
        FRONTIER_LAYOUT,
        {FRONTIER_LAYOUT_V2: "frontier_event_v2"},
        "frontier_event_v1",
    ),
    "page_batch": (PAGE_LAYOUT, {}, "page_batch_v1"),
    "fetch_batch": (FETCH_LAYOUT, {}, "fetch_batch_v1"),
}


class DecodeError(ValueError):
    """The bytes are not a valid record of the expected schema."""


@cache
def _parsed() -> tuple[dict[str, Any], dict[str, Any]]:
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    for name in SCHEMA_FILES:
        text = resources.files("schemas").joinpath(f"{name}.avsc").read_text("utf-8")
        parsed[name] = fastavro.parse_schema(json.loads(text), named_schemas=named)
    return parsed, named


def schema(name: str) -> Any:
    """The parsed wire schema of `name`."""
    try:
        return _parsed()[0][name]
    except KeyError:
        raise KeyError(f"no Avro schema named {name!r}; known: {', '.join(SCHEMA_FILES)}") from None


# --- URL candidates as columns -----------------------------------------------------


def _url_columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """UrlCandidate dicts -> UrlColumns; a missing field takes the schema's default."""
    vias: dict[str | None, int] = {None: 0}
    return {
        "url": [r["url"] for r in rows],
        "depth": [r.get("depth", 0) for r in rows],
        "priority": [r.get("priority", 0) for r in rows],
        # setdefault's second argument is evaluated first: a new via gets the next index
        "via": [vias.setdefault(r.get("via"), len(vias)) for r in rows],
        "vias": list(vias)[1:],
        "inlinks": [r.get("inlinks", 1) for r in rows],
        "kind": [r.get("kind", "page") for r in rows],
    }


def _url_lines(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """UrlCandidate dicts -> UrlLines: the columns, with the URLs and kinds as lines."""
    columns = _url_columns(rows)
    for field in ("url", "kind"):
        lines = _lines(columns[field])
        if lines is None:
            columns[f"{field}_lines"] = ""
        else:
            columns[f"{field}_lines"], columns[field] = lines, []
    return columns


def _column(rows: list[dict[str, Any]], field: str, default: Any) -> tuple[Any, ...]:
    """`field` of every row, `default` where a row lacks it: dict.get mapped at C speed
    (~0.03 µs a row against ~0.07 for a comprehension of `get`s)."""
    return tuple(map(dict.get, rows, repeat(field), repeat(default)))


def _url_packed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """UrlCandidate dicts -> UrlPacked: the URLs and kinds as lines, the numbers as bytes."""
    url = tuple(map(_URL, rows))
    depth = _column(rows, "depth", 0)
    priority = _column(rows, "priority", 0)
    via = _column(rows, "via", None)
    inlinks = _column(rows, "inlinks", 1)
    kind = _column(rows, "kind", "page")
    # via i > 0 is vias[i - 1], in order of first use; 0 is None ("" is a via of its own)
    distinct = dict.fromkeys(via)
    distinct.pop(None, None)
    index: dict[str | None, int] = dict(zip(distinct, range(1, len(distinct) + 1), strict=True))
    index[None] = 0
    # struct.error for a number that is not a 32-bit int (an Avro int), as encode says
    numbers = struct.pack(
        f"<{4 * len(url)}i", *depth, *priority, *map(index.__getitem__, via), *inlinks
    )
    columns: dict[str, Any] = {"numbers": numbers, "vias": list(distinct)}
    for field, values in (("url", url), ("kind", kind)):
        lines = _lines(values)
        if lines is None:
            columns[f"{field}_lines"], columns[field] = "", list(values)
        else:
            columns[f"{field}_lines"], columns[field] = lines, []
    return columns


_URL = itemgetter("url")


def _url_rows_packed(columns: dict[str, Any]) -> list[dict[str, Any]]:
    """UrlPacked -> one dict per URL (every field set), checking the columns agree."""
    url = _unlines(columns["url_lines"], columns["url"], "UrlPacked url")
    kind = _unlines(columns["kind_lines"], columns["kind"], "UrlPacked kind")
    n = len(url)
    raw = columns["numbers"]
    if len(kind) != n or len(raw) != 16 * n:
        raise DecodeError(
            f"UrlPacked: columns of different lengths (url {n}, kind {len(kind)}, "
            f"numbers {len(raw)} bytes for {n} x 4 32-bit integers)"
        )
    numbers = struct.unpack(f"<{4 * n}i", raw)
    via = numbers[2 * n : 3 * n]
    lookup: list[str | None] = [None, *columns["vias"]]
    if n and (min(via) < 0 or max(via) >= len(lookup)):
        raise DecodeError(f"UrlPacked: a via index is outside 0..{len(lookup) - 1}")
    return [
        {"url": u, "depth": d, "priority": p, "via": lookup[v], "inlinks": i, "kind": k}
        for u, d, p, v, i, k in zip(
            url, numbers[:n], numbers[n : 2 * n], via, numbers[3 * n :], kind, strict=False
        )
    ]


def _url_rows(columns: dict[str, Any], what: str = "UrlColumns") -> list[dict[str, Any]]:
    """UrlColumns -> one dict per URL (every field set), checking the columns agree."""
    url = columns["url"]
    n = len(url)
    depth, priority, via = columns["depth"], columns["priority"], columns["via"]
    inlinks, kind = columns["inlinks"], columns["kind"]
    if not len(depth) == len(priority) == len(via) == len(inlinks) == len(kind) == n:
        raise DecodeError(
            f"{what}: columns of different lengths "
            f"(url {n}, depth {len(depth)}, priority {len(priority)}, via {len(via)}, "
            f"inlinks {len(inlinks)}, kind {len(kind)})"
        )
    lookup: list[str | None] = [None, *columns["vias"]]
    if n and (min(via) < 0 or max(via) >= len(lookup)):
        raise DecodeError(f"{what}: a via index is outside 0..{len(lookup) - 1}")
    return [
        {"url": u, "depth": d, "priority": p, "via": lookup[v], "inlinks": i, "kind": k}
        for u, d, p, v, i, k in zip(url, depth, priority, via, inlinks, kind, strict=False)
    ]


# --- strings packed into one: a page's headers and links -----------------------------


def _lines(strings: Sequence[str]) -> str | None:
    """The strings each followed by a LF, or None when one of them holds a LF itself
    (then they travel as an Avro array): fastavro costs ~0.2 µs a string of an array
    each way, a join or a split ~0.02."""
    if not strings:
        return ""
    joined = "\n".join(strings) + "\n"
    return joined if joined.count("\n") == len(strings) else None


def _unlines(lines: str, strings: list[str], what: str) -> list[str]:
    if not lines:
        return strings
    if strings:
        raise DecodeError(f"{what}: both packed and listed")
    if not lines.endswith("\n"):
        raise DecodeError(f"{what}: packed lines do not end with a LF")
    out = lines.split("\n")
    out.pop()
    return out


def _headers_wire(headers: Any) -> tuple[str, list[str], list[str]]:
    """A page's headers -> (header_lines, header_names, header_values)."""
    parts: list[str] = []
    for h in headers or ():
        parts.append(h["name"])
        parts.append(h["value"])
    lines = _lines(parts)
    if lines is not None:
        return lines, [], []
    return "", parts[::2], parts[1::2]


def _page_wire(page: dict[str, Any]) -> dict[str, Any]:
    lines, names, values = _headers_wire(page.get("headers"))
    return {**page, "header_lines": lines, "header_names": names, "header_values": values}


def _headers_from_wire(
    lines: str, names: list[str], values: list[str], what: str
) -> list[dict[str, str]]:
    if lines:
        if names or values:
            raise DecodeError(f"{what}: headers both packed and listed")
        parts = _unlines(lines, [], f"{what} header_lines")
        if len(parts) % 2:
            raise DecodeError(f"{what}: header_lines hold a name without a value")
        names, values = parts[::2], parts[1::2]
    elif len(names) != len(values):
        raise DecodeError(f"{what}: {len(names)} header names but {len(values)} header values")
    return [{"name": n, "value": v} for n, v in zip(names, values, strict=False)]


def _page_from_wire(page: dict[str, Any]) -> dict[str, Any]:
    page["headers"] = _headers_from_wire(
        page.pop("header_lines"), page.pop("header_names"), page.pop("header_values"), "FetchedPage"
    )
    return page


#: A parsed page's numbers and flags, then the lengths of its strings in `text` (the
#: `numbers` field of ParsedPage).
_PAGE_NUMBERS = struct.Struct("<iiiBqqdd8i")
_TRUNCATED, _HANDOFF, _NOFOLLOW, _NOINDEX, _SIMHASH = 1, 2, 4, 8, 16
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
    link_lines = _lines(links)
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
        "links": _unlines(link_lines, wire["links"], "ParsedPage links"),
        "base": base,
        "nofollow": bool(flags & _NOFOLLOW),
        "noindex": bool(flags & _NOINDEX),
        "duplicate_of": wire["duplicate_of"],
        "simhash": simhash if flags & _SIMHASH else None,
        "band": band,
        "near_duplicate_of": wire["near_duplicate_of"],
    }


def _parsed_wire(item: dict[str, Any]) -> dict[str, Any]:
    page = item["page"]
    body = page["body"]
    handoff = body is None
    if handoff:
        if not item.get("digest"):
            raise ValueError("ParsedPage: a page handed off without its body needs its digest")
        page = {**page, "body": b""}
    links = item["links"]
    lines = _lines(links)
    wire = {
        **item,
        "page": _page_wire(page),
        "handoff": handoff,
        "digest": item.get("digest") or "",
        "size": item["size"] if "size" in item else len(body or b""),
    }
    if lines is None:
        wire["link_lines"] = ""
    else:
        wire["link_lines"], wire["links"] = lines, []
    return wire


def _parsed_from_wire(item: dict[str, Any]) -> dict[str, Any]:
    page = _page_from_wire(item["page"])
    if item.pop("handoff"):
        if page["body"]:
            raise DecodeError("ParsedPage: body both handed off and inline")
        if not item["digest"]:
            raise DecodeError("ParsedPage: body handed off without its digest")
        page["body"] = None
    item["links"] = _unlines(item.pop("link_lines"), item["links"], "ParsedPage links")
    return item


def _parsed_from_v1(item: dict[str, Any]) -> dict[str, Any]:
    """A page of the older layout (body inline, no digest or size): as the stages see
    one of the current layout whose body travelled inline."""
    page = _page_from_wire(item["page"])
    item["links"] = _unlines(item.pop("link_lines"), item["links"], "ParsedPage links")
    item["digest"] = payload_digest(page["body"])
    item["size"] = len(page["body"])
    return item


def _to_wire_url_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"layout": URL_LAYOUT, "urls": _url_packed(record["urls"])}


def _from_wire_url_batch(record: dict[str, Any]) -> dict[str, Any]:
    if record.pop("layout") != URL_LAYOUT:
        raise DecodeError("url_batch: unknown layout marker")
    record["urls"] = _url_rows_packed(record["urls"])
    return record


def _to_wire_url_batch_v2(record: dict[str, Any]) -> dict[str, Any]:
    """The older layout, for tests that play an older Seine's messages."""
    return {"layout": URL_LAYOUT_V2, "urls": _url_lines(record["urls"])}


def _from_wire_url_batch_v2(record: dict[str, Any]) -> dict[str, Any]:
    if record.pop("layout") != URL_LAYOUT_V2:
        raise DecodeError("url_batch_v2: unknown layout marker")
    columns = record["urls"]
    columns["url"] = _unlines(columns.pop("url_lines"), columns["url"], "UrlLines url")
    columns["kind"] = _unlines(columns.pop("kind_lines"), columns["kind"], "UrlLines kind")
    record["urls"] = _url_rows(columns, "UrlLines")
    return record


def _to_wire_url_batch_v1(record: dict[str, Any]) -> dict[str, Any]:
    """The older layout, for tests that play an older Seine's messages."""
    return {"urls": _url_columns(record["urls"])}


def _from_wire_url_batch_v1(record: dict[str, Any]) -> dict[str, Any]:
    record["urls"] = _url_rows(record["urls"])
    return record


def _to_wire_frontier_event_v1(record: dict[str, Any]) -> dict[str, Any]:
    """The oldest layout, for tests that play an older Seine's messages."""
    return {**record, "new_urls": _url_columns(_slots_in_vias(record.get("new_urls") or []))}


#: A fetch completion's numbers and flags, then the lengths of its strings in `text`.
_COMPLETION = struct.Struct("<iBdddd5i")
_RETRY_AFTER, _WITH_BODY = 1, 2


def _completions_packed(completions: list[dict[str, Any]]) -> dict[str, Any]:
    """FetchCompletion dicts -> PackedCompletions: ~1 Avro field a completion instead of 11."""
    numbers = bytearray()
    strings: list[str] = []
    bodies: list[bytes] = []
    pack = _COMPLETION.pack
    for c in completions:
        url, host, kind, outcome = c["url"], c["host"], c["kind"], c["outcome"]
        reason = c.get("reason", "")
        retry_after, body = c.get("retry_after"), c.get("body")
        flags = (0 if retry_after is None else _RETRY_AFTER) | (0 if body is None else _WITH_BODY)
        if body is not None:
            bodies.append(body)
        numbers += pack(
            c["status"],
            flags,
            c["elapsed_ms"],
            c["finished_at"],
            c.get("dispatched_at", 0.0),
            retry_after or 0.0,
            len(url),
            len(host),
            len(kind),
            len(outcome),
            len(reason),
        )
        strings += (url, host, kind, outcome, reason)
    return {"numbers": bytes(numbers), "text": "".join(strings), "bodies": bodies}


def _completions_unpacked(columns: dict[str, Any]) -> list[dict[str, Any]]:
    numbers, text, bodies = columns["numbers"], columns["text"], columns["bodies"]
    if len(numbers) % _COMPLETION.size:
        raise DecodeError(
            f"PackedCompletions: {len(numbers)} bytes of numbers, "
            f"not a multiple of {_COMPLETION.size}"
        )
    out: list[dict[str, Any]] = []
    end = taken = 0
    for status, flags, elapsed, finished, dispatched, retry, *lengths in _COMPLETION.iter_unpack(
        numbers
    ):
        if flags & ~(_RETRY_AFTER | _WITH_BODY) or min(lengths) < 0:
            raise DecodeError(f"PackedCompletions: unknown flags {flags:#x} or lengths {lengths}")
        n_url, n_host, n_kind, n_outcome, n_reason = lengths
        url = text[end : end + n_url]
        end += n_url
        host = text[end : end + n_host]
        end += n_host
        kind = text[end : end + n_kind]
        end += n_kind
        outcome = text[end : end + n_outcome]
        end += n_outcome
        reason = text[end : end + n_reason]
        end += n_reason
        body = None
        if flags & _WITH_BODY:
            if taken == len(bodies):
                raise DecodeError("PackedCompletions: fewer bodies than flagged")
            body = bodies[taken]
            taken += 1
        out.append(
            {
                "url": url,
                "host": host,
                "kind": kind,
                "status": status,
                "outcome": outcome,
                "elapsed_ms": elapsed,
                "finished_at": finished,
                "retry_after": retry if flags & _RETRY_AFTER else None,
                "body": body,
                "dispatched_at": dispatched,
                "reason": reason,
            }
        )
    if end != len(text) or taken != len(bodies):
        raise DecodeError(
            f"PackedCompletions: lengths cut {end} of {len(text)} characters, "
            f"{taken} of {len(bodies)} bodies flagged"
        )
    return out


#: A re-tier request's slot: its index in new_urls, the slot's tier and sequence.
_RETIER_SLOT = struct.Struct("<iiq")


def _to_wire_frontier_event(record: dict[str, Any]) -> dict[str, Any]:
    new_urls = record.get("new_urls") or []
    pack = _RETIER_SLOT.pack
    slots = b"".join(
        pack(i, *c["slot"]) for i, c in enumerate(new_urls) if c.get("slot") is not None
    )
    return {
        "layout": FRONTIER_LAYOUT,
        "new_urls": _url_packed(new_urls),
        "retier_slots": slots,
        "completions": _completions_packed(record.get("completions") or []),
        "tick": record.get("tick", False),
    }


def _from_wire_frontier_event(record: dict[str, Any]) -> dict[str, Any]:
    if record["layout"] != FRONTIER_LAYOUT:
        raise DecodeError("frontier_event: unknown layout marker")
    new_urls = _url_rows_packed(record["new_urls"])
    slots = record["retier_slots"]
    if slots:
        if len(slots) % _RETIER_SLOT.size:
            raise DecodeError(f"frontier_event: retier_slots of {len(slots)} bytes")
        for index, tier, seq in _RETIER_SLOT.iter_unpack(slots):
            if not 0 <= index < len(new_urls):
                raise DecodeError(
                    f"frontier_event: a retier slot for URL {index} of {len(new_urls)}"
                )
            new_urls[index]["slot"] = (tier, seq)
    return {
        "new_urls": new_urls,
        "completions": _completions_unpacked(record["completions"]),
        "tick": record["tick"],
    }


#: How an older url-seen wrote a re-tier request's slot into its via: ``retier:TIER:SEQ``.
_OLD_RETIER_PREFIX = RETIER_VIA + ":"


def _to_wire_frontier_event_v2(record: dict[str, Any]) -> dict[str, Any]:
    """The older layout, for tests that play an older Seine's messages: a re-tier
    request's slot went inside its via, ``retier:TIER:SEQ``."""
    return {
        "layout": FRONTIER_LAYOUT_V2,
        "new_urls": _url_packed(_slots_in_vias(record.get("new_urls") or [])),
        "completions": _completions_packed(record.get("completions") or []),
        "tick": record.get("tick", False),
    }


def _slots_in_vias(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Re-tier requests as an older url-seen wrote them (tests): the slot in the via."""
    return [
        {**c, "via": f"{_OLD_RETIER_PREFIX}{c['slot'][0]}:{c['slot'][1]}"}
        if c.get("slot") is not None
        else c
        for c in candidates
    ]


def _slots_from_vias(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An older layout's re-tier requests, as the current one decodes them: the slot an
    older url-seen wrote inside the via (``retier:TIER:SEQ``) taken out into ``slot``
    and the via left ``retier``; a malformed one is left without a slot (the
    frontier then asks the registry, as for a bare ``retier``)."""
    for candidate in candidates:
        via = candidate.get("via")
        if via is None or not via.startswith(_OLD_RETIER_PREFIX):
            continue
        candidate["via"] = RETIER_VIA
        tier, sep, seq = via[len(_OLD_RETIER_PREFIX) :].partition(":")
        try:
            if sep:
                candidate["slot"] = (int(tier), int(seq))
        except ValueError:
            pass
    return candidates


def _from_wire_frontier_event_v2(record: dict[str, Any]) -> dict[str, Any]:
    if record["layout"] != FRONTIER_LAYOUT_V2:
        raise DecodeError("frontier_event_v2: unknown layout marker")
    return {
        "new_urls": _slots_from_vias(_url_rows_packed(record["new_urls"])),
        "completions": _completions_unpacked(record["completions"]),
        "tick": record["tick"],
    }


def _to_wire_page_batch_v1(record: dict[str, Any]) -> dict[str, Any]:
    """The older layout, for tests that play an older Seine's messages."""
    return {"pages": [_page_wire(p) for p in record["pages"]]}


def _from_wire_page_batch_v1(record: dict[str, Any]) -> dict[str, Any]:
    for page in record["pages"]:
        _page_from_wire(page)
    return record


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


#: A fetch request's numbers, then the lengths of its strings in `text`.
_REQUEST = struct.Struct("<idq3i")


def _to_wire_fetch_batch(record: dict[str, Any]) -> dict[str, Any]:
    """FetchRequest dicts -> PackedRequests: 2 Avro fields a batch instead of 6 a request."""
    numbers = bytearray()
    strings: list[str] = []
    pack = _REQUEST.pack
    for r in record["requests"]:
        url, host, kind = r["url"], r["host"], r["kind"]
        numbers += pack(
            r.get("depth", 0),
            r["dispatched_at"],
            r.get("url_id", 0),
            len(url),
            len(host),
            len(kind),
        )
        strings += (url, host, kind)
    return {
        "layout": FETCH_LAYOUT,
        "requests": {"numbers": bytes(numbers), "text": "".join(strings)},
    }


def _from_wire_fetch_batch(record: dict[str, Any]) -> dict[str, Any]:
    if record["layout"] != FETCH_LAYOUT:
        raise DecodeError("fetch_batch: unknown layout marker")
    numbers, text = record["requests"]["numbers"], record["requests"]["text"]
    if len(numbers) % _REQUEST.size:
        raise DecodeError(
            f"PackedRequests: {len(numbers)} bytes of numbers, not a multiple of {_REQUEST.size}"
        )
    requests: list[dict[str, Any]] = []
    end = 0
    for depth, dispatched_at, url_id, n_url, n_host, n_kind in _REQUEST.iter_unpack(numbers):
        if min(n_url, n_host, n_kind) < 0:
            raise DecodeError(f"PackedRequests: a negative length {(n_url, n_host, n_kind)}")
        host_at = end + n_url
        kind_at = host_at + n_host
        end = kind_at + n_kind
        requests.append(
            {
                "url": text[host_at - n_url : host_at],
                "host": text[host_at:kind_at],
                "kind": text[kind_at:end],
                "depth": depth,
                "dispatched_at": dispatched_at,
                "url_id": url_id,
            }
        )
    if end != len(text):
        raise DecodeError(f"PackedRequests: lengths cut {end} of {len(text)} characters")
    return {"requests": requests}


def _to_wire_page_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"layout": PAGE_LAYOUT, "pages": [_page_packed(p) for p in record["pages"]]}


def _from_wire_page_batch(record: dict[str, Any]) -> dict[str, Any]:
    if record["layout"] != PAGE_LAYOUT:
        raise DecodeError("page_batch: unknown layout marker")
    return {"pages": [_page_unpacked(p) for p in record["pages"]]}


def _to_wire_parsed_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"layout": PARSED_LAYOUT, "pages": [_parsed_packed(p) for p in record["pages"]]}


def _from_wire_parsed_batch(record: dict[str, Any]) -> dict[str, Any]:
    if record.pop("layout") != PARSED_LAYOUT:
        raise DecodeError("parsed_batch: unknown layout marker")
    record["pages"] = [_parsed_unpacked(p) for p in record["pages"]]
    return record


def _to_wire_parsed_batch_v2(record: dict[str, Any]) -> dict[str, Any]:
    """The older layout, for tests that play an older Seine's messages."""
    return {"layout": PARSED_LAYOUT_V2, "pages": [_parsed_wire(p) for p in record["pages"]]}


def _from_wire_parsed_batch_v2(record: dict[str, Any]) -> dict[str, Any]:
    if record.pop("layout") != PARSED_LAYOUT_V2:
        raise DecodeError("parsed_batch_v2: unknown layout marker")
    for item in record["pages"]:
        _parsed_from_wire(item)
    return record


def _to_wire_parsed_batch_v1(record: dict[str, Any]) -> dict[str, Any]:
    """The older layout, for tests that play an older Seine's messages."""
    pages = []
    for item in record["pages"]:
        lines = _lines(item["links"])
        wire = {**item, "page": _page_wire(item["page"]), "link_lines": lines or ""}
        if lines is not None:
            wire["links"] = []
        pages.append(wire)
    return {"pages": pages}


def _from_wire_parsed_batch_v1(record: dict[str, Any]) -> dict[str, Any]:
    for item in record["pages"]:
        _parsed_from_v1(item)
    return record


Convert = Callable[[dict[str, Any]], dict[str, Any]]

#: Per schema: stage dict -> wire record. Schemas not listed travel as they are.
_TO_WIRE: dict[str, Convert] = {
    "url_batch": _to_wire_url_batch,
    "url_batch_v1": _to_wire_url_batch_v1,
    "url_batch_v2": _to_wire_url_batch_v2,
    "frontier_event": _to_wire_frontier_event,
    "frontier_event_v1": _to_wire_frontier_event_v1,
    "frontier_event_v2": _to_wire_frontier_event_v2,
    "page_batch": _to_wire_page_batch,
    "fetch_batch": _to_wire_fetch_batch,
    "page_batch_v1": _to_wire_page_batch_v1,
    "parsed_batch": _to_wire_parsed_batch,
    "parsed_batch_v2": _to_wire_parsed_batch_v2,
    "parsed_batch_v1": _to_wire_parsed_batch_v1,
}
#: Per schema: decoded wire record -> stage dict (may reuse the wire record's parts).
_FROM_WIRE: dict[str, Convert] = {
    "url_batch": _from_wire_url_batch,
    "url_batch_v1": _from_wire_url_batch_v1,
    "url_batch_v2": _from_wire_url_batch_v2,
    "frontier_event": _from_wire_frontier_event,
    "frontier_event_v1": lambda r: {**r, "new_urls": _slots_from_vias(_url_rows(r["new_urls"]))},
    "frontier_event_v2": _from_wire_frontier_event_v2,
    "page_batch": _from_wire_page_batch,
    "fetch_batch": _from_wire_fetch_batch,
    "page_batch_v1": _from_wire_page_batch_v1,
    "parsed_batch": _from_wire_parsed_batch,
    "parsed_batch_v2": _from_wire_parsed_batch_v2,
    "parsed_batch_v1": _from_wire_parsed_batch_v1,
}


def wire_form(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """The record as it goes on the wire (what a plain Avro reader of the topic sees)."""
    convert = _TO_WIRE.get(name)
    return record if convert is None else convert(record)


def encode(name: str, record: dict[str, Any]) -> bytes:
    parsed, named = _parsed()
    try:
        wire_schema = parsed[name]
    except KeyError:
        schema(name)  # raises the KeyError that names the known schemas
        raise
    convert = _TO_WIRE.get(name)
    if convert is not None:
        try:
            record = convert(record)
        except (KeyError, TypeError, AttributeError, struct.error) as exc:
            raise ValueError(f"{name}: the record does not fit the schema ({exc!r})") from exc
    if _fast_write is None:  # pragma: no cover
        out = io.BytesIO()
        fastavro.schemaless_writer(out, wire_schema, record)
        return out.getvalue()
    buf = bytearray()
    _fast_write(buf, record, wire_schema, named, "", _WRITE_OPTIONS)
    return bytes(buf)


def decode(name: str, data: bytes) -> dict[str, Any]:
    """Decode exactly one record; trailing bytes or a short read are errors."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"{name}: expected bytes, got {type(data).__name__}")
    older = _OLDER_LAYOUT.get(name)
    if older is not None:
        marker = bytes(data[:2])
        if marker != older[0]:
            # an older layout, as an older Seine left it in a resumed crawl's topics
            marked = older[1].get(marker)
            if marked is not None:
                return decode(marked, data)
            try:
                return decode(older[2], data)
            except DecodeError as exc:
                raise DecodeError(
                    f"{name}: neither the current layout (it does not start with the "
                    f"layout marker {older[0].hex(' ')}) nor the older one ({exc})"
                ) from exc
    parsed, named = _parsed()
    wire_schema = parsed[name] if name in parsed else schema(name)
    buf = io.BytesIO(data)
    try:
        if _fast_read is None:  # pragma: no cover
            record = fastavro.schemaless_reader(buf, wire_schema, None)
        else:
            names = {"writer": named, "reader": {}}
            record = _fast_read(buf, wire_schema, names, None, _READ_OPTIONS)
    except Exception as exc:  # fastavro raises many types on garbage
        raise DecodeError(f"{name}: not a valid Avro record ({type(exc).__name__}: {exc})") from exc
    if buf.tell() != len(data):
        raise DecodeError(f"{name}: {len(data) - buf.tell()} trailing bytes after the record")
    if not isinstance(record, dict):
        raise DecodeError(f"{name}: decoded to {type(record).__name__}, not a record")
    convert = _FROM_WIRE.get(name)
    return record if convert is None else convert(record)
