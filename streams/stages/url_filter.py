"""url-filter: scope, depth and trap rules over candidate links, then one host form per site.

Every URL the crawl may fetch passes here — links, redirect targets and seeds —
in the partition of its site (``www.`` and bare host share it). So this is the
one place that can rewrite a URL to its site's canonical host form
(:class:`~streams.core.sites.SiteRegistry` over the `sites` table) before url-seen
and the frontier see it: ``http://www.example.com/a`` and ``http://example.com/a``
are then one URL, fetched once.
"""

from __future__ import annotations

from collections.abc import Container, MutableMapping
from dataclasses import replace
from typing import Any

import topology
from streams.core.filters import FilterConfig, Rejection, filter_url, vet
from streams.core.provenance import Via
from streams.core.records import UrlBatch
from streams.core.sites import SiteRegistry
from streams.core.urls import host_of, site_key
from streams.stages.context import Outbox, crawl_log_record

# One registry per table object, so its read cache lives as long as the table.
_registries: dict[int, tuple[MutableMapping[str, Any], SiteRegistry]] = {}


def registry_for(sites: MutableMapping[str, Any] | SiteRegistry) -> SiteRegistry:
    """The SiteRegistry over `sites` (a table or dict), made once per table object."""
    if isinstance(sites, SiteRegistry):
        return sites
    entry = _registries.get(id(sites))
    if entry is None or entry[0] is not sites:
        entry = (sites, SiteRegistry(sites))
        _registries[id(sites)] = entry
    return entry[1]


def _settle_by_redirect(registry: SiteRegistry, url: str, via: str | None) -> None:
    """If `url` is a redirect target on the other host form of its source's site,
    make that form the site's canonical one (the server serves the site there)."""
    if not via or not via.startswith(Via.REDIRECT):
        return
    source_host = host_of(via[len(Via.REDIRECT) :])
    target_host = host_of(url)
    if (
        target_host
        and source_host != target_host
        and site_key(source_host) == site_key(target_host)
    ):
        registry.prefer(target_host)


def handle(
    partition: int,
    batch: UrlBatch,
    config: FilterConfig,
    scope: Container[str],
    sites: MutableMapping[str, Any] | SiteRegistry,
    out: Outbox,
) -> None:
    """Filter one batch of candidates and pass the survivors on to url-seen.

    A seed (via == "seed") skips the --same-host rule — url-seen records the seed's
    site in `scope` only after this stage, and a seed defines the scope — but not
    the trap guards. Each accepted URL is mapped through the site registry, which
    also records the host form it was met in.
    """
    registry = registry_for(sites)
    canonicalize = registry.canonicalize
    # With no depth or same-host rule (the default), a URL's verdict is its shape
    # alone: vet, memoised, with no per-link call of filter_url.
    shape_only = not config.max_depth and not config.same_host
    seed_config = replace(config, same_host=False) if config.same_host else config
    passed: dict[Any, dict[str, Any]] = {}
    for candidate in batch["urls"]:
        via = candidate.get("via")
        if shape_only:
            verdict = vet(candidate["url"], config.traps)
        else:
            verdict = filter_url(
                candidate["url"],
                candidate["depth"],
                seed_config if via == Via.SEED else config,
                scope,
            )
        if isinstance(verdict, Rejection):
            out.log(
                crawl_log_record(
                    candidate["url"][:4096],
                    "url-filter",
                    "filtered",
                    reason=verdict.reason,
                    depth=candidate["depth"],
                )
            )
            continue
        if via and (via == Via.SEED or via.startswith(Via.REDIRECT)):
            # Seeds and redirect targets are kept apart: their `via` means something.
            if via != Via.SEED:
                _settle_by_redirect(registry, verdict, via)
            accepted = {**candidate, "url": canonicalize(verdict, is_canonical=True)}
            passed[(id(accepted),)] = accepted
            continue
        # Links to one URL from several pages of the batch become one candidate whose
        # `inlinks` counts them (the frontier ranks well-linked URLs higher), at the
        # least depth met (and the highest priority).
        url = canonicalize(verdict, is_canonical=True)
        key = (url, candidate.get("kind"))
        first = passed.get(key)
        if first is None:
            passed[key] = {**candidate, "url": url}
            continue
        first["inlinks"] = int(first.get("inlinks", 1)) + int(candidate.get("inlinks", 1))
        first["depth"] = min(int(first["depth"]), int(candidate["depth"]))
        first["priority"] = max(int(first["priority"]), int(candidate["priority"]))
    for survivor in passed.values():
        out.add(topology.URL_SEEN, partition, survivor)


class UrlFilterStage:
    """The url-filter stage of one worker, over its scope and site tables."""

    name = "url-filter"
    decode = True
    count_items = True

    def __init__(
        self,
        config: FilterConfig,
        scope: Container[str],
        sites: MutableMapping[str, Any] | SiteRegistry,
    ) -> None:
        self.config, self.scope, self.sites = config, scope, sites

    def step(self, partition: int, batch: UrlBatch, out: Outbox) -> None:
        handle(partition, batch, self.config, self.scope, self.sites, out)
