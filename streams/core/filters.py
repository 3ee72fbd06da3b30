"""url-filter: "return the normalized URL or None", with the reason kept for the crawl log.

Runs in the partition of the candidate's host, next to the `scope` table, so the
--same-host check needs no cross-partition lookup.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from streams.core.urls import canonical, host_of, site_key, trap_reason


@dataclass(frozen=True)
class FilterConfig:
    max_depth: int = 0
    same_host: bool = False


@dataclass(frozen=True)
class Rejection:
    reason: str


def filter_url(
    url: str, depth: int, config: FilterConfig, seed_sites: Container[str]
) -> str | Rejection:
    """The canonical URL if it may be crawled, else a Rejection saying why."""
    normalized = canonical(url)
    if normalized is None:
        return Rejection("not a crawlable http(s) URL")
    trap = trap_reason(normalized)
    if trap:
        return Rejection(f"trap guard: {trap}")
    if config.max_depth and depth > config.max_depth:
        return Rejection(f"depth {depth} over --max-depth {config.max_depth}")
    if config.same_host and site_key(host_of(normalized)) not in seed_sites:
        return Rejection("off-site (--same-host)")
    return normalized
