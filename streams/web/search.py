"""`GET /search?q=QUERY[&limit=N]`: the crawl's full-text search, from any worker.

Each worker indexes the documents of the partitions it holds, so the worker asked
searches its own index and asks every other worker it knows (the observer's peers,
as `/stats.json?scope=crawl` does) for theirs, then merges by score, one hit per
document id (the most recently fetched). The answer is a JSON array of the hits
`seine search --json` prints, rank first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web
from faust.web import View
from yarl import URL

from streams.index.fulltext import Hit
from streams.index.search import merge_hits
from streams.web.pages import ROUTED_HEADER

#: Hits a request may ask for.
MAX_LIMIT = 100


def _hit_from(data: dict[str, Any]) -> Hit | None:
    try:
        return Hit(
            url=str(data["url"]),
            title=str(data.get("title") or ""),
            score=float(data["score"]),
            snippet=str(data.get("snippet") or ""),
            highlights=[(int(a), int(b)) for a, b in data.get("highlights") or []],
            fetched_at=float(data.get("fetched_at") or 0.0),
            id=str(data.get("id") or data["url"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def register_search(seine: Any, peers: Any) -> None:
    """Serve `/search` from this worker's index (`seine.indexer`) and its peers'.
    `peers()`: the base URLs of the other workers' web servers."""
    app = seine.app

    async def ask(base: str, query: str, limit: int) -> list[Hit]:
        target = URL(base.rstrip("/") + "/search").with_query(q=query, limit=str(limit))
        try:
            async with app.http_client.get(
                target, headers={ROUTED_HEADER: "search"}, timeout=aiohttp.ClientTimeout(total=3)
            ) as response:
                if response.status != 200:
                    return []
                answer = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError, RuntimeError):
            return []  # a worker that does not answer gives no hits, the rest still do
        hits = [_hit_from(item) for item in answer if isinstance(item, dict)]
        return [hit for hit in hits if hit is not None]

    class Search(View):
        async def get(self, request: Any, **kwargs: Any) -> Any:
            query = request.query.get("q", "").strip()
            if not query:
                return web.json_response({"error": "give ?q= with a query"}, status=400)
            try:
                limit = max(1, min(MAX_LIMIT, int(request.query.get("limit", "10"))))
            except ValueError:
                return web.json_response({"error": "limit= must be a number"}, status=400)
            indexer = seine.indexer
            local = indexer.index.search(query, limit) if indexer is not None else []
            routed = ROUTED_HEADER in request.headers
            lists = [local]
            if not routed:
                lists += await asyncio.gather(*(ask(base, query, limit) for base in peers()))
            hits = merge_hits(lists, limit)
            body = []
            for rank, hit in enumerate(hits, 1):
                item = hit.as_json(query, rank)
                if routed:  # what the asking worker merges by
                    item.update(id=hit.id, fetched_at=hit.fetched_at)
                body.append(item)
            return web.json_response(body, headers={"Cache-Control": "no-store"})

    app.page("/search")(Search)
