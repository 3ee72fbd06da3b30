"""parse: HTML → title, links, <base>, meta robots and the content fingerprints."""

from __future__ import annotations

from typing import Any

import topology
from streams.core.parsing import charset_from_headers, parse_pages
from streams.core.simhash import to_signed
from streams.stages.context import Outbox, StageContext
from streams.stages.dedup import dedup_partition


def handle(ctx: StageContext, batch: dict[str, Any], out: Outbox) -> None:
    near = ctx.settings.near_dup_distance >= 0
    pages = batch["pages"]
    docs = parse_pages(
        [(page["body"], charset_from_headers(page["headers"])) for page in pages],
        with_simhash=near,
    )
    for page, doc in zip(pages, docs, strict=True):
        simhash = None if doc.simhash is None else to_signed(doc.simhash)
        out.add(
            topology.CONTENT_DEDUP,
            dedup_partition(ctx, doc.fingerprint, simhash, 0),
            {
                "page": page,
                "fingerprint": doc.fingerprint,
                "title": doc.title,
                "links": doc.links,
                "base": doc.base,
                "nofollow": doc.nofollow,
                "noindex": doc.noindex,
                "duplicate_of": None,
                "simhash": simhash,
                "band": 0,
                "near_duplicate_of": None,
            },
        )
