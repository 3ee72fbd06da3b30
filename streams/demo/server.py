"""Serve a :class:`~streams.demo.webgen.DemoWeb` on loopback, recording every request.

Why a hand-rolled asyncio protocol rather than an aiohttp app: the throughput benchmark
needs this server to answer >2,000 pages/s on a 2-core box while the crawler under test
competes for the same cores, so the server must not be the bottleneck. A minimal
HTTP/1.1 parser over pre-rendered, cached response bytes (keep-alive, pipelining) costs a
small fraction of what a framework request cycle costs.

Why one listening socket per host IP: every demo host has its own loopback address
(127.0.1.1, 127.0.1.2, ...), all on the same port, so per-IP politeness and DNS-override
(``--resolve``) code paths in the crawler are exercised as on the real web. The page is
chosen by the Host header, falling back to the local address the request arrived on.

Why a request log: the integration tests judge the crawler by what the *server* saw —
no URL fetched twice, nothing robots.txt forbids fetched, never two requests in flight to
one host. Each request appends one tuple in memory; JSON lines are written periodically
and at shutdown, so logging stays off the hot path. ``latency`` delays every response,
which turns "two requests in flight to one host" into overlapping [start, end] intervals
that the log can reveal.

Run as a subprocess (what tests and the benchmark do)::

    python -m streams.demo.server --hosts 50 --pages 40 --seed 1 \\
        --log requests.jsonl --ready-file ready.json

It writes ``{"port", "resolve", "seeds"}`` to the ready file once listening and exits
cleanly (log flushed) on SIGTERM/SIGINT.

This module is the command line; the pieces live beside it: :mod:`streams.demo.protocol`
(the HTTP protocol and response cache), :mod:`streams.demo.serving` (:class:`DemoServer`,
listening sockets, the request log) and :mod:`streams.demo.process` (the server as a
subprocess). Their public names are importable from here too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streams.demo.process import ServerProcess, spec_to_args, start_server_process
from streams.demo.protocol import Quirks
from streams.demo.serving import DemoServer, read_request_log
from streams.demo.webgen import DemoWeb, WebSpec

__all__ = [
    "DemoServer",
    "Quirks",
    "ServerProcess",
    "read_request_log",
    "spec_to_args",
    "start_server_process",
]


def _host_values(items: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        host, sep, value = item.partition("=")
        if not sep or not host or not value:
            raise ValueError(f"{flag} expects HOST=VALUE, got {item!r}")
        out[host.strip().lower()] = value.strip()
    return out


def _quirks_from_args(args: argparse.Namespace) -> Quirks:
    throttle = {}
    for host, value in _host_values(args.throttle, "--throttle").items():
        every, _, secs = value.partition(":")
        throttle[host] = (max(1, int(every)), float(secs or 1))
    return Quirks(
        throttle=throttle,
        crawl_delay={
            h: float(v) for h, v in _host_values(args.crawl_delay, "--crawl-delay").items()
        },
        latency={h: float(v) for h, v in _host_values(args.host_latency, "--host-latency").items()},
    )


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    d = WebSpec()
    p = argparse.ArgumentParser(prog="python -m streams.demo.server", description=__doc__)
    p.add_argument("--hosts", type=int, default=d.hosts)
    p.add_argument("--pages", type=int, default=d.pages_per_host, help="pages per host")
    p.add_argument("--page-bytes", type=int, default=d.page_bytes)
    p.add_argument("--links", type=int, default=d.links_per_page, help="links per page")
    p.add_argument("--cross-host-fraction", type=float, default=d.cross_host_fraction)
    p.add_argument("--duplicate-fraction", type=float, default=d.duplicate_fraction)
    p.add_argument("--disallowed-fraction", type=float, default=d.disallowed_fraction)
    p.add_argument("--www-alias-fraction", type=float, default=d.www_alias_fraction)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--base-ip", default=d.base_ip)
    p.add_argument("--port", type=int, default=d.port, help="0 = pick a free port")
    p.add_argument("--use-ip-hosts", action="store_true")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to each response")
    p.add_argument("--log", type=Path, default=None, help="request log (JSON lines)")
    p.add_argument("--ready-file", type=Path, default=None)
    p.add_argument("--flush-interval", type=float, default=1.0)
    p.add_argument("--no-uvloop", action="store_true", help="use the stdlib event loop")
    p.add_argument(
        "--throttle",
        action="append",
        default=[],
        metavar="HOST=EVERY:SECONDS",
        help="answer every EVERY-th page request of HOST (from the first) 429 + Retry-After",
    )
    p.add_argument(
        "--crawl-delay",
        dest="crawl_delay",
        action="append",
        default=[],
        metavar="HOST=SECONDS",
        help="add a Crawl-delay to HOST's robots.txt",
    )
    p.add_argument(
        "--host-latency",
        dest="host_latency",
        action="append",
        default=[],
        metavar="HOST=SECONDS",
        help="extra seconds before each response of HOST",
    )
    p.add_argument(
        "--prerender", action="store_true", help="render every page before becoming ready"
    )
    return p.parse_args(argv)


def _spec_from_args(args: argparse.Namespace) -> WebSpec:
    return WebSpec(
        hosts=args.hosts,
        pages_per_host=args.pages,
        page_bytes=args.page_bytes,
        links_per_page=args.links,
        cross_host_fraction=args.cross_host_fraction,
        duplicate_fraction=args.duplicate_fraction,
        disallowed_fraction=args.disallowed_fraction,
        www_alias_fraction=args.www_alias_fraction,
        seed=args.seed,
        base_ip=args.base_ip,
        port=args.port,
        use_ip_hosts=args.use_ip_hosts,
    )


def write_json_atomically(path: Path, data: Any) -> None:
    """Readers polling for the file never see it half-written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    web = DemoWeb(_spec_from_args(args))
    server = DemoServer(
        web,
        log_path=args.log,
        latency=args.latency,
        flush_interval=args.flush_interval,
        prerender=args.prerender,
        quirks=_quirks_from_args(args),
    )
    async with server:
        if args.ready_file is not None:
            write_json_atomically(args.ready_file, server.ready_info())
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if not args.no_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(_serve(args))
            return 0
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
