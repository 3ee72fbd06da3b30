"""The physical limit of a crawl of the demo web: a bare asyncio/aiohttp GET loop.

bench/crawl_throughput.py runs this beside Seine and Scrapy and prints Seine as a
percentage of it. It knows every URL up front (the reachable, allowed pages of the
web), so it discovers, parses, deduplicates and stores nothing: one coroutine per
host fetches that host's robots.txt, then its pages one at a time, reading each
body whole, and waits ``--delay`` seconds after each response before the next
request to the host (the politeness Seine's ``--delay`` and one request in flight
per host give). All hosts run at once, up to ``--concurrency`` requests in flight
in total. Whatever a crawler does beyond this is its own cost.

Run: ``.venv/bin/python bench/aiohttp_floor.py --urls-file URLS [--delay 0.5]``; it
prints one line, ``floor: N pages in S s``, and exits non-zero when a page failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp


async def crawl_host(
    session: aiohttp.ClientSession,
    origin: str,
    urls: list[str],
    delay: float,
    slots: asyncio.Semaphore,
) -> tuple[int, int]:
    """Fetch robots.txt then each URL of one host, in order; (pages, failures)."""
    pages = failures = 0
    for index, url in enumerate([f"{origin}/robots.txt", *urls]):
        if index and delay:
            await asyncio.sleep(delay)  # the politeness delay itself
        try:
            async with slots, session.get(url, allow_redirects=False) as response:
                await response.read()
                ok = response.status == 200
        except (TimeoutError, aiohttp.ClientError):
            ok = False
        if index:
            pages += ok
            failures += not ok
    return pages, failures


async def run(urls: list[str], delay: float, concurrency: int) -> tuple[int, int]:
    by_origin: dict[str, list[str]] = defaultdict(list)
    for url in urls:
        parts = urlsplit(url)
        by_origin[f"{parts.scheme}://{parts.netloc}"].append(url)
    slots = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=1)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        results = await asyncio.gather(
            *(crawl_host(session, o, u, delay, slots) for o, u in by_origin.items())
        )
    return sum(p for p, _ in results), sum(f for _, f in results)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls-file", type=Path, required=True, help="one page URL a line")
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds between a host's requests"
    )
    parser.add_argument("--concurrency", type=int, default=512, help="requests in flight at most")
    args = parser.parse_args(argv)
    urls = [u for u in args.urls_file.read_text(encoding="utf-8").split() if u]
    started = time.monotonic()
    pages, failures = asyncio.run(run(urls, args.delay, args.concurrency))
    print(
        f"floor: {pages} pages in {time.monotonic() - started:.2f} s, {failures} failed", flush=True
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
