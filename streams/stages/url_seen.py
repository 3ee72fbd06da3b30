"""url-seen: pass a URL on the first time it is met, never again.

The exact set is a Faust table (RocksDB + changelog) in the partition of the URL's
host; the Bloom filter in front of it arrives with issue 5.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from streams.core.urls import host_of, site_key
from streams.stages.context import Outbox


def handle(
    partition: int,
    batch: dict[str, Any],
    seen: MutableMapping[str, int],
    scope: MutableMapping[str, int],
    out: Outbox,
) -> int:
    """Forward the new URLs of one batch to the frontier; returns how many were new.

    A seed also marks its site in `scope` (read by url-filter for --same-host);
    both tables live in the partition of the host, so no lookup crosses workers.
    """
    new = 0
    for candidate in batch["urls"]:
        url = candidate["url"]
        if candidate.get("via") == "seed":
            key = site_key(host_of(url))
            if key not in scope:
                scope[key] = 1
        if url in seen:
            continue
        seen[url] = 1
        out.add_frontier(partition, "new_urls", candidate)
        new += 1
    return new
