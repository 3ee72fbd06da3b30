"""parse: HTML → title, links, <base>, meta robots (and the X-Robots-Tag header) and
the content fingerprints.

The body does not go on: parse keeps it in the worker's hand-off cache
(streams/core/handoff.py) under (URL, payload digest) and sends the parsed page with
the digest and the body's length. link-extract, which stores the page, runs in the
same worker for the same host partition and takes the body back there; content-dedup
needs only the digest. A body the cache cannot hold (it is off, or the body is larger
than its whole bound) travels inline, as it did before the hand-off.
"""

from __future__ import annotations

from typing import cast

import topology
from streams.core.directives import Directives, x_robots_tag
from streams.core.parsing import charset_from_headers, parse_pages
from streams.core.records import CapturedPage, PageBatch, ParsedPage
from streams.core.robots import agent_token
from streams.core.simhash import to_signed
from streams.stages.context import Outbox, StageContext
from streams.stages.dedup import dedup_partition
from streams.store.warc import payload_digest

NO_DIRECTIVES = Directives()


def header_directives(headers: list[dict[str, str]], agent: str) -> Directives:
    """The page's ``X-Robots-Tag`` directives for `agent` (robots.txt's token)."""
    values = [h["value"] for h in headers if h["name"].lower() == "x-robots-tag"]
    return x_robots_tag(values, agent) if values else NO_DIRECTIVES


def handle(ctx: StageContext, batch: PageBatch, out: Outbox) -> None:
    near = ctx.settings.crawl.near_dup_distance >= 0
    handoff = ctx.handoff
    agent = agent_token(ctx.settings.fetch.user_agent)
    pages = batch["pages"]
    docs = parse_pages(
        [(page["body"], charset_from_headers(page["headers"])) for page in pages],
        with_simhash=near,
        agent=agent,
    )
    for page, doc in zip(pages, docs, strict=True):
        simhash = None if doc.simhash is None else to_signed(doc.simhash)
        said = header_directives(page["headers"], agent)
        body = page["body"]
        digest = payload_digest(body)
        # the page itself when its body travels inline (a FetchedPage is a CapturedPage
        # whose body is set); a copy without the body only when the cache keeps it
        capture = cast(CapturedPage, page)
        if handoff.enabled and handoff.put(page["url"], digest, body):
            capture = {**capture, "body": None}
        parsed: ParsedPage = {
            "page": capture,
            "digest": digest,
            "size": len(body),
            "fingerprint": doc.fingerprint,
            "title": doc.title,
            "links": doc.links,
            "base": doc.base,
            "nofollow": doc.nofollow or said.nofollow,
            "noindex": doc.noindex or said.noindex,
            "duplicate_of": None,
            "simhash": simhash,
            "band": 0,
            "near_duplicate_of": None,
        }
        out.add(topology.CONTENT_DEDUP, dedup_partition(ctx, doc.fingerprint, simhash, 0), parsed)


class ParseStage:
    """The parse stage of one worker."""

    name = "parse"
    decode = True
    count_items = True

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx

    def step(self, partition: int, batch: PageBatch, out: Outbox) -> None:
        handle(self.ctx, batch, out)
