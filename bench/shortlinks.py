"""Benchmark short links: redirects per second with p50/p99 latency, and creation rate.

Run:  .venv/bin/python bench/shortlinks.py                       (embedded broker, wrk, ~1 min)
      .venv/bin/python bench/shortlinks.py --hot 100             (100 hot links)
      .venv/bin/python bench/shortlinks.py --client raw          (a Python client, no wrk)
      .venv/bin/python bench/shortlinks.py --bootstrap HOST:PORT  (an existing broker)

What it answers: can one worker answer >= 5,000 redirects/s on one core with
p99 <= 5 ms, and how fast does it create links.

How it measures, and why:

* A real worker (`seine worker --web-port P`) runs as a subprocess, exactly as in the
  integration test, pinned to CPU 0 while the load generator is pinned to CPU 1
  (``--no-pin`` turns that off), so "one core" is the worker's core and the client does
  not steal it. The worker runs every crawl agent too (idle), as a real worker would.
* Creation: ``--links`` distinct URLs POSTed with ``--concurrency`` in flight, then the
  same URLs again (the idempotent path: a table read, no Kafka round trip). The API is
  rate limited per client address (token bucket), so creation requests come from many
  loopback source addresses (127.0.0.2...), at most ``burst`` per address: the figure
  is the server's creation capacity, not the limiter's.
* Redirects: GET /s/CODE over keep-alive connections, codes drawn round-robin from the
  created links (``--hot N``: from the first N only), ``--connections`` requests in
  flight, for ``--seconds`` seconds after a warm-up. The load generator is ``wrk`` (one
  thread, C, ``bench/shortlinks_wrk.lua`` spreads the requests over the codes and
  prints a JSON summary): a Python client needs about as much CPU per request as the
  server, so on two cores it measured itself as much as the server. ``--client
  aiohttp|raw`` keeps the Python clients (no wrk needed; they also stop after
  ``--redirects`` requests). Every answer must be a 302 (wrk counts any other status
  as an error); latency is per request on the client, closed loop. Round-robin over
  all links is the worst case for click counting (every code is clicked in every
  counting window, so a table write per code and window); real traffic, with hot
  links, aggregates better (``--hot 100``).
* Two ways in: the worker's dedicated redirect listener (``--redirect-port``,
  streams/web/redirect_server.py), which short URLs point at, and the same route on
  the worker's aiohttp web server; both are measured, listener first.
* A bare aiohttp app answering the same redirects from a dict (uvloop, same core,
  same client, same codes) is measured after the worker, and the report gives
  Seine / bare: what this machine allows right now, before any Seine code runs
  (``--no-peer`` skips it).
* The embedded broker is pinned to the client's CPU: the worker's core serves the
  redirects and whatever the worker itself does (click events, consumer fetches).
* The worker's CPU time (user+system, all its threads, from /proc) is sampled around
  the redirect phase, so the report also gives redirects per worker CPU-second: on a
  shared, loaded machine that is the steadier "per core" figure, wall-clock rps the
  honest one.
* The load is bounded in count and time and stays on 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.shortlinks_clients import (  # noqa: E402
    create_all,
    pause_for,
    redirects_aiohttp,
    redirects_raw,
    redirects_wrk,
    summarize,
    summarize_wrk,
    wait_port,
    wait_ready,
)
from streams.kafka.broker import EmbeddedBroker, free_port  # noqa: E402


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (the worker's redirect process is its child)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """User + system CPU of a process and (`tree`) its descendants, all threads, from /proc."""
    total = 0
    for one in descendants(pid) if tree else [pid]:
        with contextlib.suppress(OSError), open(f"/proc/{one}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def broker_at(bootstrap: str | None, workdir: Path, pin: bool) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with EmbeddedBroker(log_path=workdir / "tansu.log") as broker:
        proc = getattr(broker, "_proc", None)
        if pin and proc is not None and (os.cpu_count() or 1) >= 2:
            os.sched_setaffinity(proc.pid, {1})  # the client's CPU, not the worker's
        yield broker.bootstrap


@contextlib.contextmanager
def worker(
    bootstrap: str, workdir: Path, port: int, redirect_port: int, pin: bool
) -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ)
    env.update(
        {
            "SEINE_APP_ID": f"bench{uuid.uuid4().hex[:8]}",
            "SEINE_SESSION_TIMEOUT": "4",
            "SEINE_REBALANCE_TIMEOUT": "2",
            "SEINE_HEARTBEAT_INTERVAL": "1",
            "SEINE_FETCH_MAX_WAIT_MS": "20",
            "SEINE_LOG_LEVEL": "error",
        }
    )
    args = [sys.executable, "-m", "streams.cli", "worker", "--bootstrap", bootstrap]
    args += ["--web-port", str(port), "--data-dir", str(workdir / "worker")]
    args += ["--redirect-port", str(redirect_port)]
    log = (workdir / "worker.log").open("wb")
    proc = subprocess.Popen(
        args, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    if pin and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(proc.pid, {0})
        os.sched_setaffinity(0, {1})
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextlib.contextmanager
def profiled(pid: int, output: str | None, seconds: float) -> Iterator[None]:
    """py-spy (sampling, native frames off) on the worker while the block runs, into
    `output` (.svg flame graph, or .txt for py-spy's collapsed stacks)."""
    if not output:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    fmt = "raw" if output.endswith(".txt") else "flamegraph"
    proc = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--nonblocking",
            "--threads",
            "--subprocesses",
            "--format",
            fmt,
            "-o",
            output,
            "--duration",
            str(round(seconds + 6)),
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.wait(seconds + 60)


PEER_SERVER = """
import sys, uvloop
from aiohttp import web
TARGETS = {}
async def redirect(request):
    code = request.match_info["code"]
    url = TARGETS.get(code)
    if url is None:
        url = TARGETS[code] = "https://peer.example/" + code
    return web.Response(status=302, headers={"Location": url})
app = web.Application()
app.router.add_get("/s/{code}", redirect)
uvloop.install()
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


@contextlib.contextmanager
def peer_server(port: int, pin: bool) -> Iterator[subprocess.Popen[bytes]]:
    """The floor under any redirect figure on this machine, now: a bare aiohttp app
    (uvloop, a dict lookup, the same response) on the same core, same client."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PEER_SERVER, str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    if pin and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(proc.pid, {0})
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


async def measure_redirects(
    args: argparse.Namespace, pid: int, port: int, codes: list[str]
) -> dict[str, Any]:
    """Warm up, then one measured, bounded redirect phase against the server `pid`."""
    if args.client == "wrk":
        pause_ms = pause_for(args.rate, args.connections)
        await redirects_wrk(port, codes, args.connections, 2.0, pause_ms)
        await asyncio.sleep(1.0)
        cpu_before, own_before = cpu_seconds(pid), cpu_seconds(pid, tree=False)
        summary = await redirects_wrk(port, codes, args.connections, args.seconds, pause_ms)
        out = summarize_wrk(summary, cpu_seconds(pid) - cpu_before)
        # The worker itself, and its children (the redirect process), apart.
        own = cpu_seconds(pid, tree=False) - own_before
        out["server_cpu_s_split"] = {
            "process": round(own, 2),
            "children": round(out["server_cpu_s"] - own, 2),
        }
        return out
    await redirect_load(args, port, codes, min(2000, args.redirects), 10.0)
    await asyncio.sleep(1.0)
    cpu_before = cpu_seconds(pid)
    latencies, statuses, elapsed = await redirect_load(
        args, port, codes, args.redirects, args.seconds
    )
    return summarize(latencies, statuses, elapsed, cpu_seconds(pid) - cpu_before)


async def redirect_load(
    args: argparse.Namespace, port: int, codes: list[str], count: int, seconds: float
) -> tuple[list[float], dict[int, int], float]:
    if args.client == "raw":
        return await redirects_raw("127.0.0.1", port, codes, args.connections, count, seconds)
    base = f"http://127.0.0.1:{port}"
    return await redirects_aiohttp(base, codes, args.connections, count, seconds)


async def run_peer(args: argparse.Namespace, codes: list[str]) -> dict[str, Any]:
    port = free_port()
    with peer_server(port, args.pin) as proc:
        await wait_port(port, 20.0)
        return await measure_redirects(args, proc.pid, port, codes)


async def run(args: argparse.Namespace, pid: int, port: int, redirect_port: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    ready_after = await wait_ready(base, 90.0)
    urls = [
        f"https://bench{i}.example/page/{i}?q={uuid.uuid4().hex[:6]}" for i in range(args.links)
    ]
    created = await create_all(base, urls, args.concurrency)
    again = await create_all(base, urls, args.concurrency)
    all_codes = created.pop("codes")
    again_codes = again.pop("codes")
    # A code is "" where the request was refused (503 while partitions move, 429):
    # only two answered requests for one URL can disagree.
    pairs = zip(all_codes, again_codes, strict=True)
    differ = [i for i, (a, b) in enumerate(pairs) if a and b and a != b]
    if differ:
        raise SystemExit(f"{len(differ)} URLs got different codes the second time")
    if "" in all_codes or "" in again_codes:
        print(
            f"creation refused some requests: first {created['statuses']}, "
            f"again {again['statuses']}",
            file=sys.stderr,
        )
    codes = [c for c in all_codes if c]
    if args.hot:
        codes = codes[: args.hot]
    if not codes:
        raise SystemExit(f"no link created: {created['statuses']}")

    idle_before = cpu_seconds(pid)
    await asyncio.sleep(2.0)
    idle_cpu_per_s = (cpu_seconds(pid) - idle_before) / 2.0
    with profiled(pid, args.profile, args.seconds):
        redirects = await measure_redirects(args, pid, redirect_port, codes)
    redirects["client"] = args.client
    redirects["distinct_codes"] = len(codes)
    redirects["connections"] = args.connections
    # What the worker burns with no request at all (consumer fetch loop, timers).
    redirects["worker_idle_cpu_per_s"] = round(idle_cpu_per_s, 3)
    web_route = await measure_redirects(args, pid, port, codes) if args.web_route else None

    # Clicks are counted asynchronously: report how many reached the table.
    async with (
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(local_addr=("127.0.0.254", 0))
        ) as session,
        session.get(f"{base}/links/{codes[0]}") as r,
    ):
        info = await r.json()
    return {
        "worker_ready_after_s": round(ready_after, 1),
        "create_new": created,
        "create_existing": again,
        "redirects": redirects,
        "redirects_via_aiohttp_web_server": web_route,
        "codes": codes,
        "clicks_counted_for_first_code": info.get("clicks"),
        "pinned": args.pin,
    }


def run_async(coro: Any) -> Any:
    """uvloop for the client too when it is there (the worker uses it by default)."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def codes_of(result: dict[str, Any]) -> list[str]:
    return list(result.pop("codes"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="Kafka bootstrap (default: embedded broker)")
    parser.add_argument("--links", type=int, default=2000, help="links to create")
    parser.add_argument(
        "--redirects", type=int, default=100_000, help="most redirects sent (Python clients)"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="redirect phase time limit")
    parser.add_argument(
        "--connections", type=int, default=16, help="keep-alive connections, one request each"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="creation requests in flight")
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="pace wrk to about this many redirects/s (each connection pauses "
        "connections*1000/rate ms between answer and request): latency at a given load, "
        "not at saturation (default 0: saturate)",
    )
    parser.add_argument("--client", choices=("wrk", "aiohttp", "raw"), default="wrk")
    parser.add_argument(
        "--hot",
        type=int,
        default=0,
        help="redirect to only the first N links (default: all, round-robin: every click "
        "is then a distinct code, the worst case for click counting)",
    )
    parser.add_argument(
        "--profile", metavar="FILE", help="py-spy the worker during the redirects (.svg/.txt)"
    )
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="no CPU pinning")
    parser.add_argument(
        "--no-web-route",
        dest="web_route",
        action="store_false",
        help="skip measuring /s/CODE on the worker's aiohttp web server",
    )
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false", help="skip the bare aiohttp reference"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="seine-bench-links-") as tmp:
        workdir = Path(tmp)
        with broker_at(args.bootstrap, workdir, args.pin) as bootstrap:
            port, redirect_port = free_port(), free_port()
            with worker(bootstrap, workdir, port, redirect_port, args.pin) as proc:
                try:
                    result = run_async(run(args, proc.pid, port, redirect_port))
                except BaseException:
                    sys.stderr.write((workdir / "worker.log").read_text("utf-8", "replace")[-4000:])
                    raise
            codes = codes_of(result)
            if args.peer:
                peer = run_async(run_peer(args, codes))
                result["peer_bare_aiohttp_redirects"] = peer
                result["seine_over_bare_aiohttp"] = round(
                    result["redirects"]["per_second"] / peer["per_second"], 3
                )
    result["loadavg_before"] = [round(x, 2) for x in load_before]
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    main()
