"""parse: HTML → title, links, <base>, meta robots and the content fingerprint."""

from __future__ import annotations

from typing import Any

import topology
from streams.core.parsing import charset_from_headers, parse_html
from streams.stages.context import Outbox, StageContext


def handle(ctx: StageContext, batch: dict[str, Any], out: Outbox) -> None:
    for page in batch["pages"]:
        doc = parse_html(page["body"], charset_from_headers(page["headers"]))
        out.add(
            topology.CONTENT_DEDUP,
            ctx.fingerprint_partition(doc.fingerprint),
            {
                "page": page,
                "fingerprint": doc.fingerprint,
                "title": doc.title,
                "links": doc.links,
                "base": doc.base,
                "nofollow": doc.nofollow,
                "noindex": doc.noindex,
                "duplicate_of": None,
            },
        )
