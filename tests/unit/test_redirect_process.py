"""The redirect process's reading of the worker's code table: real RocksDB files opened
the way Faust's rocksdict store opens them (the primary, written here as the worker
would) and read through a RocksDB secondary instance, as the process does.

What must hold (the short-link guarantees, outside the worker): only codes issued on a
partition the worker owns are answered here; anything not found, expired, or on
another partition goes to the worker (FORWARD), which decides 404/410/503; a link
written after the reader opened is found (catch-up with the primary), and catch-ups are
rate limited; every answer here records a click; the process ends when the worker's end
of its stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import faust
import pytest
from aiohttp import web
from faust.stores.rocksdb import RocksDBOptions

from streams.core.partitioning import partition_for
from streams.core.shortcodes import ALPHABET
from streams.kafka.broker import free_port
from streams.web.redirect_process import (
    LinkReader,
    RedirectProcessConfig,
    clicks_message,
    config_argument,
    parse_owned,
    table_key,
)
from streams.web.redirect_server import FORWARD

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def codes_on(partition: int, count: int, salt: str = "") -> list[str]:
    """Well-formed codes whose partition is `partition`."""
    out: list[str] = []
    i = 0
    while len(out) < count:
        code = "".join(ALPHABET[(i * 7 + k * 13 + len(salt)) % 62] for k in range(7))
        i += 1
        if partition_for(code, PARTITIONS) == partition and code not in out:
            out.append(code)
    return out


def primary(path: Path) -> Any:
    """The worker's side: Faust's own rocksdict opener, as its store uses it."""
    return RocksDBOptions(use_rocksdict=True).open(path)


def put_link(db: Any, code: str, url: str, expires_at: float | None = None, **kw: Any) -> None:
    link = {
        "url": url,
        "created_at": time.time(),
        "expires_at": expires_at,
        "permanent": kw.get("permanent", False),
        "seed": 0,
    }
    db.put(table_key(code), json.dumps(link).encode())


def test_table_key_is_the_code_tables_key_encoding() -> None:
    app = faust.App("keys", broker="kafka://127.0.0.1:1")
    table = app.Table("links", default=None, partitions=PARTITIONS, key_type=str)
    for code in ("abcDEF1", "0000000", "zzzzzzz"):
        serializer = table.key_serializer  # type: ignore[attr-defined]
        expected = app.serializers.dumps_key(str, code, serializer=serializer)
        assert table_key(code) == expected


def test_owned_issued_codes_are_answered_here_and_the_rest_forwarded(tmp_path: Path) -> None:
    paths = {p: tmp_path / f"links-{p}.db" for p in range(2)}
    dbs = {p: primary(path) for p, path in paths.items()}
    temp, perm, gone = codes_on(0, 3)
    other = codes_on(2, 1)[0]  # a partition of another worker
    put_link(dbs[0], temp, "https://example.com/t?x=1")
    put_link(dbs[0], perm, "https://example.com/p", permanent=True)
    put_link(dbs[0], gone, "https://example.com/g", expires_at=time.time() - 1)
    now = [time.time()]
    reader = LinkReader(PARTITIONS, str(tmp_path / "sec"), clock=lambda: now[0])
    reader.set_owned({p: str(path) for p, path in paths.items()})

    assert reader.resolve(temp) == (302, "https://example.com/t?x=1")
    assert reader.resolve(perm) == (301, "https://example.com/p")
    assert reader.resolve(temp) == (302, "https://example.com/t?x=1")  # from the cache
    # Not answered here: expired (may be renewed: the worker says 410 or the new link),
    # never issued, another worker's partition. Not a code at all: 404 here.
    assert reader.resolve(gone) == (FORWARD, "")
    assert reader.resolve(codes_on(1, 1)[0]) == (FORWARD, "")
    put_link(dbs[0], other, "https://example.com/o")  # even if a stale copy had it
    assert reader.resolve(other) == (FORWARD, "")
    assert reader.resolve("abc") == (404, "unknown code")
    assert reader.resolve("abc-def") == (404, "unknown code")
    # A cached link that expires meanwhile goes to the worker too.
    soon = codes_on(0, 1, "soon")[0]
    put_link(dbs[0], soon, "https://example.com/soon", expires_at=now[0] + 10)
    reader.catch_up_interval = 0.0
    assert reader.resolve(soon) == (302, "https://example.com/soon")
    now[0] += 11
    assert reader.resolve(soon) == (FORWARD, "")

    clicks = reader.take_clicks()
    assert list(clicks) == [0]
    events = json.loads(clicks_message(clicks[0]))["clicks"]  # as the counting agent reads
    assert [code for code, _ in events] == [temp, perm, temp, soon]
    assert all(at == pytest.approx(time.time(), abs=60) for _, at in events)
    assert reader.take_clicks() == {}
    # The worker lost its partitions (a rebalance): nothing is answered here any more.
    reader.set_owned({})
    assert reader.resolve(temp) == (FORWARD, "")
    assert reader.take_clicks() == {}
    reader.close()


def test_links_written_after_opening_are_found_and_catch_ups_are_rate_limited(
    tmp_path: Path,
) -> None:
    path = tmp_path / "links-1.db"
    db = primary(path)
    first, second, third = codes_on(1, 3)
    put_link(db, first, "https://example.com/1")
    reader = LinkReader(PARTITIONS, str(tmp_path / "sec"), catch_up_interval=3600.0)
    reader.set_owned({1: str(path)})
    assert reader.resolve(first) == (302, "https://example.com/1")
    put_link(db, second, "https://example.com/2")  # created after the reader opened
    # long ago (not 0.0: monotonic time starts near boot, under an hour on a fresh machine)
    reader.last_catch_up[1] = -math.inf
    assert reader.resolve(second) == (302, "https://example.com/2")
    assert reader.catch_ups == 1
    # Within catch_up_interval of that catch-up, a miss is forwarded without another.
    put_link(db, third, "https://example.com/3")
    assert reader.resolve(third) == (FORWARD, "")
    assert reader.catch_ups == 1
    reader.last_catch_up[1] = -math.inf
    assert reader.resolve(third) == (302, "https://example.com/3")
    assert reader.catch_ups == 2
    # The periodic refresh catches up too, without a miss to start it.
    fourth = codes_on(1, 4)[3]
    put_link(db, fourth, "https://example.com/4")
    assert reader._read(reader.dbs[1], 1, fourth) is None  # within catch_up_interval
    reader.refresh_one()
    assert reader.resolve(fourth) == (302, "https://example.com/4")
    reader.close()


def test_a_partition_not_created_yet_is_forwarded_until_it_exists(tmp_path: Path) -> None:
    path = tmp_path / "links-3.db"
    code = codes_on(3, 1)[0]
    reader = LinkReader(PARTITIONS, str(tmp_path / "sec"), catch_up_interval=0.0)
    reader.set_owned({3: str(path)})
    assert reader.resolve(code) == (FORWARD, "")
    put_link(primary(path), code, "https://example.com/late")
    assert reader.resolve(code) == (302, "https://example.com/late")
    reader.close()


def test_malformed_lines_from_the_worker_are_ignored() -> None:
    assert parse_owned(b'{"owned": {"0": "/a/links-0.db"}}\n') == {0: "/a/links-0.db"}
    assert parse_owned(b'{"owned": {}}') == {}
    for line in (b"garbage", b"[]", b'{"owned": 3}', b'{"owned": {"x": "p"}}'):
        assert parse_owned(line) is None


def test_the_process_serves_forwards_and_ends_with_its_worker(tmp_path: Path) -> None:
    """The process itself over loopback: a code of an owned partition answered from
    the table, an unknown one relayed from the worker's web server (a stand-in here),
    and stdin closing (the worker gone) ends it and removes its secondary files."""
    path = tmp_path / "links-0.db"
    db = primary(path)
    known, unknown = codes_on(0, 2)
    put_link(db, known, "https://example.com/known")

    async def scenario() -> None:
        asked: list[str] = []

        async def worker_route(request: web.Request) -> web.Response:
            asked.append(request.match_info["code"])
            return web.json_response({"error": "unknown code"}, status=404)

        app = web.Application()
        app.router.add_get("/s/{code}", worker_route)
        runner = web.AppRunner(app)
        await runner.setup()
        web_port, port = free_port(), free_port()
        await web.TCPSite(runner, "127.0.0.1", web_port).start()
        config = RedirectProcessConfig(
            bind="127.0.0.1",
            port=port,
            web_url=f"http://127.0.0.1:{web_port}",
            partitions=PARTITIONS,
            bootstrap="127.0.0.1:1",  # nothing there: clicks wait in the producer
            clicks_topic="links-test.link-clicks",
            secondary_dir=str(tmp_path / "secondary"),
            final_flush_timeout=0.2,
        )
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "streams.web.redirect_process", config_argument(config)),
            stdin=subprocess.PIPE,
            cwd=REPO,
        )
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"owned": {"0": str(path)}}).encode() + b"\n")
            await proc.stdin.drain()
            answers: dict[str, tuple[int, str | None, str | None]] = {}
            deadline = time.monotonic() + 20
            # Until the process listens and has read the owned partitions (before
            # that, the known code too is the worker's to answer).
            while answers.get(known, (0,))[0] != 302 and time.monotonic() < deadline:
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)  # poll interval; the condition is the port
                    continue
                for code in (known, unknown):
                    writer.write(f"GET /s/{code} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                    headers = dict(
                        line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line
                    )
                    await reader.readexactly(int(headers["Content-Length"]))
                    answers[code] = (
                        int(head[9:12]),
                        headers.get("Location"),
                        headers.get("X-Seine-Served-By"),
                    )
                writer.close()
                if answers[known][0] != 302:
                    await asyncio.sleep(0.05)  # poll interval; the condition is the 302
            worker_url = f"http://127.0.0.1:{web_port}"
            assert answers == {
                known: (302, "https://example.com/known", None),
                unknown: (404, None, worker_url),
            }
            assert unknown in asked and set(asked) <= {known, unknown}
            proc.stdin.close()  # the worker is gone
            assert await asyncio.wait_for(proc.wait(), 20) == 0
            assert not (tmp_path / "secondary").exists()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(scenario(), 60))
