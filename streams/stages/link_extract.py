"""link-extract: store the page (WARC + index), then resolve and canonicalize its links.

A near-duplicate is stored whole (its bytes differ from the original's) with a
metadata record naming the original; its links are not extracted unless
`near_dup_extract_links` is set.

Runs in the partition of the page's host. Links are grouped by the partition of
*their* host, so one url-filter message carries every link of a batch of pages
bound for one partition.

The body of a page comes from this worker's hand-off cache, where parse left it
(streams/core/handoff.py): parse and link-extract are keyed alike, so Faust gives
partition N of both to one worker. A body that is not there (the partition moved
since parse, the worker restarted, the cache evicted it) makes `_refetch` re-feed
the URL to the frontier, logged as "handoff-miss"; a duplicate, or a capture the
store holds already, needs no body.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import topology
from streams import codec
from streams.core.anchors import anchor_texts
from streams.core.documents import Outlink
from streams.core.freshness import UNREAD, RevisitSchedule
from streams.core.provenance import handoff_refeed
from streams.core.records import CapturedPage, NearDuplicateOf, ParsedBatch, ParsedPage
from streams.core.simhash import to_unsigned
from streams.core.urls import host_of, resolve, resolve_and_canonicalize, site_key
from streams.stages import documents
from streams.stages.context import Outbox, StageContext, crawl_log_record
from streams.stages.dedup import digest_of, size_of
from streams.store.pagestore import PageStore
from streams.store.storeset import SiblingStores
from streams.store.warc import payload_digest

log = logging.getLogger("seine.link-extract")


#: A page to write the revisit record of: (parsed page, headers, stored capture, the
#: URL's record as read before).
_Visit = tuple[ParsedPage, list[tuple[str, str]], tuple[str, float] | None, Any]


def _headers(page: CapturedPage) -> list[tuple[str, str]]:
    return [(h["name"], h["value"]) for h in page["headers"]]


def handle(
    ctx: StageContext,
    batch: ParsedBatch,
    store: PageStore,
    out: Outbox,
    revisits: RevisitSchedule | None = None,
    anchors: Mapping[str, Any] | None = None,
    siblings: SiblingStores | None = None,
) -> int:
    """Store every page of the batch with one index write batch; returns links emitted.

    Also the page's revisit record (this runs in the host's partition, so the
    ``revisits`` table follows the host): fingerprint, validators, next visit.

    A body handed off by parse is taken from this worker's hand-off cache; when it is
    not there the page is fetched again (`_refetch`) and nothing of it is stored now.
    When the batch fails, its dead letter keeps the bodies it took (as before the
    hand-off, when they were in the message).
    """
    taken: dict[int, bytes] = {}
    try:
        return _handle(ctx, batch, store, out, revisits, taken, anchors, siblings)
    except Exception as exc:
        exc.dead_letter_value = _with_bodies(ctx, batch, taken)  # type: ignore[attr-defined]
        raise


def _handle(
    ctx: StageContext,
    batch: ParsedBatch,
    store: PageStore,
    out: Outbox,
    revisits: RevisitSchedule | None,
    taken: dict[int, bytes],
    anchors: Mapping[str, Any] | None,
    siblings: SiblingStores | None,
) -> int:
    handoff = ctx.handoff
    writes: list[dict[str, Any]] = []
    #: revisit records to write once the pages are stored (a record never runs ahead
    #: of the store: a kill in between means a second copy, never a lost page)
    #: (and the URL's record as read before, when nothing else in the batch writes it)
    visits: list[_Visit] = []
    #: captures stored by this batch (its records are written after the store)
    batch_captures: dict[str, tuple[str, float]] = {}
    emitted = 0
    pages = batch["pages"]
    repeated = _repeated_urls(pages) if revisits is not None else set()
    for parsed in pages:
        page = parsed["page"]
        url = page["url"]
        body = page["body"]
        digest = digest_of(parsed)
        stored: tuple[str, float] | None = None
        #: this capture's body read back from the store: it is stored already
        restored = False
        previous: Any = UNREAD
        duplicate: Mapping[str, Any] | None = parsed.get("duplicate_of")
        if duplicate and store.fetched_since(url, page["fetched_at"]):
            # the revisit record of this very capture is stored: read again after a
            # kill or a rebalance, it would be a second record of one fetch
            duplicate = SAME_CAPTURE
        if revisits is not None and not duplicate and duplicate is not SAME_CAPTURE:
            if url not in repeated and 200 <= page["status"] < 300:
                previous = revisits.record(url)
            stored, again = _stored_before(
                revisits, page, batch_captures.get(url), digest, previous=previous
            )
            if again is not None:
                if again and handoff.refetching(url) == again["fetched_at"]:
                    # a refetch after a miss here, and the capture it replaces got
                    # stored meanwhile (its fetch result read again late)
                    again = SAME_CAPTURE
                duplicate = again
            elif stored is not None and store.fetched_since(url, page["fetched_at"]):
                # this very capture is in this worker's store already, its revisit
                # record lost with a kill before the changelog got it: read again
                duplicate = SAME_CAPTURE
        if duplicate is SAME_CAPTURE or duplicate:  # (SAME_CAPTURE is an empty dict)
            handoff.discard(url, digest)  # its bytes are stored already: not needed
        elif body is None:
            body, restored = _take_body(handoff, store, page, digest, siblings)
            if body is None:
                _refetch(ctx, out, parsed, revisits)
                continue  # nothing of it now: the refetch brings it here again
            taken[id(parsed)] = body
        if stored is not None:
            batch_captures[url] = stored
        headers = _headers(page)  # (neither the store nor the revisit record changes it)
        if revisits is not None and 200 <= page["status"] < 300:
            visits.append((parsed, headers, stored, previous))
        near = parsed.get("near_duplicate_of")
        if duplicate is SAME_CAPTURE:
            pass  # this very capture is stored already: read again after a rebalance
        elif duplicate:
            writes.append(_duplicate_write(page, headers, duplicate))
            if duplicate["url"] != url:  # a copy of another page: that page is the document
                documents.send_deletion(ctx, out, url)
                if not parsed["links"]:
                    continue  # its links are that page's
        else:
            assert body is not None  # (a first copy's body was taken above)
            # stored already (`restored`): its document still goes out
            writes += [] if restored else [_page_write(parsed, headers, body, stored, near)]
            _document(ctx, out, parsed, body, digest, near is not None, anchors)
        if parsed["nofollow"] or (near and not ctx.settings.crawl.near_dup_extract_links):
            continue
        emitted += _emit_links(ctx, out, parsed)
    if writes:
        store.put_many(writes, captures=False)
        ctx.counters.pages_stored += sum(1 for w in writes if "body" in w)
    if revisits is not None:
        _record_visits(revisits, visits)
    return emitted


def _take_body(
    handoff: Any,
    store: PageStore,
    page: CapturedPage,
    digest: str,
    siblings: SiblingStores | None = None,
) -> tuple[bytes | None, bool]:
    """The page's body from the hand-off cache, or else, when a page store has this
    very capture already, from that store: (body or None, read from a store).

    A store has it when a worker stored it and was killed, or lost the partition,
    before the message's offset was committed: the message is read again where the
    hand-off cache never held the body. That worker is this one (a restart), or
    another (`siblings`: the partition moved). Links and document come from the
    stored copy; fetching the page again would store it twice."""
    url, fetched_at = page["url"], page["fetched_at"]
    body = handoff.take(url, digest)
    if body is not None:
        return body, False
    capture = store.get(url) if store.fetched_since(url, fetched_at) else None
    if capture is None and siblings is not None:
        capture = siblings.capture_since(url, fetched_at)
    return (capture.body, True) if capture is not None else (None, False)


def _repeated_urls(pages: list[ParsedPage]) -> set[str]:
    """URLs that come more than once in this batch: each occurrence's revisit write
    changes the record the next one reads, so theirs are read afresh."""
    repeated: set[str] = set()
    once: set[str] = set()
    for parsed in pages:
        url = parsed["page"]["url"]
        if url in once:
            repeated.add(url)
        once.add(url)
    return repeated


def _duplicate_write(
    page: CapturedPage, headers: list[tuple[str, str]], duplicate: Mapping[str, Any]
) -> dict[str, Any]:
    """The page store write of a duplicate: a revisit record naming the original."""
    return {
        "url": page["url"],
        "original_url": duplicate["url"],
        "original_digest": duplicate["digest"],
        "original_date": duplicate["fetched_at"],
        "status": page["status"],
        "headers": headers,
        "fetched_at": page["fetched_at"],
        "ip": page["ip"],
    }


def _page_write(
    parsed: ParsedPage,
    headers: list[tuple[str, str]],
    body: bytes | None,
    stored: tuple[str, float] | None,
    near: NearDuplicateOf | None,
) -> dict[str, Any]:
    """The page store write of a page stored whole (a near-duplicate names its original)."""
    page = parsed["page"]
    write = {
        "url": page["url"],
        "status": page["status"],
        "headers": headers,
        "body": body,
        "fetched_at": page["fetched_at"],
        "ip": page["ip"],
        "truncated": page["truncated"],
    }
    if stored is not None:  # the body's digest, taken by parse
        write["payload_digest"] = stored[0]
    if near:
        write["near_duplicate_of"] = near["url"]
        write["near_distance"] = near["distance"]
        simhash = parsed.get("simhash")
        if simhash is not None:
            write["simhash"] = to_unsigned(simhash)
    return write


def _base(parsed: ParsedPage) -> str:
    """What the page's relative links resolve against: its <base href>, else its URL."""
    url = parsed["page"]["url"]
    base_href = parsed.get("base")
    return (resolve(url, base_href) or url) if base_href else url


def _document(
    ctx: StageContext,
    out: Outbox,
    parsed: ParsedPage,
    body: bytes,
    digest: str,
    near_duplicate: bool,
    anchors_table: Mapping[str, Any] | None,
) -> None:
    """Send the page's document, or delete it: noindex, or a near-duplicate of
    another page (that page is the document). A same-site canonical the page names
    is queued like a link of it."""
    page = parsed["page"]
    url = page["url"]
    if not 200 <= page["status"] < 300:
        return
    if parsed.get("noindex") or near_duplicate:
        documents.send_deletion(ctx, out, url)
        return
    anchors = anchor_texts(anchors_table.get(url)) if anchors_table is not None else []
    doc_id, outlinks = documents.send_document(
        ctx,
        out,
        page,
        body,
        title=parsed.get("title") or "",
        digest=digest,
        simhash=parsed.get("simhash"),
        base=_base(parsed),
        anchors=anchors,
    )
    _send_anchors(ctx, out, url, outlinks)
    if doc_id != url and len(doc_id) <= ctx.limits.max_url_bytes:
        out.add(
            topology.URL_FILTER,
            ctx.url_partition(doc_id),
            {"url": doc_id, "depth": page["depth"] + 1, "priority": 0, "via": url},
        )


def _send_anchors(ctx: StageContext, out: Outbox, url: str, outlinks: list[Outlink]) -> None:
    """Each followed link's anchor text, to the partition of the link's host (a link
    to the page itself says nothing about it to others)."""
    site = site_key(host_of(url))
    max_url = ctx.limits.max_url_bytes
    cap = ctx.settings.crawl.max_outlinks
    for link in outlinks[:cap] if cap > 0 else outlinks:
        target = link["url"]
        if link["nofollow"] or not link["anchor"] or target == url or len(target) > max_url:
            continue
        out.add(
            topology.ANCHORS,
            ctx.url_partition(target),
            {"url": target, "text": link["anchor"], "site": site},
        )


def _emit_links(ctx: StageContext, out: Outbox, parsed: ParsedPage) -> int:
    """Resolve and canonicalize the page's links and send each to url-filter in the
    partition of its host; a link over the URL length limit is logged as filtered,
    and the links past the first `max_outlinks` in one outlinks-capped record.
    Returns the links emitted."""
    page = parsed["page"]
    url = page["url"]
    max_url = ctx.limits.max_url_bytes
    cap = ctx.settings.crawl.max_outlinks
    emitted = 0
    base = _base(parsed)
    depth = page["depth"] + 1
    links = resolve_and_canonicalize(base, parsed["links"])
    if 0 < cap < len(links):
        out.log(
            crawl_log_record(
                url,
                "link-extract",
                "outlinks-capped",
                reason=f"{len(links) - cap} of {len(links)} links not followed "
                f"(--max-outlinks {cap})",
                depth=page["depth"],
            )
        )
        links = links[:cap]
    for link in links:
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
            {"url": link, "depth": depth, "priority": 0, "via": url},
        )
        emitted += 1
    return emitted


def _record_visits(
    revisits: RevisitSchedule,
    visits: list[_Visit],
) -> None:
    """Write the revisit records of the stored pages (after the store, never before)."""
    for parsed, headers, stored, previous in visits:
        page = parsed["page"]
        revisits.fetched(
            page["url"],
            fingerprint=parsed["fingerprint"],
            headers=headers,
            depth=page["depth"],
            stored=stored,
            previous=previous,
            simhash=parsed.get("simhash"),
        )


#: `_stored_before`'s answer for a capture the page store holds already.
SAME_CAPTURE: dict[str, Any] = {}


def _stored_before(
    revisits: RevisitSchedule,
    page: CapturedPage,
    in_batch: tuple[str, float] | None = None,
    digest: str | None = None,
    previous: Any = UNREAD,
) -> tuple[tuple[str, float] | None, dict[str, Any] | None]:
    """Is this page's body stored for its URL already? At-least-once delivery brings a
    page here twice when a worker dies or a rebalance moves its host: the same capture
    read again (its offset was not committed), or the URL fetched again (its fetch was
    in flight). Returns the capture the store will hold (digest, fetch time) and, when
    the bytes are stored already, SAME_CAPTURE or the revisit-of-itself to write, so
    each URL keeps one response record and nothing is lost. ``in_batch``: the capture
    an earlier page of the same batch stored (its record is not written yet).
    ``digest``: the body's payload digest as parse took it (the body itself may be in
    the hand-off cache still). ``previous``: the URL's revisit record, if the caller
    has read it already (it hands the same to `RevisitSchedule.fetched`)."""
    if not 200 <= page["status"] < 300:
        return None, None
    if digest is None:
        body = page["body"]
        assert body is not None, "parse sends a digest with every body it hands off"
        digest = payload_digest(body)
    if in_batch is not None:
        record: dict[str, Any] = {"digest": in_batch[0], "captured": in_batch[1]}
    else:
        if previous is UNREAD:
            previous = revisits.record(page["url"])
        record = previous or {}
    if record.get("digest") != digest or "captured" not in record:
        return (digest, page["fetched_at"]), None
    captured = float(record["captured"])
    if captured >= page["fetched_at"]:
        # this capture, or an older fetch of the same bytes read again late (after a
        # kill the hand-off refetch can beat the fetch result read again): nothing new
        return (digest, captured), SAME_CAPTURE
    return (digest, captured), {"url": page["url"], "digest": digest, "fetched_at": captured}


#: The crawl-log outcome of a page whose body was not in the hand-off cache.
HANDOFF_MISS = "handoff-miss"
#: Its reason, also in the worker's log (bench/faults.py counts those lines: each is
#: one fetch done again).
HANDOFF_MISS_REASON = (
    "body not in this worker's hand-off cache (partition moved since parse, worker "
    "restarted, or evicted under handoff_cache_bytes): fetching it again"
)


def _refetch(
    ctx: StageContext,
    out: Outbox,
    parsed: ParsedPage,
    revisits: RevisitSchedule | None,
) -> None:
    """A first copy whose body parse kept in another worker's memory, or in this one's
    before a restart or an eviction: fetch it again (a re-feed to the frontier of its
    host, outside the host's trap budgets: `Via.REFEED_HANDOFF`) and say so in the
    crawl log. The frontier skips the fetch if this capture is stored by the time it
    is due: after a rebalance the message that carried the body to parse is often read
    again by this worker, and stores the page itself. Nothing of it is stored or
    followed now; its revisit record is left naming the capture stored before, without
    the validators, so the refetch cannot be answered 304 against that older capture."""
    page = parsed["page"]
    url = page["url"]
    log.warning("link-extract: %s: %s", url, HANDOFF_MISS_REASON)
    ctx.handoff.note_refetch(url, page["fetched_at"])
    if revisits is not None:
        revisits.forget_validators(url)
    out.add_frontier(
        ctx.url_partition(url),
        "new_urls",
        {
            "url": url,
            "depth": page["depth"],
            "priority": 0,
            "via": handoff_refeed(page["fetched_at"]),
            "inlinks": 1,
            "kind": "page",
        },
    )
    out.log(
        crawl_log_record(
            url,
            "link-extract",
            HANDOFF_MISS,
            status=page["status"],
            reason=HANDOFF_MISS_REASON,
            nbytes=size_of(parsed),
            depth=page["depth"],
        )
    )


def _with_bodies(ctx: StageContext, batch: ParsedBatch, taken: dict[int, bytes]) -> bytes | None:
    """The batch as a dead letter should keep it: with the bodies it took from the
    hand-off cache (or that are still there) inline. None if that cannot be encoded
    (then the dead letter keeps the message as it came)."""
    try:
        pages = []
        for parsed in batch["pages"]:
            page = parsed["page"]
            body = page["body"]
            if body is None:
                body = taken.get(id(parsed))
                if body is None:
                    body = ctx.handoff.peek(page["url"], digest_of(parsed))
            pages.append(parsed if body is None else {**parsed, "page": {**page, "body": body}})
        return codec.encode("parsed_batch", {"pages": pages})
    except Exception:  # the original error is what matters
        return None


class LinkExtractStage:
    """The link-extract stage of one worker: stores pages, sends their links on."""

    name = "link-extract"
    decode = True
    count_items = True

    def __init__(
        self,
        ctx: StageContext,
        store: PageStore,
        revisits: RevisitSchedule | None,
        anchors: Mapping[str, Any] | None = None,
        *,
        siblings: SiblingStores | None = None,
    ) -> None:
        self.ctx, self.store, self.revisits, self.anchors = ctx, store, revisits, anchors
        self.siblings = siblings

    def step(self, partition: int, batch: ParsedBatch, out: Outbox) -> None:
        handle(self.ctx, batch, self.store, out, self.revisits, self.anchors, self.siblings)
