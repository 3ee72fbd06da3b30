"""anchors: the anchor texts of a page's inlinks, joined to its document.

link-extract sends each followed link's text to the partition of the link's
target host; here, in that partition, a table keeps a bounded set per target URL
(streams/core/anchors.py). link-extract reads it when it builds a page's document
(same host partition, same worker). Anchors from another site that come after the
document was sent mark the page, and the worker's timer sends its document again, at
most every
`Settings.crawl.anchor_refresh_interval` seconds and RESEND_BATCH pages at a time,
rebuilt from this worker's page store: one document per page per interval, however
many inlinks arrived meanwhile. The marks live in memory: a restart forgets them,
and those pages' documents keep the anchors they were sent with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import Any

from streams.core.anchors import add_anchor, anchor_texts
from streams.core.freshness import RevisitSchedule
from streams.core.urls import host_of, site_key
from streams.stages import documents
from streams.stages.context import Outbox, StageContext
from streams.store.pagestore import PageStore

#: Pages whose documents one refresh sends again at most.
RESEND_BATCH = 500


class AnchorsStage:
    """The anchors stage of one worker."""

    name = "anchors"
    decode = True
    count_items = True

    def __init__(
        self,
        ctx: StageContext,
        table: MutableMapping[str, Any],
        store: PageStore,
        revisits: RevisitSchedule | None,
        refresh_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx, self.table, self.store, self.revisits = ctx, table, store, revisits
        self.refresh_interval, self.clock = refresh_interval, clock
        #: Stored pages that got new anchors since their document was sent (ordered).
        self.dirty: dict[str, None] = {}
        self.refreshed_at = clock()
        self.resent = 0

    def step(self, partition: int, batch: dict[str, Any], out: Outbox) -> None:
        # one read and at most one write per target URL of the message
        by_url: dict[str, list[tuple[str, str]]] = {}
        for anchor in batch["anchors"]:
            by_url.setdefault(anchor["url"], []).append((anchor["text"], anchor["site"]))
        for url, pairs in by_url.items():
            entry = self.table.get(url)
            changed = None
            from_elsewhere = False
            for text, site in pairs:
                grown = add_anchor(changed if changed is not None else entry, text, site)
                if grown is not None:
                    changed = grown
                    from_elsewhere = from_elsewhere or site != site_key(host_of(url))
            if changed is None:
                continue
            self.table[url] = changed
            # its document is out without these anchors: sent again when another site
            # names it (a site's own navigation, met on nearly every page after, is
            # in the document when it came first, and is not worth sending it again)
            if from_elsewhere and url in self.store:
                self.dirty[url] = None

    def due(self) -> bool:
        return bool(self.dirty) and self.clock() - self.refreshed_at >= self.refresh_interval

    def refresh(self, out: Outbox) -> int:
        """Send again the documents of up to RESEND_BATCH marked pages (the caller
        flushes `out`); returns how many were sent."""
        self.refreshed_at = self.clock()
        urls = list(self.dirty)[:RESEND_BATCH]
        sent = 0
        for url in urls:
            del self.dirty[url]
            capture = self.store.get(url)
            if capture is None:
                continue
            record = self.revisits.record(url) if self.revisits is not None else None
            depth = int((record or {}).get("depth") or 0)
            anchors = anchor_texts(self.table.get(url))
            if documents.resend_document(self.ctx, out, capture, anchors, depth) is not None:
                sent += 1
        self.resent += sent
        return sent
