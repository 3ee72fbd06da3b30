"""The Scrapy peer of bench/crawl_throughput.py: crawl a demo web, count pages, store nothing.

Run by the benchmark as a child process (so its RSS and CPU are measured on their own)::

    .venv/bin/python bench/scrapy_peer.py --seeds-file seeds.txt --hosts-file hosts.txt \\
        [--resolve-file resolve.json] [--stats-out stats.json]

Why these settings: they are the ones the crawl-throughput comparison promises, so that
both crawlers are held to the same politeness (one request in flight per host, the same
delay, ``--delay``, between a host's requests, robots.txt obeyed) and Scrapy gets as many
requests in flight overall (``--concurrency``, 64 by default) as it wants.
Everything else is Scrapy's defaults, which since 2.x already include the broad-crawl
scheduler (``DownloaderAwarePriorityQueue``); only the telnet console is switched off
(it would open a port and does nothing for a crawl).

Why ``response.css("a::attr(href)")`` + ``response.urljoin`` rather than LinkExtractor:
it is the cheapest correct way to follow every link in Scrapy (``urljoin`` honours
``<base href>``), so the peer is not slowed by extraction features the demo web does not
need. The request fingerprint dupe filter (on by default) drops URLs already seen, and
links are followed only to the demo's own hosts.

Why a resolver class: the demo web's host names (``site-NNNN.demo.test``) resolve
nowhere; Scrapy has no ``--resolve``, so with ``--resolve-file`` a subclass of Scrapy's
own caching resolver answers those names from the map and defers anything else to it.
With IP-literal hosts (the benchmark's default) no resolver is involved at all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.core.downloader import Downloader
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer

#: host name -> IP, filled from --resolve-file before the crawler starts.
RESOLVE: dict[str, str] = {}


class MappedResolver(CachingThreadedResolver):
    """Scrapy's caching resolver, answering the demo host names from `RESOLVE` first."""

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        address = RESOLVE.get(name.lower())
        if address is not None:
            return defer.succeed(address)
        return super().getHostByName(name, timeout)


class _ClaimingQueue(deque[tuple[Any, Any]]):
    """A download slot's queue whose requests count as transferring once taken out.

    Scrapy 2.19's `Downloader._process_queue` takes queued requests while the slot
    has free transfer places, but a request joins `slot.transferring` only when its
    download coroutine first runs: with no delay, one pass hands out the whole queue,
    and CONCURRENT_REQUESTS_PER_DOMAIN=1 let five requests reach one slow host at
    once. Counting a request as transferring as it leaves the queue restores the limit.
    """

    def __init__(self, slot: Any) -> None:
        super().__init__()
        self.slot = slot

    def popleft(self) -> tuple[Any, Any]:
        request, deferred = super().popleft()
        self.slot.transferring.add(request)
        return request, deferred


class PoliteDownloader(Downloader):
    """Scrapy's downloader with its per-slot concurrency held (`_ClaimingQueue`)."""

    def _get_slot(self, request: Any, spider: Any = None) -> tuple[str, Any]:
        key, slot = super()._get_slot(request, spider)
        if not isinstance(slot.queue, _ClaimingQueue):
            queue = _ClaimingQueue(slot)
            queue.extend(slot.queue)
            slot.queue = queue
        return key, slot


class DemoSpider(scrapy.Spider):
    """Follows every http link to a demo host; counts pages instead of yielding items."""

    name = "seine-bench-peer"

    def __init__(self, seeds: list[str], hosts: set[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seeds = seeds
        self.hosts = hosts
        self.pages = 0
        self.links_followed = 0
        self.first_response: float | None = None
        self.last_response: float | None = None

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.seeds:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[scrapy.Request]:
        now = time.time()
        if self.first_response is None:
            self.first_response = now
        self.last_response = now
        self.pages += 1
        if not isinstance(response, scrapy.http.TextResponse):
            return
        hosts = self.hosts
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href.strip())
            parts = urlsplit(url)
            if parts.scheme != "http" or (parts.hostname or "") not in hosts:
                continue
            self.links_followed += 1
            yield scrapy.Request(url, callback=self.parse)


def settings(concurrency: int, resolver: bool, delay: float = 0.0) -> dict[str, Any]:
    """The peer's Scrapy settings (see the module docstring for why each is there)."""
    values: dict[str, Any] = {
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": delay,
        # the delay as given, as Seine's --delay: Scrapy would otherwise wait 0.5-1.5x it
        "DOWNLOAD_DELAY_JITTER": 0,
        # one request in flight per host, as the setting above says (PoliteDownloader)
        "DOWNLOADER": PoliteDownloader,
        "ROBOTSTXT_OBEY": True,
        "AUTOTHROTTLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }
    if resolver:
        values["TWISTED_DNS_RESOLVER"] = MappedResolver
    return values


def _lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds-file", type=Path, required=True, help="one seed URL a line")
    parser.add_argument(
        "--hosts-file", type=Path, required=True, help="host names to follow links to"
    )
    parser.add_argument("--resolve-file", type=Path, help="JSON {host: ip} for named hosts")
    parser.add_argument("--concurrency", type=int, default=64, help="CONCURRENT_REQUESTS")
    parser.add_argument("--delay", type=float, default=0.0, help="DOWNLOAD_DELAY, seconds")
    parser.add_argument("--stats-out", type=Path, help="write pages and Scrapy stats as JSON")
    args = parser.parse_args(argv)

    if args.resolve_file is not None:
        mapping = json.loads(args.resolve_file.read_text(encoding="utf-8"))
        RESOLVE.update({str(k).lower(): str(v) for k, v in mapping.items()})
    seeds = _lines(args.seeds_file)
    hosts = {h.lower() for h in _lines(args.hosts_file)}

    process = CrawlerProcess(settings(args.concurrency, bool(RESOLVE), args.delay))
    crawler = process.create_crawler(DemoSpider)
    process.crawl(crawler, seeds=seeds, hosts=hosts)
    process.start()

    spider = crawler.spider
    assert isinstance(spider, DemoSpider)
    stats = {k: v for k, v in (crawler.stats.get_stats() if crawler.stats else {}).items()}
    result = {
        "pages": spider.pages,
        "links_followed": spider.links_followed,
        "first_response": spider.first_response,
        "last_response": spider.last_response,
        "stats": {k: (v if isinstance(v, int | float | str) else str(v)) for k, v in stats.items()},
    }
    if args.stats_out is not None:
        args.stats_out.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
    print(
        f"scrapy: {spider.pages} pages parsed, "
        f"{stats.get('downloader/request_count', 0)} requests, "
        f"{stats.get('robotstxt/forbidden', 0)} forbidden by robots.txt, "
        f"{stats.get('dupefilter/filtered', 0)} dropped as duplicates",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
