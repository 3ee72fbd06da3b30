"""The clients of bench/shortlinks.py: link creation from many loopback addresses, and
the redirect load (wrk, or a Python client), with their figures summarized."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
BURST_PER_SOURCE = 50  # below the server's default burst of 60


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


async def wait_ready(base: str, deadline_s: float) -> float:
    """Until POST /links answers 201 (503 while partitions are assigned and recovered)."""
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - started < deadline_s:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.post(
                    f"{base}/links", json={"url": "https://ready.example/"}
                ) as r:
                    if r.status == 201:
                        return time.monotonic() - started
            await asyncio.sleep(0.2)
    raise TimeoutError(f"worker not ready after {deadline_s}s")


async def create_all(base: str, urls: list[str], concurrency: int) -> dict[str, Any]:
    """POST every URL, at most BURST_PER_SOURCE per loopback source address."""
    sources = [f"127.0.0.{2 + i}" for i in range((len(urls) - 1) // BURST_PER_SOURCE + 1)]
    if len(sources) > 250:
        raise SystemExit("--links too large for the loopback source addresses")
    sessions = [
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ip, 0), limit=0))
        for ip in sources
    ]
    codes: list[str] = [""] * len(urls)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    next_index = 0

    async def one_client() -> None:
        nonlocal next_index
        while next_index < len(urls):
            i = next_index
            next_index += 1
            session = sessions[i // BURST_PER_SOURCE]
            t0 = time.perf_counter()
            async with session.post(f"{base}/links", json={"url": urls[i]}) as r:
                body = await r.json()
            latencies.append(time.perf_counter() - t0)
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status == 201:
                codes[i] = body["code"]

    started = time.perf_counter()
    try:
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    finally:
        for session in sessions:
            await session.close()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(urls),
        "seconds": round(elapsed, 3),
        "per_second": round(len(urls) / elapsed, 1),
        "p50_ms": round(1000 * percentile(latencies, 0.5), 2),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 2),
        "statuses": statuses,
        "codes": codes,
    }


async def redirects_aiohttp(
    base: str, codes: list[str], concurrency: int, count: int, seconds: float
) -> tuple[list[float], dict[int, int], float]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    issued = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_client() -> None:
            nonlocal issued
            while issued < count and time.perf_counter() < deadline:
                code = codes[issued % len(codes)]
                issued += 1
                t0 = time.perf_counter()
                async with session.get(f"{base}/s/{code}", allow_redirects=False) as r:
                    await r.read()
                latencies.append(time.perf_counter() - t0)
                statuses[r.status] = statuses.get(r.status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, statuses, elapsed


async def redirects_raw(
    host: str, port: int, codes: list[str], concurrency: int, count: int, seconds: float
) -> tuple[list[float], dict[int, int], float]:
    """Keep-alive HTTP/1.1 over asyncio streams: a client that costs far less CPU per
    request than aiohttp's, so that the client is not what limits the figure."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    issued = 0
    deadline = time.perf_counter() + seconds
    requests = [f"GET /s/{code} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode() for code in codes]

    async def one_connection() -> None:
        nonlocal issued
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while issued < count and time.perf_counter() < deadline:
                request = requests[issued % len(requests)]
                issued += 1
                t0 = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection() for _ in range(concurrency)))
    return latencies, statuses, time.perf_counter() - started


WRK_SCRIPT = REPO / "bench" / "shortlinks_wrk.lua"


def pause_for(rate: float, connections: int) -> int:
    """wrk's per-connection pause (whole milliseconds) for about `rate` requests/s:
    each connection then sends one request per pause plus answer time, so the rate
    reached is a little below `rate` (the report gives the rate measured)."""
    if rate <= 0:
        return 0
    return max(1, round(connections * 1000 / rate))


async def redirects_wrk(
    port: int, codes: list[str], connections: int, seconds: float, pause_ms: int = 0
) -> dict[str, Any]:
    """One bounded wrk run (one thread, `connections` keep-alive connections, `seconds`
    seconds, a 2 s request timeout); wrk runs on this process's CPU (the client's).
    `pause_ms` > 0: each connection waits that long after an answer before its next
    request (a paced load, below the server's capacity; 0: as fast as it answers)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed (apt-get install wrk), or use --client raw")
    with tempfile.NamedTemporaryFile("w", suffix=".codes", delete=False) as f:
        f.write("\n".join(codes) + "\n")
        codes_file = f.name
    try:
        proc = await asyncio.create_subprocess_exec(
            *(wrk, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "2s"),
            *("-s", str(WRK_SCRIPT), f"http://127.0.0.1:{port}/", "--", codes_file),
            str(pause_ms),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), seconds + 30)
    finally:
        os.unlink(codes_file)
    lines = out.decode().strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"wrk failed ({proc.returncode}): {out.decode()} {err.decode()}")
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def summarize_wrk(summary: dict[str, Any], cpu: float | None) -> dict[str, Any]:
    done = summary["requests"]
    seconds = summary["duration_us"] / 1e6
    errors = {k[7:]: v for k, v in summary.items() if k.startswith("errors_") and v}
    out: dict[str, Any] = {
        "requests": done,
        "errors": errors,
        "seconds": round(seconds, 3),
        "per_second": round(done / seconds, 1),
        "p50_ms": round(summary["p50_us"] / 1000, 3),
        "p90_ms": round(summary["p90_us"] / 1000, 3),
        "p99_ms": round(summary["p99_us"] / 1000, 3),
        "p999_ms": round(summary["p999_us"] / 1000, 3),
        "max_ms": round(summary["max_us"] / 1000, 3),
    }
    if cpu is not None:
        out["server_cpu_s"] = round(cpu, 2)
        out["per_server_cpu_second"] = round(done / cpu, 1) if cpu > 0 else None
    return out


async def wait_port(port: int, deadline_s: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port} after {deadline_s}s")


def summarize(
    latencies: list[float], statuses: dict[int, int], elapsed: float, cpu: float | None
) -> dict[str, Any]:
    latencies.sort()
    done = len(latencies)
    out: dict[str, Any] = {
        "requests": done,
        "statuses": statuses,
        "seconds": round(elapsed, 3),
        "per_second": round(done / elapsed, 1),
        "p50_ms": round(1000 * percentile(latencies, 0.5), 3),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 3),
        "max_ms": round(1000 * latencies[-1], 3) if latencies else None,
    }
    if cpu is not None:
        out["server_cpu_s"] = round(cpu, 2)
        out["per_server_cpu_second"] = round(done / cpu, 1) if cpu > 0 else None
    return out
