"""The demo web's server for bench/crawl_throughput.py (nginx or the Python demo server),
and the referee that judges a crawl from the server's request log."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from streams.demo.nginx import NginxServer, nginx_binary, start_nginx
from streams.demo.protocol import Quirks
from streams.demo.server import (
    ServerProcess,
    read_request_log,
    start_server_process,
)
from streams.demo.webgen import DemoWeb, WebSpec

INSTALL_NGINX = "apt-get install nginx-light   (Debian/Ubuntu; any nginx on PATH works)"


# ---------------------------------------------------------------------------- the server


class Site:
    """The demo web being served, whichever server serves it, plus its request log."""

    def __init__(
        self,
        kind: str,
        web: DemoWeb,
        read_log: Callable[[], list[dict[str, Any]]],
        stop: Callable[[], object],
        pid: int,
        time_resolution: float,
    ) -> None:
        self.kind = kind
        self.web = web
        self.port = web.port
        self._read_log = read_log
        self._stop = stop
        self.pid = pid
        #: Clock resolution of the log's start/end times (nginx: milliseconds).
        self.time_resolution = time_resolution

    def read_log(self) -> list[dict[str, Any]]:
        return self._read_log()

    def stop(self) -> None:
        self._stop()

    def cpu_seconds(self) -> float:
        """User+system CPU of the server so far (nginx: master and workers)."""
        try:
            root = psutil.Process(self.pid)
            total = 0.0
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    total += times.user + times.system
            return total
        except psutil.Error:
            return float("nan")


def start_site(
    spec: WebSpec, kind: str, workdir: Path, latency: dict[str, float] | None = None
) -> Site:
    """Serve spec with nginx ("nginx", or "auto" when installed) or the Python server;
    `latency` (host -> seconds added to each of its responses) needs the Python server."""
    if latency:
        if kind == "nginx":
            raise SystemExit("--server nginx cannot delay responses: use --server python")
        kind = "python"
    if kind in ("auto", "nginx") and nginx_binary() is None:
        if kind == "nginx":
            raise SystemExit(
                f"--server nginx: nginx is not installed; install it with\n  {INSTALL_NGINX}"
            )
        print(
            "nginx not found: serving with the Python demo server instead (it shares the two\n"
            f"cores with the crawler). For the reference setup install nginx:\n  {INSTALL_NGINX}",
            flush=True,
        )
        kind = "python"
    elif kind == "auto":
        kind = "nginx"
    if kind == "nginx":
        nginx: NginxServer = start_nginx(spec, workdir / "nginx", workers=2)
        return Site("nginx", nginx.web, nginx.read_log, nginx.stop, nginx.process.pid, 0.0015)
    log = workdir / "requests.jsonl"
    quirks = Quirks(latency=dict(latency or {}))
    server: ServerProcess = start_server_process(
        spec, log, workdir, prerender=True, extra_args=quirks.to_args()
    )
    return Site(
        "python (prerendered)",
        server.web,
        lambda: read_request_log(log),
        server.stop,
        server.process.pid,
        1e-4,
    )


# ---------------------------------------------------------------------------- the referee


@dataclass
class Check:
    """The server log's verdict on one crawl."""

    page_fetches: int = 0
    robots_fetches: int = 0
    first_request: float = 0.0
    last_request: float = 0.0
    missing: int = 0
    extra: int = 0
    robots_violations: int = 0
    duplicate_fetches: int = 0
    urls_fetched_twice_or_more: int = 0
    hosts_without_robots: int = 0
    repeated_robots_fetches: int = 0
    non_200: dict[str, int] = field(default_factory=dict)
    overlapping_requests: int = 0
    #: Requests to a host started less than the politeness delay after its previous one.
    too_close: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def crawl_s(self) -> float:
        return max(0.0, self.last_request - self.first_request)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.extra or self.duplicate_fetches)


def referee(
    records: list[dict[str, Any]],
    web: DemoWeb,
    expected: set[str],
    disallowed: set[str],
    tolerance: float,
    delay: float = 0.0,
) -> Check:
    """Judge a crawl by the server's requests: every expected page once, nothing else;
    requests to a host at least `delay` apart (start to start)."""
    check = Check()
    if not records:
        check.missing = len(expected)
        return check
    check.first_request = min(r["start"] for r in records)
    check.last_request = max(r["end"] for r in records)
    port = web.port
    pages: Counter[str] = Counter()
    robots: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    by_host: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        host = str(r["host"]).lower()
        by_host[host].append((r["start"], r["end"]))
        if r["status"] != 200:
            statuses[str(r["status"])] += 1
        if r["path"] == "/robots.txt":
            robots[host] += 1
        else:
            pages[f"http://{host}:{port}{r['path']}"] += 1
    fetched = set(pages)
    missing = expected - fetched
    extra = fetched - expected
    violations = {u for u in extra if u in disallowed or "/private/" in u}
    check.page_fetches = sum(pages.values())
    check.robots_fetches = sum(robots.values())
    check.missing = len(missing)
    check.extra = len(extra)
    check.robots_violations = len(violations)
    check.duplicate_fetches = sum(n - 1 for n in pages.values() if n > 1)
    check.urls_fetched_twice_or_more = sum(1 for n in pages.values() if n > 1)
    check.hosts_without_robots = len(set(web.hosts) - set(robots))
    check.repeated_robots_fetches = sum(n - 1 for n in robots.values() if n > 1)
    check.non_200 = dict(statuses)
    for spans in by_host.values():
        spans.sort()
        busy_until, previous = spans[0][1], spans[0][0]
        for start, end in spans[1:]:
            if start < busy_until - tolerance:
                check.overlapping_requests += 1
            if delay and start - previous < delay - tolerance:
                check.too_close += 1
            busy_until, previous = max(busy_until, end), start
    check.examples = {
        "missing": sorted(missing)[:5],
        "extra": sorted(extra)[:5],
        "duplicates": sorted(u for u, n in pages.items() if n > 1)[:5],
    }
    return check
