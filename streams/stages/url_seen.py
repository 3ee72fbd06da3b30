"""url-seen: pass a URL on the first time it is met, never again.

Per partition, a Bloom filter answers "definitely new" from memory; a "maybe
seen" is confirmed against the exact store, the URL registry in a Faust table
(:mod:`streams.tables.registry`: RocksDB keyed by site id + URL hash, one
WriteBatch and one changelog record per message), so a false positive costs one
lookup and never loses a URL. A partition's filter is rebuilt from the registry's
keys the first time this worker handles that partition, and again after any
rebalance that revoked or assigned it, before any of its URLs is judged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.core.bloom import BloomFilter
from streams.core.provenance import Via
from streams.core.records import UrlBatch, UrlCandidate
from streams.core.registry import InlinkChange, key_of
from streams.core.urls import host_of, site_key
from streams.core.urlstate import (
    FRONTIER_STATE,
    RESEND,
    STAMP,
    registration_stamp,
    resend_due,
    retier_candidate,
)
from streams.stages.context import Outbox, crawl_log_record

log = logging.getLogger("seine.url-seen")


@dataclass
class SeenFilters:
    """One Bloom filter per partition this worker owns."""

    capacity: int = 1_000_000
    error_rate: float = 0.01
    filters: dict[int, BloomFilter] = field(default_factory=dict)
    rebuild_seconds: dict[int, float] = field(default_factory=dict)
    false_positives: int = 0
    confirmed_seen: int = 0
    #: URLs sent to the frontier again: registered, never queued (see `handle`).
    resent: int = 0

    def drop(self, partition: int) -> None:
        """Forget a partition's filter (revoked or newly assigned: another worker may
        have registered URLs in it since this filter was built)."""
        self.filters.pop(partition, None)

    def for_partition(
        self, partition: int, seen_keys: Callable[[], Iterable[str | bytes]]
    ) -> BloomFilter:
        """The partition's filter, rebuilt from `seen_keys()` (that partition's registry
        keys) the first time it is asked for."""
        bloom = self.filters.get(partition)
        if bloom is None:
            started = time.monotonic()
            bloom = BloomFilter(self.capacity, self.error_rate)
            chunk: list[str | bytes] = []
            for url in seen_keys():
                chunk.append(url)
                if len(chunk) >= 65536:
                    bloom.add_many(chunk)
                    chunk = []
            if chunk:
                bloom.add_many(chunk)
            self.filters[partition] = bloom
            self.rebuild_seconds[partition] = round(time.monotonic() - started, 3)
            log.info(
                "url-seen filter for partition %d rebuilt from %d keys in %.2fs",
                partition,
                len(bloom),
                self.rebuild_seconds[partition],
            )
        return bloom


class SeenRegistry(Protocol):
    """The exact store url-seen writes to: :class:`~streams.tables.registry.RegistryTable`
    in the crawl (partition = the current event's), a
    :class:`~streams.store.url_registry.UrlRegistry` in unit tests."""

    def add_keyed(
        self,
        urls: Sequence[str],
        keys: Sequence[bytes],
        maybe_present: Sequence[bool] | None = None,
        found: dict[str, tuple[bytes, bytes]] | None = None,
        stamp: bytes = b"",
    ) -> list[bytes | None]: ...

    def set_states(self, states: Mapping[str, Mapping[str, Any]]) -> list[str]: ...

    def add_inlinks(
        self,
        counts: Mapping[str, int],
        found: Mapping[str, tuple[bytes, bytes]] | None = None,
    ) -> list[InlinkChange]: ...

    def states(self, urls: Sequence[str]) -> dict[str, dict[str, Any] | None]: ...


def handle(
    partition: int,
    batch: UrlBatch,
    seen: SeenRegistry,
    scope: MutableMapping[str, int],
    filters: SeenFilters,
    seen_keys: Callable[[int], Iterable[bytes]],
    out: Outbox,
    *,
    sitemap_ttl: float = 0.0,
    clock: Callable[[], float] = time.time,
    offset: int | None = None,
    resend_grace: float = 30.0,
) -> int:
    """Forward the new URLs of one batch to the frontier; returns how many were new.

    The Bloom filter holds the partition's *registry keys* (site id + hash of the
    rest of the URL), not the URLs: a "definitely not" then also says the key's slot
    is free, so a definitely-new URL is written with no read at all, and only the
    "maybe seen" ones cost a lookup (one multi-get for the batch). All new URLs go
    in one WriteBatch and one changelog record.

    A link to a URL already seen adds to the URL's in-link count in the registry
    (one more multi-get and WriteBatch for the batch); when the count lifts a URL
    that is still queued into a higher tier, the frontier is asked to move it
    (:func:`~streams.core.urlstate.retier_candidate`).

    A sitemap met again (its host's robots.txt was fetched again once its rules
    expired, `sitemap_ttl` = robots_ttl) is passed on again if its last fetch is at
    least `sitemap_ttl` old, so a sitemap is re-read as often as robots.txt and the
    entries added to it since are found (0: never re-read).

    Nothing registered is lost on the way to the frontier: each new URL's record is
    stamped with the time and `offset` (the url-seen message's), and a URL met again
    whose record still has no frontier state is sent again, marked `Via.RESEND`, when
    this message is the one that registered it (a redelivery: the first send may
    have died with a killed worker), when the record has no stamp, or when the stamp
    is `resend_grace` seconds old (:func:`~streams.core.urlstate.resend_due`); the
    stamp is then renewed. The frontier ignores a re-sent URL it has acted on.

    A seed also marks its site in `scope` (read by url-filter for --same-host);
    both tables live in the partition of the host, so no lookup crosses workers.
    A URL without a host (not from url-filter) is logged and skipped.
    """
    bloom = filters.for_partition(partition, lambda: seen_keys(partition))
    candidates, urls, keys = _keyed_candidates(batch["urls"], out)
    maybe = bloom.contains_many(keys)
    found: dict[str, tuple[bytes, bytes]] = {}
    now = clock()
    written = seen.add_keyed(urls, keys, maybe, found, registration_stamp(now, offset))
    new_keys: list[bytes] = []
    met = _MetAgain()
    # Plain locals for the loop below, the hot path:
    inlinks, sitemaps_again, resend, restamp = met.inlinks, met.sitemaps, met.resend, met.restamp
    confirmed = 0
    for candidate, url, maybe_seen, key in zip(candidates, urls, maybe, written, strict=True):
        via = candidate.get("via")
        if via == Via.SEED:
            site = site_key(host_of(url))
            if site not in scope:
                scope[site] = 1
        if key is None:
            # Seen before, or a repeat within this batch: the common case (most links
            # point at pages already met), kept to dict lookups and byte searches.
            confirmed += maybe_seen
            hit = found.get(url)
            # A value holding a frontier state needs nothing (resend_due's first test,
            # made here without the call: a canonical URL holds no quote).
            if hit is not None and hit[1].find(FRONTIER_STATE, 8) < 0 and url not in resend:
                due = resend_due(hit[1], now, offset, resend_grace)
                if due == RESEND:
                    resend[url] = {**candidate, "via": Via.RESEND}
                elif due == STAMP:
                    restamp.append(url)
            kind = candidate.get("kind", "page")
            # A link from a page or a sitemap entry counts as an in-link; a seed or a
            # redirect target met again is not one more page pointing at the URL.
            if kind == "page" and via and via != Via.SEED and not via.startswith(Via.REDIRECT):
                inlinks[url] = inlinks.get(url, 0) + int(candidate.get("inlinks") or 1)
            elif sitemap_ttl > 0 and kind == "sitemap":
                sitemaps_again.append(candidate)
            continue
        if maybe_seen:
            filters.false_positives += 1
        new_keys.append(key)
        out.add_frontier(partition, "new_urls", candidate)
    filters.confirmed_seen += confirmed
    if new_keys:
        bloom.add_many(new_keys)
    met.act(partition, seen, found, filters, sitemap_ttl, now, offset, out)
    return len(new_keys)


def _keyed_candidates(
    batch_urls: list[UrlCandidate], out: Outbox
) -> tuple[list[UrlCandidate], list[str], list[bytes]]:
    """The candidates that have a registry key, with their URLs and keys; a URL without
    a host (not from url-filter) is logged and skipped."""
    candidates: list[UrlCandidate] = []
    urls: list[str] = []
    keys: list[bytes] = []
    for candidate in batch_urls:
        url = candidate["url"]
        try:
            keys.append(key_of(url))
        except ValueError as exc:
            out.log(crawl_log_record(url[:4096], "url-seen", "filtered", reason=str(exc)))
            continue
        candidates.append(candidate)
        urls.append(url)
    return candidates, urls, keys


class UrlSeenStage:
    """The url-seen stage of one worker, over its URL registry and scope tables."""

    name = "url-seen"
    decode = True
    count_items = True

    def __init__(
        self,
        seen: SeenRegistry,
        seen_keys: Callable[[int], Iterable[bytes]],
        scope: MutableMapping[str, int],
        filters: SeenFilters,
        offset: Callable[[], int | None],
        *,
        sitemap_ttl: float,
        resend_grace: float,
    ) -> None:
        self.seen, self.seen_keys, self.scope, self.filters = seen, seen_keys, scope, filters
        #: the offset of the message being handled (registrations are stamped with it)
        self.offset = offset
        self.sitemap_ttl, self.resend_grace = sitemap_ttl, resend_grace

    def step(self, partition: int, batch: UrlBatch, out: Outbox) -> None:
        handle(
            partition,
            batch,
            self.seen,
            self.scope,
            self.filters,
            self.seen_keys,
            out,
            sitemap_ttl=self.sitemap_ttl,
            offset=self.offset(),
            resend_grace=self.resend_grace,
        )


@dataclass
class _MetAgain:
    """What `handle` gathers of a batch's URLs met before, to act on once it has gone
    through the batch: in-links to add, sitemaps to re-read, URLs to send again or
    whose stamp to renew."""

    inlinks: dict[str, int] = field(default_factory=dict)
    sitemaps: list[UrlCandidate] = field(default_factory=list)
    resend: dict[str, UrlCandidate] = field(default_factory=dict)
    restamp: list[str] = field(default_factory=list)

    def act(
        self,
        partition: int,
        seen: SeenRegistry,
        found: dict[str, tuple[bytes, bytes]],
        filters: SeenFilters,
        sitemap_ttl: float,
        now: float,
        offset: int | None,
        out: Outbox,
    ) -> None:
        """Re-read the sitemaps, add the in-links (asking the frontier to move a URL
        they lift into a higher tier), then send again and restamp."""
        if self.sitemaps:
            _reread_sitemaps(partition, self.sitemaps, seen, sitemap_ttl, now, out)
        if self.inlinks:
            for url, old, new, _raw in seen.add_inlinks(self.inlinks, found):
                again = retier_candidate(url, old, new)
                if again is not None:
                    out.add_frontier(partition, "new_urls", again)
        if self.resend or self.restamp:
            _resend(partition, self.resend, self.restamp, seen, now, offset, out)
            filters.resent += len(self.resend)


def _resend(
    partition: int,
    candidates: dict[str, UrlCandidate],
    restamp: list[str],
    seen: SeenRegistry,
    now: float,
    offset: int | None,
    out: Outbox,
) -> None:
    """Send registered-never-queued URLs to the frontier again and renew their stamps,
    and stamp unstamped ones (after the in-link write, which read the records
    before: its write must not undo the new stamp)."""
    stamp = json.loads(registration_stamp(now, offset))
    seen.set_states({url: stamp for url in [*candidates, *restamp]})
    if not candidates:
        return
    for candidate in candidates.values():
        out.add_frontier(partition, "new_urls", candidate)
    log.info(
        "url-seen: %d registered URLs without a frontier state sent again (e.g. %s)",
        len(candidates),
        next(iter(candidates))[:200],
    )


def _reread_sitemaps(
    partition: int,
    candidates: list[UrlCandidate],
    seen: SeenRegistry,
    ttl: float,
    now: float,
    out: Outbox,
) -> None:
    """Pass on the sitemaps whose last fetch (their registry state) is `ttl` old."""
    states = seen.states([c["url"] for c in candidates])
    sent: set[str] = set()
    for candidate in candidates:
        url, state = candidate["url"], states.get(candidate["url"])
        if url in sent or not state or state.get("s") not in ("fetched", "failed"):
            continue  # queued or in flight already, or never acted on
        if now - float(state.get("at", now)) >= ttl:
            sent.add(url)
            out.add_frontier(partition, "new_urls", candidate)
