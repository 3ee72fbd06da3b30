"""The Fetcher against the hostile catalogue: timeouts, and memory under decompression
bombs and deep nesting (see test_fetch_hostile.py for how the cases run)."""

from __future__ import annotations

import asyncio
import re
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest

from streams.core.parsing import parse_html
from streams.fetch.fetcher import Fetcher
from streams.fetch.handlers import FetchResult
from tests.hostile import server as hs
from tests.hostile.server import HostileProcess
from tests.unit.hostile_helpers import (
    CAP,
    SLACK,
    TIMEOUTS,
    _has_br,
    _zstd,
    connection_spy,
    host_of,
    make_config,
    run,
)

# -- timeouts -----------------------------------------------------------------------------------


@dataclass
class Timed:
    url: str  # a path on the server, or a full URL with {blackhole}/{refused}
    outcome: str
    reason: str
    min_s: float
    max_s: float
    nbytes: int | None = None


TIMED: dict[str, Timed] = {
    "slow-first-byte": Timed(
        "/slow-first-byte", "fetched", r"$", hs.SLOW_FIRST_BYTE_S, 1.0 + SLACK
    ),
    "slow-first-byte-beyond": Timed(
        "/slow-first-byte?delay=5",
        "error",
        r"timeout: first byte \(no response within 0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=0,
    ),
    "never-answers": Timed(
        "/never-answers",
        "error",
        r"timeout: first byte \(no response within 0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=0,
    ),
    # a byte every 0.2 s: the read timeout never fires, the first-byte timeout does
    "trickle-headers": Timed(
        "/trickle-headers",
        "error",
        r"timeout: first byte \(headers incomplete after 1 s\)$",
        1.0,
        1.0 + SLACK,
        nbytes=0,
    ),
    "hang-after-headers": Timed(
        "/hang-after-headers",
        "error",
        r"timeout: read \(body stalled for 0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=len(b"<html>"),
    ),
    # a byte every 0.1 s: no read gap, no first-byte problem, only the total ends it
    "slow-body": Timed("/slow-body", "error", r"timeout: total \(2 s\)$", 2.0, 2.0 + SLACK),
    "blackhole": Timed(
        "http://127.0.0.1:{blackhole}/",
        "error",
        r"timeout: connect \(0.5 s\)$",
        0.5,
        0.5 + SLACK,
        nbytes=0,
    ),
    "refused": Timed(
        "http://127.0.0.1:{refused}/",
        "error",
        r"connect: .*refused|connect: .*111",
        0.0,
        SLACK,
        nbytes=0,
    ),
}


@pytest.fixture(scope="module")
def timed_results(hostile: HostileProcess) -> dict[str, Any]:
    """The slow cases at once, while a control host is fetched again and again."""
    names = [host_of(n) for n in TIMED] + ["control.hostile.test"]
    config = make_config(hostile, names, **TIMEOUTS)

    def url(name: str, case: Timed) -> str:
        if case.url.startswith("http"):
            return case.url.format(blackhole=hostile.blackhole_port, refused=hostile.refused_port)
        return f"http://{host_of(name)}:{hostile.port}{case.url}"

    async def control(fetcher: Fetcher, until: float) -> list[FetchResult]:
        out: list[FetchResult] = []
        while time.monotonic() < until and len(out) < 200:  # bounded in count and time
            out.append(await fetcher.fetch(f"http://control.hostile.test:{hostile.port}/ok"))
        return out

    async def go() -> tuple[dict[str, FetchResult], list[FetchResult]]:
        fetcher = Fetcher(config)
        try:
            slow = asyncio.gather(*(fetcher.fetch(url(n, c)) for n, c in TIMED.items()))
            controls = control(fetcher, time.monotonic() + 2.0)
            results, control_results = await asyncio.gather(slow, controls)
        finally:
            await fetcher.close()
        return dict(zip(TIMED, results, strict=True)), control_results

    with connection_spy():
        results, controls = run(go)
    return {"results": results, "controls": controls}


@pytest.mark.parametrize("name", list(TIMED))
def test_timeouts(timed_results: dict[str, Any], name: str) -> None:
    case, r = TIMED[name], timed_results["results"][name]
    assert r.outcome == case.outcome, (r.outcome, r.reason)
    assert re.match(case.reason, r.reason), r.reason
    seconds = r.elapsed_ms / 1000
    assert case.min_s - 0.02 <= seconds <= case.max_s, seconds
    assert seconds <= TIMEOUTS["total_timeout"] + SLACK
    if case.outcome != "fetched":
        assert r.status == 0
    if case.nbytes is not None:
        assert len(r.body) == case.nbytes


def test_slow_body_keeps_what_arrived(timed_results: dict[str, Any]) -> None:
    r = timed_results["results"]["slow-body"]
    assert 0 < len(r.body) < 100_000 and r.body == b"x" * len(r.body)


def test_other_hosts_are_fetched_at_full_speed_meanwhile(timed_results: dict[str, Any]) -> None:
    controls = timed_results["controls"]
    assert len(controls) >= 10, "the control host was starved while others hung"
    assert all(r.outcome == "fetched" and r.body == hs.OK_BODY for r in controls)
    # not queued behind hosts that hang for seconds (a loose bound: the machine may be busy)
    assert max(r.elapsed_ms for r in controls) < 1000, sorted(r.elapsed_ms for r in controls)[-3:]


# -- memory: bombs with tracemalloc -------------------------------------------------------------

BOMBS = ["/bomb/gzip", "/bomb/deflate", "/bomb/deflate-raw", "/bomb/gzip-members"]
if _has_br():
    BOMBS.append("/bomb/br")
if _zstd():
    BOMBS.append("/bomb/zstd")


@pytest.mark.parametrize("path", BOMBS)
def test_a_1gib_bomb_costs_a_few_caps_of_memory(hostile: HostileProcess, path: str) -> None:
    config = make_config(hostile, ["bomb.hostile.test"])

    async def go() -> tuple[FetchResult, int]:
        fetcher = Fetcher(config)
        await fetcher.start()
        try:
            tracemalloc.start()
            try:
                result = await fetcher.fetch(f"http://bomb.hostile.test:{hostile.port}{path}")
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        finally:
            await fetcher.close()
        return result, peak

    with connection_spy():
        result, peak = run(go)
    assert result.outcome == "fetched" and result.truncated, result.reason
    assert len(result.body) == CAP and result.body == b"\0" * CAP
    assert peak < 4 * CAP + (1 << 20), f"peak {peak / 2**20:.1f} MiB for a {CAP // 1024} KiB cap"


def test_the_whole_deep_nesting_page_parses(hostile: HostileProcess) -> None:
    """100,000 nested <div>s: fetched whole under a big enough cap, parsed in bounded time."""
    cap = 2 * len(hs.DEEP_NESTING_BODY)
    config = make_config(hostile, ["deep.hostile.test"], max_body_bytes=cap)

    async def go() -> FetchResult:
        fetcher = Fetcher(config)
        try:
            return await fetcher.fetch(f"http://deep.hostile.test:{hostile.port}/html/deep")
        finally:
            await fetcher.close()

    with connection_spy():
        result = run(go)
    assert result.outcome == "fetched" and not result.truncated
    assert result.body == hs.DEEP_NESTING_BODY
    started = time.process_time()  # CPU of this process: a loaded machine adds none
    parsed = parse_html(result.body)
    assert "/ok" in parsed.links
    assert time.process_time() - started < 10.0
