"""url-seen: pass a URL on the first time it is met, never again.

Per partition, a Bloom filter answers "definitely new" from memory; a "maybe
seen" is confirmed against the exact table (RocksDB + changelog), so a false
positive costs one lookup and never loses a URL. A partition's filter is rebuilt
from the exact table the first time this worker handles that partition (worker
start, or a rebalance handing it over), before any of its URLs is judged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from streams.core.bloom import BloomFilter
from streams.core.urls import host_of, site_key
from streams.stages.context import Outbox

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

    def for_partition(
        self,
        partition: int,
        seen_urls: Callable[[], Iterable[str]],
        partition_of: Callable[[str], int],
    ) -> BloomFilter:
        bloom = self.filters.get(partition)
        if bloom is None:
            started = time.monotonic()
            bloom = BloomFilter(self.capacity, self.error_rate)
            chunk: list[str] = []
            for url in seen_urls():
                if partition_of(url) == partition:
                    chunk.append(url)
                    if len(chunk) >= 65536:
                        bloom.add_many(chunk)
                        chunk = []
            if chunk:
                bloom.add_many(chunk)
            self.filters[partition] = bloom
            self.rebuild_seconds[partition] = time.monotonic() - started
            log.info(
                "url-seen filter for partition %d rebuilt from %d URLs in %.2fs",
                partition,
                len(bloom),
                self.rebuild_seconds[partition],
            )
        return bloom


def handle(
    partition: int,
    batch: dict[str, Any],
    seen: MutableMapping[str, int],
    scope: MutableMapping[str, int],
    filters: SeenFilters,
    partition_of: Callable[[str], int],
    out: Outbox,
) -> int:
    """Forward the new URLs of one batch to the frontier; returns how many were new.

    A seed also marks its site in `scope` (read by url-filter for --same-host);
    both tables live in the partition of the host, so no lookup crosses workers.
    """
    bloom = filters.for_partition(partition, lambda: iter(seen.keys()), partition_of)
    candidates = batch["urls"]
    urls = [candidate["url"] for candidate in candidates]
    maybe = bloom.contains_many(urls)
    new = 0
    fresh: list[str] = []
    for candidate, url, maybe_seen in zip(candidates, urls, maybe, strict=True):
        if candidate.get("via") == "seed":
            key = site_key(host_of(url))
            if key not in scope:
                scope[key] = 1
        if maybe_seen:
            if url in seen:
                filters.confirmed_seen += 1
                continue
            if url not in fresh:  # a repeat within this batch is not a false positive
                filters.false_positives += 1
        if url in fresh:
            continue
        seen[url] = 1
        fresh.append(url)
        out.add_frontier(partition, "new_urls", candidate)
        new += 1
    if fresh:
        bloom.add_many(fresh)
    return new
