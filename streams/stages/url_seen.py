"""url-seen: pass a URL on the first time it is met, never again.

Per partition, a Bloom filter answers "definitely new" from memory; a "maybe
seen" is confirmed against the exact table (RocksDB + changelog), so a false
positive costs one lookup and never loses a URL. A partition's filter is rebuilt
from the exact table the first time this worker handles that partition (worker
start, or a rebalance handing it over), before any of its URLs is judged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping
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
        self, partition: int, seen_keys: Callable[[], Iterable[str | bytes]]
    ) -> BloomFilter:
        """The partition's filter, rebuilt from `seen_keys()` (that partition's URLs, as
        str or UTF-8 bytes) the first time it is asked for."""
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
                "url-seen filter for partition %d rebuilt from %d URLs in %.2fs",
                partition,
                len(bloom),
                self.rebuild_seconds[partition],
            )
        return bloom


def table_partition_keys(table: Any, partition: int) -> Iterator[str | bytes]:
    """The URLs of one partition of the `seen` table, read straight from its RocksDB.

    Faust's rocksdb store keeps one database per partition, with JSON-serialized
    keys; a canonical URL is ASCII without quotes or backslashes (WHATWG
    percent-encodes them), so its key is the URL in quotes and the bytes between
    are hashed as they are — the Bloom filter hashes str as UTF-8, so the bits are
    the same. Anything else (another store, an escaped key) takes the slow path.
    """
    store = getattr(table, "data", None)
    db_for_partition = getattr(store, "_db_for_partition", None)
    if db_for_partition is None:
        yield from (k for k in table.keys() if isinstance(k, str))  # noqa: SIM118
        return
    for key in db_for_partition(partition).keys():  # noqa: SIM118
        if isinstance(key, bytes) and key.startswith(b"__faust"):
            continue  # Faust's own bookkeeping (the persisted changelog offset)
        if isinstance(key, bytes) and key[:1] == b'"' and b"\\" not in key:
            yield key[1:-1]
        else:
            yield json.loads(key)


def handle(
    partition: int,
    batch: dict[str, Any],
    seen: MutableMapping[str, int],
    scope: MutableMapping[str, int],
    filters: SeenFilters,
    seen_keys: Callable[[int], Iterable[str | bytes]],
    out: Outbox,
) -> int:
    """Forward the new URLs of one batch to the frontier; returns how many were new.

    A seed also marks its site in `scope` (read by url-filter for --same-host);
    both tables live in the partition of the host, so no lookup crosses workers.
    """
    bloom = filters.for_partition(partition, lambda: seen_keys(partition))
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
