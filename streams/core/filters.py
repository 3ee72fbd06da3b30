"""url-filter: "return the normalized URL or None", with the reason kept for the crawl log.

Runs in the partition of the candidate's host, next to the `scope` table, so the
--same-host check needs no cross-partition lookup.
"""

from __future__ import annotations

import functools
from collections.abc import Container
from dataclasses import dataclass

from streams.core.traps import DEFAULT_RULES, TrapRules, strip_session_ids, trap_reason
from streams.core.urls import canonical, host_of, site_key


@dataclass(frozen=True)
class FilterConfig:
    max_depth: int = 0
    same_host: bool = False
    traps: TrapRules = DEFAULT_RULES


@dataclass(frozen=True)
class Rejection:
    reason: str


#: URLs whose shape verdict (:func:`vet`) is remembered, and the longest URL that is:
#: at most 32k x 1 KB of keys, whatever the pages link to.
VERDICT_CACHE_SIZE = 1 << 15
VERDICT_CACHE_MAX_URL = 1024


def _vet(url: str, rules: TrapRules) -> str | Rejection:
    normalized = canonical(url)
    if normalized is None:
        return Rejection("not a crawlable http(s) URL")
    if rules.strip_session_ids:
        normalized = strip_session_ids(normalized)
    trap = trap_reason(normalized, rules)
    if trap:
        return Rejection(f"trap guard: {trap}")
    return normalized


_vet_cached = functools.lru_cache(maxsize=VERDICT_CACHE_SIZE)(_vet)


def vet(url: str, rules: TrapRules = DEFAULT_RULES) -> str | Rejection:
    """The canonical form of `url` (without session ids, unless `rules` keep them), or
    why it is no crawlable URL (not http(s), or a trap's shape): what depends on the
    URL alone.

    Memoised (URLs up to :data:`VERDICT_CACHE_MAX_URL` characters): url-filter meets
    each URL once for every page linking to it (~16 times on the benchmark web:
    navigation links), and parsing it again cost two thirds of the stage. A pure
    function of the string and the frozen rules, so a remembered verdict is always
    right; a Rejection is frozen, so sharing one is safe.
    """
    if type(url) is str and len(url) <= VERDICT_CACHE_MAX_URL:
        return _vet_cached(url, rules)
    return _vet(url, rules)


def filter_url(
    url: str, depth: int, config: FilterConfig, seed_sites: Container[str]
) -> str | Rejection:
    """The canonical URL if it may be crawled, else a Rejection saying why."""
    normalized = vet(url, config.traps)
    if isinstance(normalized, Rejection):
        return normalized
    if config.max_depth and depth > config.max_depth:
        return Rejection(f"depth {depth} over --max-depth {config.max_depth}")
    if config.same_host and site_key(host_of(normalized)) not in seed_sites:
        return Rejection("off-site (--same-host)")
    return normalized
