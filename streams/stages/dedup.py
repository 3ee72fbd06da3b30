"""content-dedup: exact duplicates by fingerprint, near-duplicates by simhash bands.

A page without words (no simhash) is keyed by its exact fingerprint. A page with
words is keyed by its simhash's first band: identical text has identical bands, so
exact duplicates still meet in one partition, and that first hop also checks the
exact `fingerprints` table. A message here normally carries no body: parse left it
in its worker's hand-off cache (streams/core/handoff.py) and sent the payload digest
and length instead. An exact duplicate goes on to link-extract marked `duplicate_of`
(stored as a WARC revisit); its links go on only when they can resolve elsewhere
than the original's (a copy at another URL: `copy_links_differ`).

A first copy then visits its simhash bands (band i's bucket lives in the partition of
band key i; `streams.core.simhash.band_step` explains why this finds every pair
within the distance whatever the interleaving, and it holds for any order of the
bands). The bands are visited grouped by partition (`band_route`): every band whose
partition is the one at hand is checked in the same step, so a page hops once per
*other* partition its bands live in, not once per band (with 4 partitions ~1.7 hops
instead of 3; with 1 partition none). A message's `band` field is the position in
that route. A page found within the distance of an earlier one goes to link-extract
marked `near_duplicate_of` and is logged; one that passes every band is a first
copy. Messages are batches, so a hop costs one message per partition per agent
batch, not one per page.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from mmh3 import hash64

import topology
from streams.core.partitioning import jump_hash
from streams.core.records import ParsedBatch, ParsedPage
from streams.core.simhash import band_step, bands, to_unsigned
from streams.core.urls import copy_links_differ
from streams.stages.context import Outbox, StageContext, crawl_log_record
from streams.store.warc import payload_digest

#: Entries kept per band bucket (a template family sharing a band must not make every
#: page scan millions); beyond it pages are still found through their other bands.
MAX_BUCKET = 256


def band_key(simhash: int, band: int, distance: int) -> str:
    """Table key (and partition key) of a page's simhash band ``band``."""
    return f"b{bands(to_unsigned(simhash), distance)[band]:x}"


def dedup_partition(ctx: StageContext, fingerprint: str, simhash: int | None, band: int) -> int:
    """The content-dedup partition of a page at route position ``band`` (0: band 0)."""
    distance = ctx.settings.crawl.near_dup_distance
    if simhash is None or distance < 0:
        return ctx.fingerprint_partition(fingerprint)
    return band_route(ctx, simhash, distance)[band][2]


#: Recent routes by (simhash, distance, partitions): parse computes a page's route and
#: each content-dedup hop computes it again (~11 µs each, ~3.7 times a page); bounded,
#: cleared when full (a page's hops follow its parse within a few batches).
_ROUTES: dict[tuple[int, int, int], list[tuple[int, str, int]]] = {}
_ROUTES_MAX = 4096


def band_route(ctx: StageContext, simhash: int, distance: int) -> list[tuple[int, str, int]]:
    """(band, band key, partition) in the order a page visits them: band 0 first (where
    exact duplicates meet), then the other bands of band 0's partition, then the rest
    grouped by partition. A function of the simhash alone, so every hop recomputes it
    (memoised: the list returned is shared, never to be changed)."""
    partitions = ctx.settings.kafka.partitions
    cache_key = (simhash, distance, partitions)
    route = _ROUTES.get(cache_key)
    if route is None:
        route = _route(bands(to_unsigned(simhash), distance), partitions)
        if len(_ROUTES) >= _ROUTES_MAX:
            _ROUTES.clear()
        _ROUTES[cache_key] = route
    return route


def _route(band_values: list[int], partitions: int) -> list[tuple[int, str, int]]:
    """`band_route`'s order, built without a sort key per entry: a page's route is
    computed at parse and again at a hop on another worker (with 2 partitions 12 µs
    a time through `ctx.fingerprint_partition` and a keyed sort, 10 µs here; most of
    it is the four hashes). The partition of a band key is `partition_for(key,
    partitions)` spelled out (tests/unit/test_neardup_stage.py checks both against the
    original sort on many simhashes)."""
    keys = [f"b{value:x}" for value in band_values]
    if partitions == 1:
        return [(band, key, 0) for band, key in enumerate(keys)]
    parts = [jump_hash(hash64(key.encode(), signed=False)[0], partitions) for key in keys]
    first = parts[0]
    route = [(0, keys[0], first)]
    others: list[tuple[int, int, str]] = []
    for band in range(1, len(keys)):
        if parts[band] == first:
            route.append((band, keys[band], first))
        else:
            others.append((parts[band], band, keys[band]))
    if others:
        others.sort()  # by partition, then band (bands are distinct: keys never tie)
        route.extend((band, key, part) for part, band, key in others)
    return route


def handle(
    ctx: StageContext,
    batch: ParsedBatch,
    fingerprints: MutableMapping[str, dict[str, Any]],
    out: Outbox,
    band_table: MutableMapping[str, Any] | None = None,
) -> None:
    distance = ctx.settings.crawl.near_dup_distance
    for parsed in batch["pages"]:
        page = parsed["page"]
        url = page["url"]
        position = parsed.get("band") or 0
        if position == 0 and _exact_duplicate(ctx, parsed, fingerprints, out):
            continue
        simhash = parsed.get("simhash")
        if simhash is None or distance < 0 or band_table is None:
            out.add(topology.LINK_EXTRACT, ctx.url_partition(url), parsed)
            continue
        route = band_route(ctx, simhash, distance)
        here = route[min(position, len(route) - 1)][2]
        near: tuple[str, int] | None = None
        while position < len(route) and route[position][2] == here:
            band, key, _ = route[position]
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
            near = step.near
            if near is not None:
                break
            position += 1
        if near is not None:
            original, bits = near
            _log(out, parsed, "near-duplicate", f"near-duplicate of {original} (distance {bits})")
            out.add(
                topology.LINK_EXTRACT,
                ctx.url_partition(url),
                {**parsed, "near_duplicate_of": {"url": original, "distance": bits}},
            )
        elif position < len(route):
            out.add(topology.CONTENT_DEDUP, route[position][2], {**parsed, "band": position})
        else:
            out.add(topology.LINK_EXTRACT, ctx.url_partition(url), parsed)


def digest_of(parsed: ParsedPage) -> str:
    """The page's payload digest: parse took it (a stage dict built elsewhere may lack it)."""
    digest = parsed.get("digest")
    if digest:
        return digest
    body = parsed["page"]["body"]
    assert body is not None, "parse sends a digest with every body it hands off"
    return payload_digest(body)


def size_of(parsed: ParsedPage) -> int:
    """The body's length: carried with the page, whose body may be handed off."""
    if "size" in parsed:
        return int(parsed["size"])
    return len(parsed["page"]["body"] or b"")


def _log(out: Outbox, parsed: ParsedPage, outcome: str, reason: str) -> None:
    page = parsed["page"]
    out.log(
        crawl_log_record(
            page["url"],
            "content-dedup",
            outcome,
            status=page["status"],
            reason=reason,
            nbytes=size_of(parsed),
            depth=page["depth"],
        )
    )


def _exact_duplicate(
    ctx: StageContext,
    parsed: ParsedPage,
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
                "digest": digest_of(parsed),
                "fetched_at": page["fetched_at"],
            }
        return False
    _log(out, parsed, "duplicate", f"same content as {first['url']}")
    out.add(
        topology.LINK_EXTRACT,
        ctx.url_partition(url),
        {
            **parsed,
            "page": {**page, "body": b""},
            # A copy elsewhere links elsewhere (relative links): those links are its own.
            "links": parsed["links"]
            if copy_links_differ(url, first["url"], parsed.get("base"))
            else [],
            "duplicate_of": {
                "url": first["url"],
                "digest": first["digest"],
                "fetched_at": float(first["fetched_at"]),
            },
        },
    )
    return True


class DedupStage:
    """The content-dedup stage of one worker, over its fingerprint and band tables."""

    name = "content-dedup"
    decode = True
    count_items = True

    def __init__(
        self,
        ctx: StageContext,
        fingerprints: MutableMapping[str, dict[str, Any]],
        bands: MutableMapping[str, Any],
    ) -> None:
        self.ctx, self.fingerprints, self.bands = ctx, fingerprints, bands

    def step(self, partition: int, batch: ParsedBatch, out: Outbox) -> None:
        handle(self.ctx, batch, self.fingerprints, out, self.bands)
