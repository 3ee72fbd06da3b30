"""The documents topic as link-extract and fetch write it: a page's document under
its id, or a deletion (a null value) for an id whose page is gone, noindex, a
duplicate, or redirected away.

A document is keyed by its id (streams.core.documents.canonical_id: the page's
same-site canonical, else its URL) and sent to its host's partition, where the
indexer of the worker holding that partition applies it. Which canonical counts:
the ``Link`` header's or the head's; two that disagree are both ignored (the page
is its own id), as the major engines do with conflicting signals, and a
cross-site canonical is only recorded (crawl log, "canonical-ignored").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import topology
from streams import codec
from streams.core.directives import canonical_from_link
from streams.core.documents import Outlink, canonical_id, document
from streams.core.parsing import charset_from_headers
from streams.core.records import ParsedPage
from streams.core.text import page_text
from streams.core.urls import resolve_and_canonicalize
from streams.stages.context import Outbox, StageContext, crawl_log_record

#: The crawl-log outcome of a canonical the document does not follow.
CANONICAL_IGNORED = "canonical-ignored"


def send_deletion(ctx: StageContext, out: Outbox, url: str) -> None:
    """Delete the document whose id is `url` (a no-op for an index without it)."""
    ctx.counters.deletions += 1
    out.add_record(topology.DOCUMENTS, ctx.url_partition(url), url.encode("utf-8"), None)


def declared_canonical(
    ctx: StageContext, out: Outbox, url: str, headers: list[Mapping[str, str]], in_head: str
) -> str | None:
    """The canonical the page declares, as written, or None (none, or two that
    disagree: logged)."""
    linked = canonical_from_link(h["value"] for h in headers if h["name"].lower() == "link")
    named = {c for c in (linked, in_head) if c}
    if len(named) > 1:
        resolved = {canonical_id(url, c) for c in named}
        if len(resolved) > 1:
            out.log(
                crawl_log_record(
                    url,
                    "link-extract",
                    CANONICAL_IGNORED,
                    reason=f"conflicting canonicals: Link header {linked[:500] if linked else ''}"
                    f", HTML {in_head[:500]}",
                )
            )
            return None
    return linked or in_head or None


def send_document(
    ctx: StageContext, out: Outbox, parsed: ParsedPage, body: bytes, digest: str, base: str
) -> str:
    """Extract the page's text and send its document; returns its id (the URL, or the
    same-site canonical it names, which the caller queues)."""
    page = parsed["page"]
    url = page["url"]
    headers: list[Mapping[str, str]] = list(page["headers"])
    text = page_text(body, charset_from_headers(page["headers"]))
    declared = declared_canonical(ctx, out, url, headers, text.canonical)
    doc_id = canonical_id(url, declared)
    if declared and doc_id == url:  # not obeyed: cross-site, or the page itself
        target = resolve_and_canonicalize(url, [declared])
        if target and target[0] != url:
            out.log(
                crawl_log_record(
                    url,
                    "link-extract",
                    CANONICAL_IGNORED,
                    reason=f"cross-site canonical {target[0][:1000]} recorded, not followed",
                )
            )
    hrefs = [href for href, _anchor, _nofollow in text.links]
    outlinks: list[Outlink] = []
    for (_href, anchor, nofollow), absolute in zip(text.links, _resolved(base, hrefs), strict=True):
        if absolute is not None:
            outlinks.append({"url": absolute, "anchor": anchor, "nofollow": nofollow})
    record: dict[str, Any] = dict(
        document(
            page,
            title=parsed.get("title") or "",
            text=text,
            digest=digest,
            size=len(body),
            simhash=parsed.get("simhash"),
            canonical_url=declared,
            outlinks=outlinks,
        )
    )
    ctx.counters.documents += 1
    out.add_record(
        topology.DOCUMENTS,
        ctx.url_partition(doc_id),
        doc_id.encode("utf-8"),
        codec.encode("document", record),
    )
    return doc_id


def _resolved(base: str, hrefs: list[str]) -> list[str | None]:
    """Each href resolved and canonicalized against `base` (None: not a web URL)."""
    out: list[str | None] = []
    for href in hrefs:
        found = resolve_and_canonicalize(base, [href])
        out.append(found[0] if found else None)
    return out
