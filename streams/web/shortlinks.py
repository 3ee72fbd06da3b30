"""Short links on the worker's web server: create, redirect, look up; clicks; expiry.

    POST /links        {"url", "expires_at"?, "permanent"?}  → 201 {"code", "short_url", "url", ...}
    GET  /s/{code}     → 301 (permanent) / 302 with Location; 404 unknown; 410 expired
    GET  /links/{code} → the link: url, created_at, expires_at, permanent, expired, clicks

How the pieces fit (the rules themselves are in ``streams.core.shortcodes``):

* **Where a link lives.** A URL's home partition is the partition of its seed-0
  code, and every code it can get lives there too (collision re-hashes skip
  codes of other partitions). So the code table (code → link), the URL table
  (URL hash → code) and the click counts of a link share one partition, and
  both a URL and a code name their partition without any lookup.
* **Routing.** A request is served by the worker that owns the partition (the
  owner of that partition of the ``links-create`` topic, from Faust's
  assignment); any other worker forwards it over HTTP to the owner's web server
  and relays the answer, like Faust's ``@app.table_route`` (which we cannot use
  as is: it finds partitions with Kafka's default partitioner, we with jump hash).
* **Creation is serialized per URL.** Faust tables may only be written while
  handling an event of the key's partition, so the owner's web view sends a
  create request to ``links-create`` on the home partition and waits for the
  agent, which reads and writes both tables in that partition's event order.
  The reply is an in-process future: the owner both sends and handles the
  request, so no reply topic is needed (Faust's ``agent.ask`` would add a reply
  topic per worker and a consumer-group rebalance on its first use). Concurrent
  requests for one URL on the owner also share one in-flight creation.
* **Redirects** read the code table (outside an event: a read only) through an
  in-process LRU cache; a link never changes except by expiring, so the cache
  needs no invalidation beyond checking expiry on every hit. ``redirect_answer``
  is the one place that decides in the worker, for the route on aiohttp's
  router (added directly, without Faust's view dispatch and sensors). With
  ``Settings.web.redirect_port`` short URLs point at a redirect process beside the
  worker (``streams.web.redirect_process``, started and supervised here): it
  reads this worker's code-table files as a RocksDB secondary, answers the
  worker's own unexpired codes itself, sends its own click messages, and relays
  everything else to this route. Each redirect appends a click event (code, time); a timer sends
  them every second as one message per partition to ``link-clicks`` through the
  confluent producer (a Kafka message per redirect would cost more than the
  redirect), where an agent gathers up to ``click_count_window`` seconds of
  messages and adds them to the click-count table, one write per clicked code
  per window (a table write costs more than many redirects). Clicks not yet sent
  when a worker dies are lost (at most a second of them); messages gathered but
  not yet counted are not acknowledged, so they are counted after a restart.
* **Expiry** is checked on every read (410), and a timer sends a sweep tick to
  each owned partition; the agent deletes links expired for longer than a grace
  period (they answer 404 from then on).
* **Bad input** gets 400 with a reason; a token bucket per client address
  guards the API endpoints (429). Redirects are not rate limited: they are the
  cheap, public read path.

Worker-to-worker forwarding marks requests with ``X-Seine-Routed-For``; the owner
trusts it (skips the rate limit already applied at the entry worker, never
forwards again) only from a peer worker's address.

This module wires the service into the app and supervises the redirect process; the
rest lives beside it: ``shortlinks_base`` (options, records, shared state),
``shortlinks_agents`` (agents and timers) and ``shortlinks_http`` (views, redirects,
forwarding), each a part of :class:`ShortLinks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from yarl import URL

from streams.settings import Settings
from streams.web.redirect_process import RedirectProcessConfig, config_argument
from streams.web.shortlinks_agents import ShortLinkAgents
from streams.web.shortlinks_base import (
    CLICKS_TOPIC,
    CREATE_TOPIC,
    ROUTED_HEADER,
    SHORT_BASE_HEADER,
    CachedLink,
    Outcome,
    ShortLinkOptions,
    log,
)
from streams.web.shortlinks_http import ShortLinkViews

__all__ = [
    "CLICKS_TOPIC",
    "CREATE_TOPIC",
    "ROUTED_HEADER",
    "SHORT_BASE_HEADER",
    "CachedLink",
    "Outcome",
    "ShortLinkOptions",
    "ShortLinks",
    "register_shortlinks",
]


class ShortLinks(ShortLinkViews, ShortLinkAgents):
    """The short-link service of one worker: tables, topics, agents, timers and views."""

    # -- wiring -------------------------------------------------------------

    def register(self) -> None:
        app = self.app
        self._use_loopback_canonical_url()
        app.agent(self.create_topic, name="links-create")(self._create_agent())
        app.agent(self.clicks_topic, name="link-clicks")(self._clicks_agent())
        app.timer(interval=self.options.click_flush_interval)(self._flush_clicks_timer())
        app.timer(interval=self.options.sweep_interval)(self._sweep_timer())
        app.timer(interval=0.5)(self._persisted_offsets_timer())
        app.on_partitions_revoked.connect(self._on_revoked)
        app.on_rebalance_complete.connect(self._on_rebalance_complete)
        for path, view in self._views().items():
            app.page(path)(view)
        if self.settings.web.web_enabled:
            # The redirect route goes straight on aiohttp's router: no Faust view
            # dispatch and sensors for the one request that comes by the thousand.
            app.web.web_app.router.add_get("/s/{code}", self.handle_redirect_request)
        if self.settings.web.redirect_port and self.settings.web.web_enabled:
            # Needs the web server: it forwards there what it does not answer itself.
            app.task(self._redirect_process_task())

    def _redirect_process_task(self) -> Callable[[], Any]:
        async def run_redirect_process() -> None:
            """Keep the redirect process running while the worker runs (a crashed one is
            started again after 1 s, then 2, 4... up to a minute while it keeps failing
            at once, e.g. its port is taken), and stop it with the worker."""
            failures = 0
            while True:
                started = time.monotonic()
                self.redirect_process = self._start_redirect_process()
                self._tell_redirect_process()
                try:
                    while self.redirect_process.poll() is None:
                        await asyncio.sleep(0.5)
                finally:
                    if self.redirect_process.poll() is None:
                        self._stop_redirect_process()
                failures = failures + 1 if time.monotonic() - started < 60 else 1
                wait = min(60.0, 2.0 ** (failures - 1))
                log.error(
                    "redirect process exited with %s; starting it again in %.0f s",
                    self.redirect_process.returncode,
                    wait,
                )
                await asyncio.sleep(wait)

        return run_redirect_process

    def _start_redirect_process(self) -> subprocess.Popen[bytes]:
        settings = self.settings
        data = Path(settings.data_dir).resolve()
        bind = settings.web.web_bind
        host = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        host = f"[{host}]" if ":" in host else host
        config = RedirectProcessConfig(
            bind=bind,
            port=settings.web.redirect_port,
            web_url=f"http://{host}:{settings.web.web_port}",
            partitions=self.partitions,
            bootstrap=settings.kafka.bootstrap,
            clicks_topic=self.clicks_topic_name,
            secondary_dir=str(data / "redirects" / f"secondary-{os.getpid()}"),
            cache_size=self.options.cache_size,
            flush_interval=self.options.click_flush_interval,
            forward_timeout=self.options.request_timeout,
            event_loop=settings.worker.event_loop,
        )
        args = [sys.executable, "-m", "streams.web.redirect_process", config_argument(config)]
        # stdout and stderr are the worker's: its log.
        return subprocess.Popen(
            [*args, "--log-level", settings.log_level], stdin=subprocess.PIPE, close_fds=True
        )

    def _stop_redirect_process(self) -> None:
        proc = self.redirect_process
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()  # the process stops when its stdin closes...
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()  # ...or is made to
            proc.wait()

    def _tell_redirect_process(self) -> None:
        """Send the redirect process the partitions it may answer for, with their
        database files (those of the code table)."""
        proc = self.redirect_process
        if proc is None or proc.stdin is None or proc.poll() is not None:
            return
        store = self.codes.data
        owned = {str(p): str(Path(store.partition_path(p)).resolve()) for p in self.owned}
        try:
            proc.stdin.write(json.dumps({"owned": owned}).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:  # it died: the supervising task starts it again
            log.warning("cannot reach the redirect process: %s", exc)

    def _use_loopback_canonical_url(self) -> None:
        """Workers find each other's web servers by their canonical URL, which Faust
        builds from the host name; a server bound to one address (127.0.0.1 by
        default) is only reachable there."""
        bind = self.settings.web.web_bind
        if self.settings.web.web_enabled and bind not in ("0.0.0.0", "::", ""):
            host = f"[{bind}]" if ":" in bind else bind
            self.app.conf.canonical_url = URL(f"http://{host}:{self.settings.web.web_port}")

    async def _on_revoked(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        self.owned = frozenset()
        self.cache.clear()
        self._tell_redirect_process()

    async def _on_rebalance_complete(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        """Tables are recovered: serve the partitions of the create topic we own."""
        actives = self.app.assignor.assigned_actives()
        self.owned = frozenset(tp.partition for tp in actives if tp.topic == self.create_topic_name)
        distribution = getattr(self.app.assignor, "changelog_distribution", {}) or {}
        self.peers = frozenset(
            host for host in (URL(str(u)).host for u in distribution) if host is not None
        )
        self._tell_redirect_process()


def register_shortlinks(
    app: Any, settings: Settings, table_factory: Callable[[str], Any], **options: Any
) -> ShortLinks:
    """Add the short-link tables, topics, agents, timers and HTTP views to a Faust app.

    `table_factory(name)` makes a table the way the app makes its own (same
    partitions, store and changelog producer). `options` override
    `ShortLinkOptions` fields (tests and benchmarks tune the rate limit this way).
    """
    links = ShortLinks(app, settings, table_factory, ShortLinkOptions(**options))
    links.register()
    app.shortlinks = links
    return links
