"""The short-link service's shared parts: options, records, and the state every part reads.

:class:`ShortLinksBase` holds one worker's tables, topics, caches and counters; the
agents (:mod:`streams.web.shortlinks_agents`) and the HTTP side
(:mod:`streams.web.shortlinks_http`) build on it, and
:class:`streams.web.shortlinks.ShortLinks` puts them together. How the service works:
see :mod:`streams.web.shortlinks`.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiohttp import web
from faust.types import TP

import topology
from streams.core.shortcodes import LRUCache, RateLimiter
from streams.settings import Settings

log = logging.getLogger("seine.shortlinks")

ROUTED_HEADER = "X-Seine-Routed-For"
#: Where the entry worker serves short URLs: the owner writes short_url with it.
SHORT_BASE_HEADER = "X-Seine-Short-Base"
CREATE_TOPIC = topology.LINKS_CREATE.name
CLICKS_TOPIC = topology.LINK_CLICKS.name


@dataclass
class ShortLinkOptions:
    """Knobs with defaults; `register_shortlinks` takes them as keyword arguments."""

    #: code → link entries kept in memory per worker.
    cache_size: int = 100_000
    #: API (POST /links, GET /links/{code}) requests per second per client address...
    rate: float = 30.0
    #: ...and how many may come at once.
    burst: int = 60
    #: Seconds between sweep ticks, and how long an expired link answers 410 before
    #: the sweep deletes it.
    sweep_interval: float = 60.0
    sweep_grace: float = 24 * 3600.0
    #: Seconds a request waits for its creation, or for the owner when forwarded.
    request_timeout: float = 10.0
    #: Seconds between two sends of the buffered click events. Each send is one
    #: message per partition, and the counting agent writes each clicked code once
    #: per message: a longer interval means fewer table writes for popular links.
    click_flush_interval: float = 1.0
    #: Most seconds (and click messages) the counting agent gathers before it writes
    #: the counts: one table write per clicked code per window, whatever the number
    #: of clicks or workers sending them. Messages are acknowledged only once handled
    #: (so a rebalance waits for at most one window of them).
    click_count_window: float = 2.0
    click_count_batch: int = 1024
    max_body_bytes: int = 16 * 1024


class CachedLink(NamedTuple):
    """What a redirect needs of a link, kept in the LRU cache."""

    url: str
    permanent: bool
    expires_at: float | None
    partition: int


@dataclass
class Outcome:
    """The creation agent's answer to one create request."""

    code: str = ""
    link: dict[str, Any] = field(default_factory=dict)
    created: bool = False
    error: str = ""


def _error(status: int, reason: str, **headers: str) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers or None)


class ShortLinksBase:
    """One worker's short-link state: tables, topics, caches, counters; sends to topics."""

    def __init__(
        self,
        app: Any,
        settings: Settings,
        table_factory: Callable[[str], Any],
        options: ShortLinkOptions,
    ) -> None:
        self.app = app
        self.settings = settings
        self.options = options
        self.partitions = settings.kafka.partitions
        self.codes = table_factory("links")
        self.urls = table_factory("link-urls")
        self.clicks = table_factory("link-click-counts")
        self.create_topic_name = f"{settings.app_id}.{CREATE_TOPIC}"
        self.clicks_topic_name = f"{settings.app_id}.{CLICKS_TOPIC}"
        self.create_topic = self._topic(self.create_topic_name)
        self.clicks_topic = self._topic(self.clicks_topic_name)
        self.cache: LRUCache[str, CachedLink] = LRUCache(options.cache_size)
        self.limiter = RateLimiter(options.rate, options.burst)
        #: Partitions this worker owns and has recovered; empty while rebalancing.
        self.owned: frozenset[int] = frozenset()
        self.peers: frozenset[str] = frozenset()
        self.pending: dict[str, asyncio.Future[Outcome]] = {}
        self.inflight: dict[str, asyncio.Future[Outcome]] = {}
        self.unsent_clicks: defaultdict[int, list[list[Any]]] = defaultdict(list)
        self.created = 0
        self.redirects = 0
        self.redirect_process: subprocess.Popen[bytes] | None = None

    def _topic(self, name: str) -> Any:
        # streams.kafka.admin.ensure_topics creates it up front (topology.SERVICE_TOPICS);
        # internal=True lets Faust create it where no one did (tests' bare apps).
        return self.app.topic(
            name,
            partitions=self.partitions,
            internal=True,
            key_serializer="raw",
            value_serializer="raw",
        )

    def _owner_url(self, partition: int) -> str | None:
        """The web server of the worker that owns `partition` (Faust's assignment map)."""
        urls = getattr(self.app.assignor, "_external_tps_url", None) or {}
        owner = urls.get(TP(self.create_topic_name, partition))
        return str(owner) if owner else None

    async def _send(self, name: str, topic: Any, partition: int, value: bytes) -> None:
        """Through the stages' confluent-kafka producer when there is one (its C
        threads batch; Faust's send costs the event loop ~0.2 ms)."""
        producer = getattr(self.app, "seine_producer", None)
        if producer is not None:
            producer.produce(name, value, partition)
        else:
            await topic.send(value=value, partition=partition)
