"""content-dedup: exact duplicates by fingerprint, near-duplicates by simhash bands.

A page without words (no simhash) is keyed by its exact fingerprint. A page with
words is keyed by its simhash's first band: identical text has identical bands, so
exact duplicates still meet in one partition, and that first hop also checks the
exact `fingerprints` table. An exact duplicate goes on to link-extract without its
body, marked `duplicate_of` (stored as a WARC revisit; links not extracted again).

A first copy then visits its simhash bands one partition at a time (band i's bucket
lives in the partition of band key i; `streams.core.simhash.band_step` explains why
this finds every pair within the distance whatever the interleaving). A page found
within the distance of an earlier one goes to link-extract marked
`near_duplicate_of` and is logged; one that passes every band is a first copy.
Messages are batches, so a hop costs one message per partition per agent batch, not
one per page.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import MutableMapping
from typing import Any

import topology
from streams.core.simhash import band_step, bands, to_unsigned
from streams.stages.context import Outbox, StageContext, crawl_log_record

#: Entries kept per band bucket (a template family sharing a band must not make every
#: page scan millions); beyond it pages are still found through their other bands.
MAX_BUCKET = 256


def payload_digest(body: bytes) -> str:
    """The WARC payload digest of a body (sha1, base32), as the page store writes it."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def band_key(simhash: int, band: int, distance: int) -> str:
    """Table key (and partition key) of a page's simhash band ``band``."""
    return f"b{bands(to_unsigned(simhash), distance)[band]:x}"


def dedup_partition(ctx: StageContext, fingerprint: str, simhash: int | None, band: int) -> int:
    """The content-dedup partition of a page at ``band`` (see the module docstring)."""
    distance = ctx.settings.near_dup_distance
    if simhash is None or distance < 0:
        return ctx.fingerprint_partition(fingerprint)
    return ctx.fingerprint_partition(band_key(simhash, band, distance))


def handle(
    ctx: StageContext,
    batch: dict[str, Any],
    fingerprints: MutableMapping[str, dict[str, Any]],
    out: Outbox,
    band_table: MutableMapping[str, Any] | None = None,
) -> None:
    distance = ctx.settings.near_dup_distance
    for parsed in batch["pages"]:
        page = parsed["page"]
        url = page["url"]
        band = parsed.get("band") or 0
        if band == 0 and _exact_duplicate(ctx, parsed, fingerprints, out):
            continue
        simhash = parsed.get("simhash")
        if simhash is None or distance < 0 or band_table is None:
            out.add(topology.LINK_EXTRACT, ctx.url_partition(url), parsed)
            continue
        key = band_key(simhash, band, distance)
        step = band_step(
            band_table.get(key),
            url,
            to_unsigned(simhash),
            band,
            threshold=distance,
            max_bucket=MAX_BUCKET,
        )
        if step.bucket is not None:
            band_table[key] = step.bucket
        if step.near is not None:
            original, bits = step.near
            _log(out, page, "near-duplicate", f"near-duplicate of {original} (distance {bits})")
            near = {"url": original, "distance": bits}
            out.add(
                topology.LINK_EXTRACT,
                ctx.url_partition(url),
                {**parsed, "near_duplicate_of": near},
            )
        elif step.next_band is not None:
            out.add(
                topology.CONTENT_DEDUP,
                dedup_partition(ctx, parsed["fingerprint"], simhash, step.next_band),
                {**parsed, "band": step.next_band},
            )
        else:
            out.add(topology.LINK_EXTRACT, ctx.url_partition(url), parsed)


def _log(out: Outbox, page: dict[str, Any], outcome: str, reason: str) -> None:
    out.log(
        crawl_log_record(
            page["url"],
            "content-dedup",
            outcome,
            status=page["status"],
            reason=reason,
            nbytes=len(page["body"]),
            depth=page["depth"],
        )
    )


def _exact_duplicate(
    ctx: StageContext,
    parsed: dict[str, Any],
    fingerprints: MutableMapping[str, dict[str, Any]],
    out: Outbox,
) -> bool:
    """Record the first page of a fingerprint; pass a later one on as a duplicate."""
    page = parsed["page"]
    url = page["url"]
    first = fingerprints.get(parsed["fingerprint"])
    if first is None or first["url"] == url:
        if first is None:
            fingerprints[parsed["fingerprint"]] = {
                "url": url,
                "digest": payload_digest(page["body"]),
                "fetched_at": page["fetched_at"],
            }
        return False
    _log(out, page, "duplicate", f"same content as {first['url']}")
    out.add(
        topology.LINK_EXTRACT,
        ctx.url_partition(url),
        {
            **parsed,
            "page": {**page, "body": b""},
            "links": [],
            "duplicate_of": {
                "url": first["url"],
                "digest": first["digest"],
                "fetched_at": float(first["fetched_at"]),
            },
        },
    )
    return True
