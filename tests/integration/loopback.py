"""A tiny scripted HTTP server on loopback that logs every request with its headers.

Routes are (host, path) → a function of the request headers returning (status,
headers, body), so a test can serve pages that change between visits, answer
conditional GETs, or serve sitemaps; the log is what the crawler really sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Response = tuple[int, dict[str, str], bytes]
Route = Callable[[dict[str, str]], Response]
#: Answers what the fixed routes do not: (host, path with query) -> a response or None.
Dynamic = Callable[[str, str], Response | None]


@dataclass
class Logged:
    host: str
    path: str
    headers: dict[str, str]
    status: int
    at: float


@dataclass
class LoopbackWeb:
    routes: dict[tuple[str, str], Route]
    dynamic: Dynamic | None = None
    log: list[Logged] = field(default_factory=list)
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self, host: str | None = None, path: str | None = None) -> list[Logged]:
        with self.lock:
            return [
                r
                for r in self.log
                if (host is None or r.host == host) and (path is None or r.path == path)
            ]

    def resolve(self, *hosts: str) -> dict[str, str]:
        return {host: f"127.0.0.1:{self.port}" for host in hosts}


def page(body: str, **headers: str) -> Route:
    data = body.encode()
    return lambda _h: (200, {"Content-Type": "text/html; charset=utf-8", **headers}, data)


def _handler(web: LoopbackWeb) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle on, a kept-alive
        # connection's next response waited ~40 ms for the client's delayed ACK.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            host = (self.headers.get("Host") or "").split(":")[0].lower()
            headers = {k.lower(): v for k, v in self.headers.items()}
            route = web.routes.get((host, self.path))
            answer = route(headers) if route else None
            if answer is None and web.dynamic is not None:
                answer = web.dynamic(host, self.path)
            status, extra, body = answer or (404, {}, b"not found")
            with web.lock:
                web.log.append(Logged(host, self.path, headers, status, time.time()))
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def serve(
    routes: dict[tuple[str, str], Route], dynamic: Dynamic | None = None
) -> Iterator[LoopbackWeb]:
    web = LoopbackWeb(routes, dynamic)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(web))
    server.daemon_threads = True
    web.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield web
    finally:
        server.shutdown()
        server.server_close()
