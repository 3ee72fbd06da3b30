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
from streams.core.directives import canonical_from_link, x_robots_tag
from streams.core.doccache import DocumentCache
from streams.core.documents import MAX_ANCHORS, Outlink, canonical_id, document
from streams.core.parsing import charset_from_headers
from streams.core.records import CapturedPage
from streams.core.robots import agent_token
from streams.core.text import PageText, page_text
from streams.core.urls import resolve, resolve_and_canonicalize
from streams.stages.context import Outbox, StageContext, crawl_log_record
from streams.store.pagestore import Capture

#: The crawl-log outcome of a canonical the document does not follow.
CANONICAL_IGNORED = "canonical-ignored"


def send_deletion(ctx: StageContext, out: Outbox, url: str) -> None:
    """Delete the document whose id is `url` (a no-op for an index without it)."""
    ctx.counters.deletions += 1
    cache: DocumentCache | None = getattr(ctx, "document_cache", None)
    if cache is not None:
        cache.drop(url)  # never sent again with new anchors
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
    ctx: StageContext,
    out: Outbox,
    page: CapturedPage,
    body: bytes,
    *,
    title: str,
    digest: str,
    simhash: int | None,
    base: str,
    anchors: list[str],
    text: PageText | None = None,
) -> tuple[str, list[Outlink]]:
    """Extract the page's text (unless `text` is it already) and send its document;
    returns its id (the URL, or the same-site canonical it names, which the caller
    queues) and its outlinks."""
    url = page["url"]
    headers: list[Mapping[str, str]] = list(page["headers"])
    if text is None:
        text = page_text(body, charset_from_headers(page["headers"]), agent_of(ctx))
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
    outlinks = _outlinks(base, text.links)
    said = x_robots_tag(
        [h["value"] for h in headers if h["name"].lower() == "x-robots-tag"], agent_of(ctx)
    )
    noarchive = said.noarchive or "noarchive" in text.robots or "none" in text.robots
    record: dict[str, Any] = dict(
        document(
            page,
            title=title,
            text=text,
            digest=digest,
            size=len(body),
            simhash=simhash,
            canonical_url=declared,
            outlinks=outlinks,
            anchors=anchors,
            noarchive=noarchive,
        )
    )
    encoded = codec.encode("document", record)
    cache: DocumentCache | None = getattr(ctx, "document_cache", None)
    if cache is not None:
        cache.put(url, doc_id, encoded)
    _send(ctx, out, doc_id, encoded)
    return doc_id, outlinks


def _send(ctx: StageContext, out: Outbox, doc_id: str, encoded: bytes) -> None:
    ctx.counters.documents += 1
    out.add_record(topology.DOCUMENTS, ctx.url_partition(doc_id), doc_id.encode("utf-8"), encoded)


def resend_cached(ctx: StageContext, out: Outbox, url: str, anchors: list[str]) -> bool:
    """Send again the document sent lately for `url`, with `anchors` in place of the
    ones it had; False when it is no longer in the worker's document cache."""
    cache: DocumentCache | None = getattr(ctx, "document_cache", None)
    cached = cache.get(url) if cache is not None else None
    if cache is None or cached is None:
        return False
    doc_id, encoded = cached
    record = codec.decode("document", encoded)
    record["anchors"] = anchors[:MAX_ANCHORS]
    encoded = codec.encode("document", record)
    cache.put(url, doc_id, encoded)
    _send(ctx, out, doc_id, encoded)
    return True


def _outlinks(base: str, links: list[tuple[str, str, bool]]) -> list[Outlink]:
    """The page's links resolved and canonicalized against `base` (not web URLs dropped)."""
    outlinks: list[Outlink] = []
    for (_href, anchor, nofollow), absolute in zip(
        links, _resolved(base, [href for href, _anchor, _nofollow in links]), strict=True
    ):
        if absolute is not None:
            outlinks.append({"url": absolute, "anchor": anchor, "nofollow": nofollow})
    return outlinks


def agent_of(ctx: StageContext) -> str:
    """The crawler's robots.txt token, lowercase ("seinebot" by default)."""
    settings = getattr(ctx, "settings", None)
    user_agent = getattr(getattr(settings, "fetch", None), "user_agent", "") or "SeineBot"
    return agent_token(user_agent).lower() or "seinebot"


def resend_document(
    ctx: StageContext,
    out: Outbox,
    capture: Capture,
    anchors: list[str],
    depth: int,
    simhash: int | None,
) -> str | None:
    """Send again the document of a stored page (new anchors came after it was sent),
    rebuilt from the page store: the same text, now with `anchors`; `simhash` as parse
    took it (kept in the page's revisit record). None (nothing sent) for a capture
    that is not a stored HTML page of its own, or a page that says noindex."""
    if capture.revisit_of or capture.near_duplicate_of or not 200 <= capture.status < 300:
        return None
    headers = [{"name": k, "value": v} for k, v in capture.headers]
    agent = agent_of(ctx)
    text = page_text(capture.body, charset_from_headers(headers), agent)
    said = x_robots_tag([h["value"] for h in headers if h["name"].lower() == "x-robots-tag"], agent)
    if said.noindex or "noindex" in text.robots or "none" in text.robots:
        return None
    page: CapturedPage = {
        "url": capture.url,
        "status": capture.status,
        "headers": headers,
        "body": None,
        "fetched_at": capture.fetched_at,
        "ip": capture.ip or "",
        "truncated": capture.truncated,
        "depth": depth,
    }
    base = capture.url
    if text.base:
        base = resolve(capture.url, text.base) or capture.url
    return send_document(
        ctx,
        out,
        page,
        capture.body,
        title=text.title,
        digest=capture.digest,
        simhash=simhash,
        base=base,
        anchors=anchors,
        text=text,
    )[0]


def _resolved(base: str, hrefs: list[str]) -> list[str | None]:
    """Each href resolved and canonicalized against `base` (None: not a web URL). One
    call for the page when every href resolves (the common case), else one a link."""
    together = resolve_and_canonicalize(base, hrefs, dedupe=False)
    if len(together) == len(hrefs):
        return list(together)
    out: list[str | None] = []
    for href in hrefs:
        found = resolve_and_canonicalize(base, [href])
        out.append(found[0] if found else None)
    return out
