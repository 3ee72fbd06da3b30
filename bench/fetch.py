"""CPU per fetch: Seine's Fetcher against plain aiohttp, on the crawl bench's kind of web.

nginx serves a demo web on loopback (200 IP hosts, 8 KB pages, as
bench/crawl_throughput.py does) and each client fetches every host's pages with one
request in flight per host. The peer is a bare aiohttp session configured like the
Fetcher's (same connector limits, read timeout, default headers, no decompression):
the difference is the Fetcher's own work (guards, timeouts, bounded reading,
result). ``--compare PATH`` adds another Fetcher as a third client, for before/after
figures in one process: PATH is a module defining ``Fetcher`` and ``FetchConfig``
(an older tree's streams/fetch/fetcher.py, or its streams/core/fetching.py from
before the streams/fetch/ package); what it imports comes from this tree. Clients
take turns round by round on the same warm connections; figures are this process's
CPU time per fetch (the machine is shared: CPU, not wall time), median of rounds.

    .venv/bin/python bench/fetch.py                      # ~1 min; needs nginx
    .venv/bin/python bench/fetch.py --guard              # private targets off (127/8 allow-listed)
    .venv/bin/python bench/fetch.py --compare /tmp/old/streams/fetch/fetcher.py
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streams.core.decode import accept_encoding
from streams.demo.nginx import nginx_binary, start_nginx
from streams.demo.webgen import WebSpec
from streams.fetch import handlers
from streams.fetch.config import FetchConfig
from streams.fetch.fetcher import Fetcher

Client = Callable[[list[str]], Awaitable[None]]


def load_fetching(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("compared_fetching", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # a fetching.py from before streams/fetch/ imports its handlers from the old path
    sys.modules.setdefault("streams.core.handlers", handlers)
    spec.loader.exec_module(module)
    return module


async def make_fetcher(module: Any, guard: bool) -> tuple[Client, Callable[[], Awaitable[None]]]:
    config = module.FetchConfig(
        allow_private=not guard, allowed_networks=("127.0.0.0/8",) if guard else ()
    )
    fetcher = module.Fetcher(config)
    await fetcher.start()

    async def client(urls: list[str]) -> None:
        for url in urls:
            result = await fetcher.fetch(url)
            if result.outcome != "fetched":
                raise RuntimeError(f"{url}: {result.outcome} {result.reason}")

    return client, fetcher.close


async def make_aiohttp() -> tuple[Client, Callable[[], Awaitable[None]]]:
    config = FetchConfig()
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=config.pool_size, limit_per_host=4),
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=None,
            sock_connect=config.connect_timeout,
            sock_read=config.read_timeout,
        ),
        headers={
            "User-Agent": config.user_agent,
            "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1",
            "Accept-Encoding": accept_encoding(),
        },
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )

    async def client(urls: list[str]) -> None:
        for url in urls:
            async with session.get(url, allow_redirects=False) as response:
                body = await response.read()
                if response.status != 200 or not body:
                    raise RuntimeError(f"{url}: HTTP {response.status}")

    return client, session.close


async def measure(args: argparse.Namespace, by_host: list[list[str]]) -> dict[str, list[float]]:
    clients: dict[str, tuple[Client, Callable[[], Awaitable[None]]]] = {
        "aiohttp": await make_aiohttp(),
        "Fetcher": await make_fetcher(
            SimpleNamespace(Fetcher=Fetcher, FetchConfig=FetchConfig), args.guard
        ),
    }
    if args.compare:
        clients["compared"] = await make_fetcher(load_fetching(args.compare), args.guard)
    fetches = sum(len(urls) for urls in by_host)
    for client, _ in clients.values():  # open every connection before measuring
        await asyncio.gather(*(client(urls[:2]) for urls in by_host))
    cpu: dict[str, list[float]] = {name: [] for name in clients}
    names = list(clients)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            client = clients[name][0]
            started = time.process_time()
            await asyncio.gather(*(client(urls) for urls in by_host))
            cpu[name].append((time.process_time() - started) / fetches * 1e6)
    for _, close in clients.values():
        await close()
    return cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--pages", type=int, default=10, help="pages per host and round")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--guard", action="store_true", help="private targets off, 127/8 allow-listed")
    p.add_argument("--compare", metavar="FETCHER_PY", help="another Fetcher module to measure")
    args = p.parse_args()
    if nginx_binary() is None:
        print("bench/fetch.py needs nginx (apt-get install nginx-light)", file=sys.stderr)
        return 2
    import uvloop

    with tempfile.TemporaryDirectory(prefix="seine-fetch-bench-") as work:
        spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages, use_ip_hosts=True)
        server = start_nginx(spec, work, workers=1)
        try:
            by_host: dict[str, list[str]] = {}
            for host, target in server.web.served_targets():
                if "?" not in target and "/private/" not in target:
                    by_host.setdefault(host, []).append(f"http://{host}:{server.port}{target}")
            cpu = uvloop.run(measure(args, list(by_host.values())))
        finally:
            server.stop()
    peer = statistics.median(cpu["aiohttp"])
    print(
        f"{args.hosts} hosts x {args.pages} pages of {spec.page_bytes} B, one request in flight"
        f" per host, {args.rounds} rounds; private targets {'off' if args.guard else 'on'}"
    )
    for name, values in cpu.items():
        median = statistics.median(values)
        print(
            f"  {name:9s} {median:6.1f} µs CPU a fetch (median; min {min(values):.1f}),"
            f" {median / peer:.2f}x aiohttp"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
