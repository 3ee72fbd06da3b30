"""The records around a fetch: fetch_batch (the requests a frontier partition made
due, `PackedRequests`) and frontier_event (new URLs, the fetches' completions
`PackedCompletions`, re-tier slots, ticks). Imports streams.codec.packing and
streams.codec.urls only."""

from __future__ import annotations

import struct
from typing import Any

from streams.codec.packing import DecodeError
from streams.codec.urls import url_packed, url_rows_packed

#: The first bytes of every fetch_batch message (its requests as columns).
FETCH_LAYOUT = b"\x01\x08"
#: The first bytes of every frontier_event message (its candidates and completions
#: packed, re-tier slots a field of their own).
FRONTIER_LAYOUT = b"\x01\x09"

#: A fetch request's numbers, then the lengths of its strings in `text`.
_REQUEST = struct.Struct("<idq3i")


def to_wire_fetch_batch(record: dict[str, Any]) -> dict[str, Any]:
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


def from_wire_fetch_batch(record: dict[str, Any]) -> dict[str, Any]:
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


def to_wire_frontier_event(record: dict[str, Any]) -> dict[str, Any]:
    new_urls = record.get("new_urls") or []
    pack = _RETIER_SLOT.pack
    slots = b"".join(
        pack(i, *c["slot"]) for i, c in enumerate(new_urls) if c.get("slot") is not None
    )
    return {
        "layout": FRONTIER_LAYOUT,
        "new_urls": url_packed(new_urls),
        "retier_slots": slots,
        "completions": _completions_packed(record.get("completions") or []),
        "tick": record.get("tick", False),
    }


def from_wire_frontier_event(record: dict[str, Any]) -> dict[str, Any]:
    new_urls = url_rows_packed(record["new_urls"])
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
