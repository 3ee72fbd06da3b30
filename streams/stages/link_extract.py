"""link-extract: store the page (WARC + index), then resolve and canonicalize its links.

A near-duplicate is stored whole (its bytes differ from the original's) with a
metadata record naming the original; its links are not extracted unless
`near_dup_extract_links` is set.

Runs in the partition of the page's host. Links are grouped by the partition of
*their* host, so one url-filter message carries every link of a batch of pages
bound for one partition.
"""

from __future__ import annotations

from typing import Any

import topology
from streams.core.freshness import RevisitSchedule
from streams.core.pagestore import PageStore
from streams.core.simhash import to_unsigned
from streams.core.urls import resolve, resolve_and_canonicalize
from streams.stages.context import Outbox, StageContext, crawl_log_record
from streams.stages.dedup import payload_digest


def _headers(page: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["name"], h["value"]) for h in page["headers"]]


def handle(
    ctx: StageContext,
    batch: dict[str, Any],
    store: PageStore,
    out: Outbox,
    revisits: RevisitSchedule | None = None,
) -> int:
    """Store every page of the batch with one index write batch; returns links emitted.

    Also the page's revisit record (this runs in the host's partition, so the
    ``revisits`` table follows the host): fingerprint, validators, next visit.
    """
    writes: list[dict[str, Any]] = []
    #: revisit records to write once the pages are stored (a record never runs ahead
    #: of the store: a kill in between means a second copy, never a lost page)
    visits: list[tuple[dict[str, Any], tuple[str, float] | None]] = []
    #: captures stored by this batch (its records are written after the store)
    batch_captures: dict[str, tuple[str, float]] = {}
    emitted = 0
    max_url = ctx.limits.max_url_bytes
    for parsed in batch["pages"]:
        page = parsed["page"]
        stored: tuple[str, float] | None = None
        duplicate = parsed.get("duplicate_of")
        if revisits is not None and not duplicate:
            stored, again = _stored_before(revisits, page, batch_captures.get(page["url"]))
            if again is not None:
                duplicate = again
            if stored is not None:
                batch_captures[page["url"]] = stored
        if revisits is not None and 200 <= page["status"] < 300:
            visits.append((parsed, stored))
        near = parsed.get("near_duplicate_of")
        if duplicate is SAME_CAPTURE:
            pass  # this very capture is stored already: read again after a rebalance
        elif duplicate:
            writes.append(
                {
                    "url": page["url"],
                    "original_url": duplicate["url"],
                    "original_digest": duplicate["digest"],
                    "original_date": duplicate["fetched_at"],
                    "status": page["status"],
                    "headers": _headers(page),
                    "fetched_at": page["fetched_at"],
                    "ip": page["ip"],
                }
            )
            if duplicate["url"] != page["url"] and not parsed["links"]:
                continue  # another page's copy linking where it does: its links are that page's
        else:
            write = {
                "url": page["url"],
                "status": page["status"],
                "headers": _headers(page),
                "body": page["body"],
                "fetched_at": page["fetched_at"],
                "ip": page["ip"],
                "truncated": page["truncated"],
            }
            if stored is not None:  # the body's digest, taken by _stored_before
                write["payload_digest"] = stored[0]
            if near:
                write["near_duplicate_of"] = near["url"]
                write["near_distance"] = near["distance"]
                if parsed.get("simhash") is not None:
                    write["simhash"] = to_unsigned(parsed["simhash"])
            writes.append(write)
        if parsed["nofollow"] or (near and not ctx.settings.near_dup_extract_links):
            continue
        base = page["url"]
        if parsed.get("base"):
            base = resolve(page["url"], parsed["base"]) or page["url"]
        depth = page["depth"] + 1
        for link in resolve_and_canonicalize(base, parsed["links"]):
            if len(link) > max_url:
                out.log(
                    crawl_log_record(
                        link[:4096],
                        "link-extract",
                        "filtered",
                        reason=f"link of {len(link)} bytes is over the {max_url}-byte limit",
                        depth=depth,
                    )
                )
                continue
            out.add(
                topology.URL_FILTER,
                ctx.url_partition(link),
                {"url": link, "depth": depth, "priority": 0, "via": page["url"]},
            )
            emitted += 1
    if writes:
        store.put_many(writes)
        ctx.counters.pages_stored += sum(1 for w in writes if "body" in w)
    if revisits is not None:
        for parsed, stored in visits:
            page = parsed["page"]
            revisits.fetched(
                page["url"],
                fingerprint=parsed["fingerprint"],
                headers=_headers(page),
                depth=page["depth"],
                stored=stored,
            )
    return emitted


#: `_stored_before`'s answer for a capture the page store holds already.
SAME_CAPTURE: dict[str, Any] = {}


def _stored_before(
    revisits: RevisitSchedule,
    page: dict[str, Any],
    in_batch: tuple[str, float] | None = None,
) -> tuple[tuple[str, float] | None, dict[str, Any] | None]:
    """Is this page's body stored for its URL already? At-least-once delivery brings a
    page here twice when a worker dies or a rebalance moves its host: the same capture
    read again (its offset was not committed), or the URL fetched again (its fetch was
    in flight). Returns the capture the store will hold (digest, fetch time) and, when
    the bytes are stored already, SAME_CAPTURE or the revisit-of-itself to write, so
    each URL keeps one response record and nothing is lost. ``in_batch``: the capture
    an earlier page of the same batch stored (its record is not written yet)."""
    if not 200 <= page["status"] < 300:
        return None, None
    digest = payload_digest(page["body"])
    if in_batch is not None:
        record: dict[str, Any] = {"digest": in_batch[0], "captured": in_batch[1]}
    else:
        record = revisits.record(page["url"]) or {}
    if record.get("digest") != digest or "captured" not in record:
        return (digest, page["fetched_at"]), None
    captured = float(record["captured"])
    if captured == page["fetched_at"]:
        return (digest, captured), SAME_CAPTURE
    return (digest, captured), {"url": page["url"], "digest": digest, "fetched_at": captured}
