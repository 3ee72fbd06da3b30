"""The short-link redirect listener as a process of its own, beside its worker.

Why a process: in the worker, the listener shared the event loop (and the GIL) with
Faust's agents, timers, commits and its aiokafka consumer thread. Whatever those ran
between two redirects — a consumer fetch being decoded on the other thread, a batch
of table writes, a commit — every redirect queued behind it waited: p99 29-45 ms
for a median under 1 ms (BENCHMARKS.md, short links). Here nothing else runs on the
loop, so a redirect waits only for other redirects.

What it reads: the worker's own RocksDB files of the code table (``links``), opened
as RocksDB *secondary* instances — read-only, beside the worker's primary, following
it by replaying its write-ahead log on ``try_catch_up_with_primary``. A link never
changes while it is valid (it may only expire, then be renewed or swept), so a copy
that is behind can only lack links, never give a wrong one:

* a code found here, not expired, on a partition the worker owns → answered here;
* anything else — a code not found (after one catch-up, at most one per partition
  per ``catch_up_interval``: a catch-up costs ~1.6 ms), an expired link (it may have
  been renewed), a partition the worker does not own → forwarded to the worker's web
  server, which answers with the authority of the table, or forwards to the owner.

So only issued codes resolve, and unknown, expired and moved codes get exactly the
worker's answers (404, 410, 503 while rebalancing). The worker tells this process
which partitions it owns, with their database paths, one JSON line on stdin per
change (``{"owned": {"0": "/path/links-0.db", ...}}``); stdin closing means the worker
is gone, and this process stops. Each redirect answered here appends a click event;
every ``flush_interval`` they go to the click topic as one message per partition
(the format the worker's click-counting agent reads), through a confluent-kafka
producer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import math
import shutil
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp

from streams.core.partitioning import partition_for
from streams.core.shortcodes import LRUCache, is_valid_code
from streams.web.redirect_server import FORWARD, Answer, RedirectServer

log = logging.getLogger("seine.redirects")

#: Headers of the worker's answer passed on to the client.
RELAYED_HEADERS = ("Location", "Retry-After", "Content-Type", "X-Seine-Served-By")


@dataclass
class RedirectProcessConfig:
    """What the worker hands its redirect process (as JSON on the command line)."""

    bind: str
    port: int
    #: The worker's web server, where everything not answered here goes.
    web_url: str
    partitions: int
    bootstrap: str
    clicks_topic: str
    #: Where the RocksDB secondary instances keep their own (small) files.
    secondary_dir: str
    cache_size: int = 100_000
    flush_interval: float = 1.0
    catch_up_interval: float = 0.05
    #: Seconds between two catch-ups of the next partition in turn (see refresh_one).
    refresh_interval: float = 10.0
    forward_timeout: float = 10.0
    #: Longest the last clicks may take to reach the broker when the process stops
    #: (the worker kills it 5 s after asking it to stop).
    final_flush_timeout: float = 3.0
    event_loop: str = "uvloop"


class Link(NamedTuple):
    url: str
    permanent: bool
    expires_at: float | None
    partition: int


def table_key(code: str) -> bytes:
    """A code as the code table stores it: Faust's json key serializer (a JSON string)."""
    return b'"' + code.encode("ascii") + b'"'


def open_secondary(primary: str, secondary: str) -> Any:
    """A read-only RocksDB instance that follows `primary` (the worker's database)."""
    from rocksdict import AccessType, Options, Rdict

    options = Options(raw_mode=True)  # as Faust's rocksdict store writes
    options.set_max_open_files(-1)  # a secondary must keep every file open
    Path(secondary).mkdir(parents=True, exist_ok=True)
    return Rdict(primary, options=options, access_type=AccessType.secondary(secondary))


class LinkReader:
    """Code → link from the worker's code table, for the partitions the worker owns.

    Pure of Kafka and HTTP: `resolve` is the listener's resolver (see the module
    docstring for what is answered here and what is forwarded), and the click
    events it records are taken with `take_clicks`.
    """

    def __init__(
        self,
        partitions: int,
        secondary_dir: str,
        *,
        cache_size: int = 100_000,
        catch_up_interval: float = 0.05,
        opener: Callable[[str, str], Any] = open_secondary,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.partitions = partitions
        self.secondary_dir = Path(secondary_dir)
        self.cache: LRUCache[str, Link] = LRUCache(cache_size)
        self.catch_up_interval = catch_up_interval
        self.opener = opener
        self.clock = clock
        #: partition → primary path, of the partitions the worker owns.
        self.owned: dict[int, str] = {}
        self.dbs: dict[int, Any] = {}
        self.last_catch_up: dict[int, float] = {}
        #: partition → click events, each already JSON: ["code",time].
        self.clicks: defaultdict[int, list[str]] = defaultdict(list)
        self.served = 0
        self.forwarded = 0
        self.catch_ups = 0

    def set_owned(self, owned: dict[int, str]) -> None:
        """The worker's partitions changed: drop what we no longer own (its links may
        be served by another worker from now on), open the new ones lazily."""
        for partition in [p for p in self.dbs if owned.get(p) != self.owned.get(p)]:
            self._close(partition)
        self.owned = dict(owned)
        self.cache.clear()

    def close(self) -> None:
        for partition in list(self.dbs):
            self._close(partition)

    def _close(self, partition: int) -> None:
        db = self.dbs.pop(partition, None)
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()

    def _db(self, partition: int) -> Any | None:
        db = self.dbs.get(partition)
        if db is None and partition in self.owned:
            now = time.monotonic()
            if now - self.last_catch_up.get(partition, -math.inf) < self.catch_up_interval:
                return None  # an open failed just now: not again at once
            self.last_catch_up[partition] = now
            try:
                db = self.opener(self.owned[partition], str(self.secondary_dir / str(partition)))
            except Exception as exc:  # not created yet by the worker, or being moved
                log.warning("cannot open links partition %d yet: %s", partition, exc)
                return None
            self.dbs[partition] = db
        return db

    def _read(self, db: Any, partition: int, code: str) -> Link | None:
        key = table_key(code)
        raw = db.get(key)
        if raw is None:
            now = time.monotonic()
            if now - self.last_catch_up.get(partition, -math.inf) < self.catch_up_interval:
                return None
            self.last_catch_up[partition] = now
            self.catch_ups += 1
            try:
                db.try_catch_up_with_primary()
            except Exception as exc:
                log.warning("links partition %d: catch-up failed: %s", partition, exc)
                return None
            raw = db.get(key)
            if raw is None:
                return None
        link = json.loads(raw)
        return Link(link["url"], bool(link["permanent"]), link["expires_at"], partition)

    def resolve(self, code: str) -> Answer:
        if not is_valid_code(code):
            return 404, "unknown code"
        now = self.clock()
        link = self.cache.get(code)
        if link is None:
            partition = partition_for(code, self.partitions)
            db = self._db(partition)
            link = None if db is None else self._read(db, partition, code)
            if link is None:
                self.forwarded += 1
                return FORWARD, ""
            self.cache.put(code, link)
        if link.expires_at is not None and now >= link.expires_at:
            # Renewed since, perhaps: the worker's table decides (410 or the new link).
            self.forwarded += 1
            return FORWARD, ""
        # Encoded now, a µs a click: encoding a second of them at once (json.dumps of
        # ~10,000 pairs) paused the loop for 20-70 ms. A str is not tracked by the GC.
        self.clicks[link.partition].append(f'["{code}",{now:.3f}]')
        self.served += 1
        return (301 if link.permanent else 302), link.url

    def refresh_one(self) -> None:
        """Catch one open partition up with the primary, in turn. Misses catch up on
        their own; this is for the files: a secondary keeps the files it has read
        open, so without it the SST files the primary has compacted away since would
        stay on disk for as long as this process lives."""
        if not self.dbs:
            return
        partition = min(self.dbs, key=lambda p: self.last_catch_up.get(p, -math.inf))
        self.last_catch_up[partition] = time.monotonic()
        try:
            self.dbs[partition].try_catch_up_with_primary()
        except Exception as exc:
            log.warning("links partition %d: catch-up failed: %s", partition, exc)

    def take_clicks(self) -> dict[int, list[str]]:
        clicks, self.clicks = self.clicks, defaultdict(list)
        return clicks


def clicks_message(clicks: list[str]) -> bytes:
    """The click topic's message for one partition: {"clicks": [["code", time], ...]}."""
    return ('{"clicks":[' + ",".join(clicks) + "]}").encode()


def parse_owned(line: bytes) -> dict[int, str] | None:
    """One line from the worker: its partitions with their database paths."""
    try:
        message = json.loads(line)
        return {int(p): str(path) for p, path in message["owned"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("redirect process: ignoring a malformed line from the worker")
        return None


class Forwarder:
    """Asks the worker's web server for what is not answered here."""

    def __init__(self, web_url: str, timeout: float) -> None:
        self.web_url = web_url.rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.session: aiohttp.ClientSession | None = None

    async def __call__(
        self, code: str, method: str, remote: str
    ) -> tuple[int, dict[str, str], bytes]:
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=self.timeout)
        try:
            async with self.session.request(
                method, f"{self.web_url}/s/{code}", allow_redirects=False
            ) as response:
                body = await response.read()
                headers = {h: response.headers[h] for h in RELAYED_HEADERS if h in response.headers}
                # Who answered: the owner the worker forwarded to, or else the worker.
                headers.setdefault("X-Seine-Served-By", self.web_url)
                return response.status, headers, body
        except (aiohttp.ClientError, TimeoutError) as exc:
            body = json.dumps({"error": f"worker unreachable: {exc}; retry"}).encode()
            return 503, {"Retry-After": "1", "Content-Type": "application/json"}, body

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


async def serve(config: RedirectProcessConfig) -> None:
    from streams.kafka.producer import StageProducer

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    reader = LinkReader(
        config.partitions,
        config.secondary_dir,
        cache_size=config.cache_size,
        catch_up_interval=config.catch_up_interval,
    )
    forward = Forwarder(config.web_url, config.forward_timeout)
    producer = StageProducer(config.bootstrap, **{"linger.ms": 20, "acks": 1})
    server = RedirectServer(reader.resolve, forward)

    def flush_clicks() -> None:
        for partition, clicks in reader.take_clicks().items():
            producer.produce(config.clicks_topic, clicks_message(clicks), partition)
        producer.poll()

    async def flush_loop() -> None:
        last_refresh = time.monotonic()
        while True:
            await asyncio.sleep(config.flush_interval)
            flush_clicks()
            if time.monotonic() - last_refresh >= config.refresh_interval:
                last_refresh = time.monotonic()
                reader.refresh_one()

    async def read_worker() -> None:
        """Owned partitions from the worker, until its end of the pipe closes."""
        stream = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), sys.stdin)
        while line := await stream.readline():
            owned = parse_owned(line)
            if owned is not None:
                reader.set_owned(owned)
        stop.set()

    port = await server.start(config.bind, config.port)
    log.info("redirects served on %s:%d", config.bind, port)
    # Everything so far lives as long as the process: keep the GC's full passes off it.
    gc.collect()
    gc.freeze()
    tasks = [asyncio.ensure_future(flush_loop()), asyncio.ensure_future(read_worker())]
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await server.stop()
        await forward.close()
        flush_clicks()
        producer.close(config.final_flush_timeout)
        reader.close()
        shutil.rmtree(config.secondary_dir, ignore_errors=True)


def config_argument(config: RedirectProcessConfig) -> str:
    return json.dumps(asdict(config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seine's short-link redirect process")
    parser.add_argument("config", help="RedirectProcessConfig as JSON (the worker writes it)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    config = RedirectProcessConfig(**json.loads(args.config))
    logging.basicConfig(
        level=args.log_level.upper(), format="[%(asctime)s] redirects %(levelname)s %(message)s"
    )
    if config.event_loop == "uvloop":
        try:
            import uvloop

            uvloop.run(serve(config))
            return 0
        except ImportError:
            pass
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
