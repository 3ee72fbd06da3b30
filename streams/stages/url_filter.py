"""url-filter: scope, depth and trap rules over candidate links."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import topology
from streams.core.filters import FilterConfig, Rejection, filter_url
from streams.stages.context import Outbox, crawl_log_record


def handle(
    partition: int,
    batch: dict[str, Any],
    config: FilterConfig,
    scope: Container[str],
    out: Outbox,
) -> None:
    passed: list[dict[str, Any]] = []
    for candidate in batch["urls"]:
        verdict = filter_url(candidate["url"], candidate["depth"], config, scope)
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
        passed.append({**candidate, "url": verdict})
    for candidate in passed:
        out.add(topology.URL_SEEN, partition, candidate)
