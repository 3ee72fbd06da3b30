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
  ``Settings.redirect_port`` short URLs point at a redirect process beside the
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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import faust.streams as faust_streams
from aiohttp import web
from faust.types import TP
from faust.web import View
from yarl import URL

import topology
from streams.core.partitioning import partition_for
from streams.core.shortcodes import (
    LRUCache,
    RateLimiter,
    assign_code,
    home_partition,
    is_expired,
    is_valid_code,
    parse_expires_at,
    sweep_expired,
    url_key,
    validate_long_url,
)
from streams.core.urls import canonical
from streams.settings import Settings
from streams.web.redirect_process import RedirectProcessConfig, config_argument
from streams.web.redirect_server import FORWARD, Answer

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


class ShortLinks:
    """The short-link service of one worker: tables, topics, agents, timers and views."""

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
        self.partitions = settings.partitions
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
        # streams.admin.ensure_topics creates it up front (topology.SERVICE_TOPICS);
        # internal=True lets Faust create it where no one did (tests' bare apps).
        return self.app.topic(
            name,
            partitions=self.partitions,
            internal=True,
            key_serializer="raw",
            value_serializer="raw",
        )

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
        if self.settings.web_enabled:
            # The redirect route goes straight on aiohttp's router: no Faust view
            # dispatch and sensors for the one request that comes by the thousand.
            app.web.web_app.router.add_get("/s/{code}", self.handle_redirect_request)
        if self.settings.redirect_port and self.settings.web_enabled:
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
        bind = settings.web_bind
        host = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        host = f"[{host}]" if ":" in host else host
        config = RedirectProcessConfig(
            bind=bind,
            port=settings.redirect_port,
            web_url=f"http://{host}:{settings.web_port}",
            partitions=self.partitions,
            bootstrap=settings.bootstrap,
            clicks_topic=self.clicks_topic_name,
            secondary_dir=str(data / "redirects" / f"secondary-{os.getpid()}"),
            cache_size=self.options.cache_size,
            flush_interval=self.options.click_flush_interval,
            forward_timeout=self.options.request_timeout,
            event_loop=settings.event_loop,
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
        bind = self.settings.web_bind
        if self.settings.web_enabled and bind not in ("0.0.0.0", "::", ""):
            host = f"[{bind}]" if ":" in bind else bind
            self.app.conf.canonical_url = URL(f"http://{host}:{self.settings.web_port}")

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

    def _owner_url(self, partition: int) -> str | None:
        """The web server of the worker that owns `partition` (Faust's assignment map)."""
        urls = getattr(self.app.assignor, "_external_tps_url", None) or {}
        owner = urls.get(TP(self.create_topic_name, partition))
        return str(owner) if owner else None

    # -- agents and timers ----------------------------------------------------

    def _create_agent(self) -> Callable[[Any], Any]:
        async def links_create(stream: Any) -> None:
            async for event in stream.events():
                try:
                    message = json.loads(event.value)
                    if message.get("op") == "sweep":
                        self._sweep(event.message.partition, float(message["at"]))
                    else:
                        self._create(event.message.partition, message)
                except Exception:  # one bad message must not stop creation
                    log.exception("links-create: cannot handle a message")

        return links_create

    def _create(self, partition: int, message: dict[str, Any]) -> None:
        url = message["url"]
        outcome = Outcome()
        if canonical(url) != url or home_partition(url, self.partitions) != partition:
            # Only our web view produces here; anything else would break the
            # one-partition-per-link invariant, so it is refused, not written.
            outcome.error = "create request on the wrong partition or not canonical"
        else:
            try:
                code, link, created = assign_code(
                    url,
                    self.codes,
                    self.urls,
                    partitions=self.partitions,
                    now=float(message["at"]),
                    expires_at=message.get("expires_at"),
                    permanent=bool(message.get("permanent", False)),
                )
                outcome = Outcome(code, link, created)
                if created:
                    self.created += 1
                    self.cache.pop(code)  # a renewed link replaces an expired cached one
            except Exception as exc:
                log.exception("links-create failed for %s", url[:200])
                outcome.error = f"{type(exc).__name__}: {exc}"
        future = self.pending.get(message.get("id", ""))
        if future is not None and not future.done():
            future.set_result(outcome)

    def _sweep(self, partition: int, now: float) -> None:
        n = self.partitions
        swept = sweep_expired(
            self.codes,
            self.urls,
            self.clicks,
            owns=lambda code: partition_for(code, n) == partition,
            now=now,
            grace=self.options.sweep_grace,
        )
        for code in swept:
            self.cache.pop(code)
        if swept:
            log.info("links: swept %d expired links from partition %d", len(swept), partition)

    def _clicks_agent(self) -> Callable[[Any], Any]:
        window = self.options.click_count_window
        batch = self.options.click_count_batch

        async def link_clicks(stream: Any) -> None:
            async for events in stream.take_events(batch, within=window):
                try:
                    await self._count_clicks(events)
                except Exception:
                    log.exception("link-clicks: cannot count a batch of click messages")

        return link_clicks

    async def _count_clicks(self, events: list[Any]) -> None:
        """Add a window of click messages to the counts: one write per code and window.

        A table write goes to the changelog partition of the current event, so the
        counts of each partition are written while one of its events is current."""
        counts: defaultdict[int, Counter[str]] = defaultdict(Counter)
        last_event: dict[int, Any] = {}
        for event in events:
            partition = event.message.partition
            try:
                clicks = json.loads(event.value)["clicks"]
                counts[partition].update(click[0] for click in clicks)
            except (ValueError, KeyError, TypeError, IndexError):
                log.warning("link-clicks: dropping a malformed click message in %d", partition)
                continue
            last_event[partition] = event
        written = 0
        for partition, per_code in counts.items():
            faust_streams._current_event.set(weakref.ref(last_event[partition]))
            for code, count in per_code.items():
                if partition_for(code, self.partitions) != partition:
                    continue  # not a code of this partition: not ours to count
                self.clicks[code] = int(self.clicks.get(code) or 0) + count
                written += 1
                if written % 64 == 0:
                    # Hundreds of table writes in one go would hold up the
                    # redirects queued behind them: let them through.
                    await asyncio.sleep(0)

    def _flush_clicks_timer(self) -> Callable[[], Any]:
        async def flush_link_clicks() -> None:
            if not self.unsent_clicks:
                return
            batches, self.unsent_clicks = self.unsent_clicks, defaultdict(list)
            for partition, clicks in batches.items():
                payload = json.dumps({"clicks": clicks}, separators=(",", ":")).encode()
                await self._send(self.clicks_topic_name, self.clicks_topic, partition, payload)

        return flush_link_clicks

    def _sweep_timer(self) -> Callable[[], Any]:
        async def sweep_expired_links() -> None:
            tick = json.dumps({"op": "sweep", "at": time.time()}).encode()
            for partition in sorted(self.owned):
                await self._send(self.create_topic_name, self.create_topic, partition, tick)

        return sweep_expired_links

    def _persisted_offsets_timer(self) -> Callable[[], Any]:
        async def persist_link_offsets() -> None:
            # streams.tables.ProducedTable records delivered changelog offsets and
            # applies them when asked; the app's own timer asks only its tables.
            for table in (self.codes, self.urls, self.clicks):
                apply = getattr(table, "apply_persisted_offsets", None)
                if apply is not None:
                    apply()

        return persist_link_offsets

    async def _send(self, name: str, topic: Any, partition: int, value: bytes) -> None:
        """Through the stages' confluent-kafka producer when there is one (its C
        threads batch; Faust's send costs the event loop ~0.2 ms)."""
        producer = getattr(self.app, "seine_producer", None)
        if producer is not None:
            producer.produce(name, value, partition)
        else:
            await topic.send(value=value, partition=partition)

    # -- HTTP -----------------------------------------------------------------

    def _views(self) -> dict[str, type[View]]:
        links = self

        class CreateLink(View):
            async def post(self, request: Any, **kwargs: Any) -> Any:
                return await links.handle_create(request)

        class LinkInfo(View):
            async def get(self, request: Any, **kwargs: Any) -> Any:
                return await links.handle_info(request, kwargs["code"])

        return {"/links": CreateLink, "/links/{code}": LinkInfo}

    def _client(self, request: web.Request) -> str | None:
        """The address the rate limit counts against; None for a request a peer
        worker forwarded (it was counted where it entered)."""
        remote = request.remote or ""
        if ROUTED_HEADER in request.headers and remote in self.peers:
            return None
        return remote

    def _limited(self, request: web.Request) -> web.Response | None:
        client = self._client(request)
        if client is None or self.limiter.allow(client):
            return None
        wait = max(1, round(self.limiter.retry_after(client) + 0.5))
        return _error(429, "rate limit exceeded: slow down", **{"Retry-After": str(wait)})

    async def _read_body(self, request: web.Request) -> bytes | None:
        """The body, or None when it is larger than max_body_bytes (a URL is ≤ 2 KB)."""
        limit = self.options.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await request.content.read(limit + 1)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)

    async def handle_create(self, request: web.Request) -> web.Response:
        refused = self._limited(request)
        if refused is not None:
            return refused
        body = await self._read_body(request)
        if body is None:
            return _error(413, f"body larger than {self.options.max_body_bytes} bytes")
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"body is not JSON: {exc}")
        if not isinstance(payload, dict):
            return _error(400, 'body must be a JSON object like {"url": "https://..."}')
        if "url" not in payload:
            return _error(400, "missing url")
        now = time.time()
        try:
            url = validate_long_url(payload["url"])
            expires_at = parse_expires_at(payload.get("expires_at"), now)
            permanent = payload.get("permanent", False)
            if not isinstance(permanent, bool):
                raise ValueError("permanent must be true or false")
            if permanent and expires_at is not None:
                raise ValueError("a permanent (301) link cannot expire: browsers cache 301s")
        except ValueError as exc:
            return _error(400, str(exc))
        partition = home_partition(url, self.partitions)
        if partition not in self.owned:
            return await self._forward(request, partition, body)
        try:
            outcome = await self._create_here(url, expires_at, permanent, partition)
        except TimeoutError:
            return _error(503, "link creation timed out; retry", **{"Retry-After": "1"})
        if outcome.error:
            return _error(500, outcome.error)
        return web.json_response(
            self._describe(request, outcome.code, outcome.link, outcome.created), status=201
        )

    async def _create_here(
        self, url: str, expires_at: float | None, permanent: bool, partition: int
    ) -> Outcome:
        """Create (or find) the link of `url` on this worker, which owns `partition`."""
        now = time.time()
        code = self.urls.get(url_key(url))
        if code is not None:
            link = self.codes.get(code)
            if link is not None and link["url"] == url and not is_expired(link["expires_at"], now):
                return Outcome(code, link, False)  # no event needed to read
        timeout = self.options.request_timeout
        shared = self.inflight.get(url)
        if shared is not None:
            # Someone is creating this very URL: share their answer (it created, we did not).
            outcome = await asyncio.wait_for(asyncio.shield(shared), timeout)
            return Outcome(outcome.code, outcome.link, False, outcome.error)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        request_id = uuid.uuid4().hex
        self.pending[request_id] = future
        self.inflight[url] = future
        try:
            message = {
                "op": "create",
                "id": request_id,
                "url": url,
                "expires_at": expires_at,
                "permanent": permanent,
                "at": now,
            }
            await self._send(
                self.create_topic_name,
                self.create_topic,
                partition,
                json.dumps(message, separators=(",", ":")).encode(),
            )
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            self.pending.pop(request_id, None)
            if self.inflight.get(url) is future:
                del self.inflight[url]

    def _short_base(self, request: web.Request) -> str:
        """Where short URLs of this request point: the redirect listener of the worker
        the client asked when it runs one, else that worker's web server."""
        if self._client(request) is None and SHORT_BASE_HEADER in request.headers:
            return request.headers[SHORT_BASE_HEADER]  # the entry worker's, forwarded
        port = self.settings.redirect_port
        if port and self.settings.web_enabled:
            host = request.url.host or self.settings.web_bind
            return str(URL.build(scheme="http", host=host, port=port))
        return f"{request.scheme}://{request.host}"

    def _short_url(self, request: web.Request, code: str) -> str:
        return f"{self._short_base(request)}/s/{code}"

    def _describe(
        self, request: web.Request, code: str, link: dict[str, Any], created: bool | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": code,
            "short_url": self._short_url(request, code),
            "url": link["url"],
            "created_at": link["created_at"],
            "expires_at": link["expires_at"],
            "permanent": link["permanent"],
        }
        if created is not None:
            out["created"] = created
        return out

    def redirect_answer(self, code: str) -> Answer:
        """What GET /s/{code} answers, for both listeners: (301|302, url), (404|410,
        reason), or (FORWARD, "") when another worker owns the code and it is not
        cached here. Counts the click of a redirect."""
        if not is_valid_code(code):
            return 404, "unknown code"
        now = time.time()
        cached = self.cache.get(code)
        if cached is None or (cached.expires_at is not None and now >= cached.expires_at):
            partition = partition_for(code, self.partitions)
            if partition not in self.owned:
                return FORWARD, ""
            link = self.codes.get(code)
            if link is None:
                return 404, "unknown code"
            cached = CachedLink(link["url"], link["permanent"], link["expires_at"], partition)
            self.cache.put(code, cached)
            if cached.expires_at is not None and now >= cached.expires_at:
                return 410, "this link has expired"
        self.unsent_clicks[cached.partition].append([code, round(now, 3)])
        self.redirects += 1
        return (301 if cached.permanent else 302), cached.url

    async def handle_redirect_request(self, request: web.Request) -> web.StreamResponse:
        return await self.handle_redirect(request, request.match_info["code"])

    async def handle_redirect(self, request: web.Request, code: str) -> web.StreamResponse:
        status, text = self.redirect_answer(code)
        if status == FORWARD:
            return await self._forward(request, partition_for(code, self.partitions))
        if status in (301, 302):
            return web.Response(status=status, headers={"Location": text})
        return _error(status, text)

    async def forward_redirect(
        self, code: str, method: str, remote: str
    ) -> tuple[int, dict[str, str], bytes]:
        """The dedicated listener's forward: the owner's /s/{code} on its web server."""
        return await self._relay(
            partition_for(code, self.partitions), method, f"/s/{code}", "", remote, False, None
        )

    async def handle_info(self, request: web.Request, code: str) -> web.Response:
        refused = self._limited(request)
        if refused is not None:
            return refused
        if not is_valid_code(code):
            return _error(404, "unknown code")
        partition = partition_for(code, self.partitions)
        if partition not in self.owned:
            return await self._forward(request, partition)
        link = self.codes.get(code)
        if link is None:
            return _error(404, "unknown code")
        out = self._describe(request, code, link)
        out["expired"] = is_expired(link["expires_at"], time.time())
        out["clicks"] = int(self.clicks.get(code) or 0)
        return web.json_response(out)

    async def _forward(
        self, request: web.Request, partition: int, body: bytes | None = None
    ) -> web.Response:
        """Relay the request to the worker that owns `partition` and its answer back."""
        status, headers, payload = await self._relay(
            partition,
            request.method,
            request.raw_path,
            request.host,
            request.remote or "",
            ROUTED_HEADER in request.headers,
            body,
            self._short_base(request),
        )
        return web.Response(status=status, body=payload, headers=headers)

    async def _relay(
        self,
        partition: int,
        method: str,
        raw_path: str,
        host: str,
        remote: str,
        already_routed: bool,
        body: bytes | None,
        short_base: str = "",
    ) -> tuple[int, dict[str, str], bytes]:
        """Send a request to the web server of `partition`'s owner: (status, headers, body)."""
        retry = {"Retry-After": "1", "Content-Type": "application/json"}
        owner = self._owner_url(partition)
        me = str(self.app.conf.canonical_url)
        if already_routed or owner is None or owner == me:
            # Forwarded already, no owner yet, or ours but not recovered: a rebalance.
            reason = f"partition {partition} is being rebalanced; retry"
            return 503, retry, json.dumps({"error": reason}).encode()
        headers = {ROUTED_HEADER: remote}
        if host:
            headers["Host"] = host
        if short_base:
            headers[SHORT_BASE_HEADER] = short_base
        if body is not None:
            headers["Content-Type"] = "application/json"
        target = URL(owner.rstrip("/") + raw_path, encoded=True)
        try:
            async with self.app.http_client.request(
                method,
                target,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self.options.request_timeout),
            ) as response:
                payload = await response.read()
                relayed = {
                    name: response.headers[name]
                    for name in ("Location", "Retry-After", "Content-Type")
                    if name in response.headers
                }
                relayed["X-Seine-Served-By"] = owner
                return response.status, relayed, payload
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = f"owner of partition {partition} unreachable: {exc}"
            return 503, retry, json.dumps({"error": reason}).encode()


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
