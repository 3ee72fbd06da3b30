"""anchors: the anchor texts of a page's inlinks, joined to its document.

link-extract sends each followed link's text to the partition of the link's
target host; here, in that partition, a table keeps a bounded set per target URL
(streams/core/anchors.py). link-extract reads it when it builds a page's document
(same host partition, same worker). When the other sites naming a page whose document
was sent reach 1, 2, 4, 8... the page is marked, and the worker's timer sends its
document again: every `Settings.crawl.anchor_refresh_interval` seconds, or at once
when the crawl is ending (nothing left to fetch, and anchors stopped coming), at most
RESEND_BATCH pages a tick, one document per page however many inlinks came
meanwhile. The document is the one sent lately (the worker's document cache) with
the new anchors, or, when it fell out, rebuilt from the page store. The marks live
in memory: a restart forgets them, and those pages' documents keep the anchors they
were sent with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import Any

from streams.core.anchors import add_anchor, anchor_texts, other_sites
from streams.core.freshness import RevisitSchedule
from streams.core.urls import host_of, site_key
from streams.stages import documents
from streams.stages.context import Outbox, StageContext
from streams.store.pagestore import PageStore

#: Pages whose documents one refresh sends again at most.
RESEND_BATCH = 2000
#: Seconds without anchors after which, when the crawl is ending, waiting pages are
#: sent at once: the last pages' links reach anchors a few hops after their fetch,
#: each hop tens of milliseconds.
QUIET = 0.25


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
        ending: Callable[[], bool] = lambda: True,
    ) -> None:
        self.ctx, self.table, self.store, self.revisits = ctx, table, store, revisits
        self.refresh_interval, self.clock, self.ending = refresh_interval, clock, ending
        #: Stored pages that got new anchors since their document was sent (ordered).
        self.dirty: dict[str, None] = {}
        self.refreshed_at = self.stepped_at = clock()
        self.resent = 0

    def step(self, partition: int, batch: dict[str, Any], out: Outbox) -> None:
        self.stepped_at = self.clock()
        # one read and at most one write per target URL of the message
        by_url: dict[str, list[tuple[str, str]]] = {}
        for anchor in batch["anchors"]:
            by_url.setdefault(anchor["url"], []).append((anchor["text"], anchor["site"]))
        for url, pairs in by_url.items():
            entry = self.table.get(url)
            changed = None
            for text, site in pairs:
                grown = add_anchor(changed if changed is not None else entry, text, site)
                if grown is not None:
                    changed = grown
            if changed is None:
                continue
            self.table[url] = changed
            # its document is out without these anchors: sent again when the sites
            # naming it reach 1, 2, 4, 8... (a site's own navigation, met on nearly
            # every page after, is in the document when it came first; each resend
            # costs a whole document, so they grow sparser as a page's anchors do)
            home = site_key(host_of(url))
            before, after = other_sites(entry, home), other_sites(changed, home)
            if after > before and after & (after - 1) == 0 and url in self.store:
                self.dirty[url] = None

    def due(self) -> bool:
        """Pages wait to be sent again, and the interval has passed since the last
        batch, or the crawl is ending (`ending`: nothing queued or in flight) and no
        anchor came for QUIET seconds: no more inlinks to wait for."""
        if not self.dirty:
            return False
        now = self.clock()
        if now - self.refreshed_at >= self.refresh_interval:
            return True
        return now - self.stepped_at >= QUIET and self.ending()

    def refresh(self, out: Outbox) -> int:
        """Send again the documents of up to RESEND_BATCH marked pages (the caller
        flushes `out`); returns how many were sent."""
        self.refreshed_at = self.clock()
        urls = list(self.dirty)[:RESEND_BATCH]
        sent = 0
        for url in urls:
            del self.dirty[url]
            anchors = anchor_texts(self.table.get(url))
            if documents.resend_cached(self.ctx, out, url, anchors):
                sent += 1
                continue
            # a copy of another page has no document of its own (resend_document
            # skips it): its original, maybe in another worker's store, is not read
            capture = self.store.get(url, follow_revisits=False)
            if capture is None:
                continue
            record = (self.revisits.record(url) if self.revisits is not None else None) or {}
            depth = int(record.get("depth") or 0)
            simhash = record.get("sh")
            resent = documents.resend_document(
                self.ctx,
                out,
                capture,
                anchors,
                depth,
                simhash if isinstance(simhash, int) else None,
            )
            if resent is not None:
                sent += 1
        self.resent += sent
        return sent
