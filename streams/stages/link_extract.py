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
    emitted = 0
    max_url = ctx.limits.max_url_bytes
    for parsed in batch["pages"]:
        page = parsed["page"]
        if revisits is not None and 200 <= page["status"] < 300:
            revisits.fetched(
                page["url"],
                fingerprint=parsed["fingerprint"],
                headers=_headers(page),
                depth=page["depth"],
            )
        duplicate = parsed.get("duplicate_of")
        if duplicate:
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
            continue
        write = {
            "url": page["url"],
            "status": page["status"],
            "headers": _headers(page),
            "body": page["body"],
            "fetched_at": page["fetched_at"],
            "ip": page["ip"],
            "truncated": page["truncated"],
        }
        near = parsed.get("near_duplicate_of")
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
    return emitted
