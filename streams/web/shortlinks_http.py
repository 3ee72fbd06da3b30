"""The short-link service's HTTP side: create, redirect, look up, and forward to owners.

Requests for a partition another worker owns are relayed to that worker's web server
(``X-Seine-Routed-For``); ``redirect_answer`` is the one place the worker decides a
redirect, for both listeners.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import aiohttp
from aiohttp import web
from faust.web import View
from yarl import URL

from streams.core.partitioning import partition_for
from streams.core.shortcodes import (
    home_partition,
    is_expired,
    is_valid_code,
    parse_expires_at,
    url_key,
    validate_long_url,
)
from streams.web.redirect_server import FORWARD, Answer
from streams.web.shortlinks_base import (
    ROUTED_HEADER,
    SHORT_BASE_HEADER,
    CachedLink,
    Outcome,
    ShortLinksBase,
    _error,
)


class ShortLinkViews(ShortLinksBase):
    """The HTTP views and redirects of :class:`streams.web.shortlinks.ShortLinks`."""

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
        port = self.settings.web.redirect_port
        if port and self.settings.web.web_enabled:
            host = request.url.host or self.settings.web.web_bind
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
