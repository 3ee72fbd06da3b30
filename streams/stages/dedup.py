"""content-dedup: the first page with a fingerprint goes on; later ones are duplicates.

Keyed by fingerprint, so identical pages from any host meet in one partition.
A duplicate goes on to link-extract without its body, marked `duplicate_of`, so
the page store records a WARC revisit pointing at the original and its links are
not extracted again.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import MutableMapping
from typing import Any

import topology
from streams.stages.context import Outbox, StageContext, crawl_log_record


def payload_digest(body: bytes) -> str:
    """The WARC payload digest of a body (sha1, base32), as the page store writes it."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def handle(
    ctx: StageContext,
    batch: dict[str, Any],
    fingerprints: MutableMapping[str, dict[str, Any]],
    out: Outbox,
) -> None:
    for parsed in batch["pages"]:
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
            out.add(topology.LINK_EXTRACT, ctx.url_partition(url), parsed)
            continue
        out.log(
            crawl_log_record(
                url,
                "content-dedup",
                "duplicate",
                status=page["status"],
                reason=f"same content as {first['url']}",
                nbytes=len(page["body"]),
                depth=page["depth"],
            )
        )
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
