"""`GET /pages?url=URL[&at=UNIX_TIME]`: a stored page, from the worker that owns it.

Pages are stored by link-extract in the partition of their host, so the worker
owning that partition of the link-extract topic holds the capture (and, after a
rebalance, the newest one). A request that lands elsewhere is relayed to the
owner's web server, found in Faust's assignment map, as short links do.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web
from faust.types import TP
from faust.web import View
from yarl import URL

import topology
from streams.core.urls import canonical
from streams.settings import Settings

ROUTED_HEADER = "X-Seine-Routed-For"


def _error(status: int, reason: str, **headers: str) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)


def register_pages(app: Any, settings: Settings, store: Any, partition_of_url: Any) -> None:
    """Serve `/pages` from `store` (this worker's PageStore) for the partitions it owns."""
    topic = topology.topic_name(settings.app_id, topology.LINK_EXTRACT)

    def owns(partition: int) -> bool:
        return TP(topic, partition) in app.assignor.assigned_actives()

    def owner_url(partition: int) -> str | None:
        urls = getattr(app.assignor, "_external_tps_url", None) or {}
        owner = urls.get(TP(topic, partition))
        return str(owner) if owner else None

    async def serve_local(url: str, at: float | None) -> web.Response:
        capture = store.get(url, at=at)
        if capture is None:
            return _error(404, f"{url} is not stored")
        content_type = next(
            (v for k, v in capture.headers if k.lower() == "content-type"), "text/html"
        )
        return web.Response(
            body=capture.body,
            headers={
                "Content-Type": content_type,
                "X-Seine-Url": capture.url,
                "X-Seine-Status": str(capture.status),
                "X-Seine-Fetched-At": f"{capture.fetched_at:.6f}",
                "X-Seine-Warc": f"{capture.segment}@{capture.offset}+{capture.length}",
                **({"X-Seine-Revisit-Of": capture.revisit_of} if capture.revisit_of else {}),
                **(
                    {"X-Seine-Near-Duplicate-Of": capture.near_duplicate_of}
                    if capture.near_duplicate_of
                    else {}
                ),
            },
        )

    async def relay(request: web.Request, partition: int) -> web.Response:
        owner = owner_url(partition)
        if ROUTED_HEADER in request.headers or owner is None:
            return _error(
                503, f"partition {partition} is being rebalanced; retry", **{"Retry-After": "1"}
            )
        target = URL(owner.rstrip("/") + request.raw_path, encoded=True)
        try:
            async with app.http_client.get(
                target,
                headers={ROUTED_HEADER: request.remote or ""},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as response:
                body = await response.read()
                headers = {k: v for k, v in response.headers.items() if k.startswith("X-Seine")}
                headers["Content-Type"] = response.headers.get("Content-Type", "text/html")
                headers["X-Seine-Served-By"] = owner
                return web.Response(status=response.status, body=body, headers=headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _error(503, f"owner of partition {partition} unreachable: {exc}")

    class Pages(View):
        async def get(self, request: Any, **kwargs: Any) -> Any:
            raw = request.query.get("url", "")
            url = canonical(raw) if raw else None
            if url is None:
                return _error(400, "give ?url= with an absolute http(s) URL")
            at_text = request.query.get("at")
            try:
                at = float(at_text) if at_text else None
            except ValueError:
                return _error(400, "at= must be a unix time in seconds")
            partition = partition_of_url(url)
            if owns(partition) or ROUTED_HEADER in request.headers:
                return await serve_local(url, at)
            return await relay(request, partition)

    app.page("/pages")(Pages)
