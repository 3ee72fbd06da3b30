"""URL candidates as columns (`UrlPacked`): url_batch, and the new URLs of
frontier_event. Imports streams.codec.packing only."""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import Any

from streams.codec.packing import DecodeError, column, lines, unlines

#: The first bytes of every url_batch message (the candidates' numbers packed as bytes).
URL_LAYOUT = b"\x01\x04"

_URL = itemgetter("url")


def url_packed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """UrlCandidate dicts -> UrlPacked: the URLs and kinds as lines, the numbers as bytes."""
    url = tuple(map(_URL, rows))
    depth = column(rows, "depth", 0)
    priority = column(rows, "priority", 0)
    via = column(rows, "via", None)
    inlinks = column(rows, "inlinks", 1)
    kind = column(rows, "kind", "page")
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
        packed = lines(values)
        if packed is None:
            columns[f"{field}_lines"], columns[field] = "", list(values)
        else:
            columns[f"{field}_lines"], columns[field] = packed, []
    return columns


def url_rows_packed(columns: dict[str, Any]) -> list[dict[str, Any]]:
    """UrlPacked -> one dict per URL (every field set), checking the columns agree."""
    url = unlines(columns["url_lines"], columns["url"], "UrlPacked url")
    kind = unlines(columns["kind_lines"], columns["kind"], "UrlPacked kind")
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


def to_wire_url_batch(record: dict[str, Any]) -> dict[str, Any]:
    return {"layout": URL_LAYOUT, "urls": url_packed(record["urls"])}


def from_wire_url_batch(record: dict[str, Any]) -> dict[str, Any]:
    del record["layout"]  # checked before the record was read (streams.codec.wire.decode)
    record["urls"] = url_rows_packed(record["urls"])
    return record
