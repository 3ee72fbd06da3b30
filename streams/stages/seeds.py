"""seeds: turn whatever producers sent into canonical candidates for url-filter."""

from __future__ import annotations

import topology
from streams.codec.seeds import InvalidSeed, parse_seed
from streams.core.provenance import Via
from streams.core.urls import host_of
from streams.stages.context import Outbox, StageContext


def handle(ctx: StageContext, payload: bytes, out: Outbox) -> None:
    """Validate one seed; raises InvalidSeed (→ dead-letters) when it can't be crawled.

    The seed goes to url-filter in its host's partition (a producer such as kcat may
    have put it on any partition of the seeds topic), not straight to url-seen:
    url-filter is where a URL is mapped to its site's canonical host form, and that
    must run in the site's partition, next to the `sites` table. So a seed registers
    its host form like any other URL (seeds come first, so usually as the canonical
    one), and a seed in the other form of a known site maps onto it.
    """
    seed = parse_seed(payload)
    out.add(
        topology.URL_FILTER,
        ctx.host_partition(host_of(seed.url)),
        {"url": seed.url, "depth": 0, "priority": seed.priority, "via": Via.SEED},
    )


class SeedsStage:
    """The seeds stage: raw bytes from any producer, one seed a message."""

    name = "seeds"
    decode = False
    count_items = True

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx

    def step(self, partition: int, payload: bytes, out: Outbox) -> None:
        handle(self.ctx, payload, out)


__all__ = ["InvalidSeed", "SeedsStage", "handle"]
