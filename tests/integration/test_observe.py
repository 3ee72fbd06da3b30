"""Watching a running crawl: the dashboard in headless Chromium, /metrics parsed by
prometheus_client, /stats.json, and `seine status` from the terminal.

One real crawl (real broker, the demo web on loopback, a real `seine crawl`
process with its web server) serves every test of this module. It is slowed by a
politeness delay so it is still running while the tests watch it grow.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker, free_port
from tests.integration.chromium import Chromium, chromium_binary
from tests.integration.conftest import REPO, crawl_env, run_seine, stop_process


@dataclass
class LiveCrawl:
    base: str
    app_id: str
    bootstrap: str
    log: Path


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def stats(crawl: LiveCrawl, scope: str = "worker") -> dict[str, Any]:
    return dict(json.loads(get(f"{crawl.base}/stats.json?scope={scope}")))


def wait_until(condition: Any, deadline_s: float, what: str, crawl: LiveCrawl) -> Any:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            value = condition()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}; worker log: {crawl.log.read_text()[-2000:]}")
        time.sleep(0.3)  # poll interval; the condition decides


@pytest.fixture(scope="module")
def live_crawl(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveCrawl]:
    tmp = tmp_path_factory.mktemp("observe")
    app_id = f"ob{uuid.uuid4().hex[:8]}"
    port = free_port()
    spec = WebSpec(hosts=8, pages_per_host=60, seed=5)
    with start_server_process(spec, None, tmp / "web") as server:
        seeds = tmp / "seeds.txt"
        seeds.write_text("\n".join(server.seeds) + "\n")
        args = [
            sys.executable,
            "-m",
            "streams.cli",
            "crawl",
            "--seeds-file",
            str(seeds),
            "--bootstrap",
            broker.bootstrap,
            "--data-dir",
            str(tmp / "data"),
            "--web-port",
            str(port),
            "--allow-private",
            "--keep-running",
            "--delay",
            "0.8",
        ]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        log_path = tmp / "crawl.log"
        log = open(log_path, "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            args,
            env=crawl_env(app_id),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        crawl = LiveCrawl(f"http://127.0.0.1:{port}", app_id, broker.bootstrap, log_path)
        try:
            wait_until(lambda: get(crawl.base + "/stats.json"), 60, "web server never up", crawl)
            yield crawl
        finally:
            stop_process(proc)
            log.close()


def test_dashboard_in_headless_chromium_shows_the_crawl_growing(
    live_crawl: LiveCrawl, tmp_path: Path
) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on this machine (apt-get install chromium) to drive the page")

    def number(el: str) -> str:
        return f"Number(document.getElementById({el!r}).dataset.value)"

    async def drive() -> tuple[float, float, float, float, list[str], bool]:
        async with Chromium(binary, tmp_path / "profile") as browser:
            await browser.open(
                live_crawl.base + "/", ready="document.getElementById('kpi-fetched')"
            )

            async def value_above(el: str, floor: float, deadline_s: float) -> float:
                deadline = time.monotonic() + deadline_s
                while True:
                    got = await browser.evaluate(number(el))
                    if isinstance(got, int | float) and got > floor:
                        return float(got)
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{el} stayed at {got} (wanted > {floor})")
                    await asyncio.sleep(0.3)  # poll interval; the page polls every second

            first = await value_above("kpi-fetched", 0, 90)
            stored_first = float(await browser.evaluate(number("kpi-stored")))
            await browser.screenshot(tmp_path / "dashboard-1.png")
            later = await value_above("kpi-fetched", first, 60)
            stored_later = await value_above("kpi-stored", stored_first, 60)
            await browser.screenshot(tmp_path / "dashboard-2.png")
            resources = await browser.evaluate(
                "performance.getEntriesByType('resource').map(e => e.name)"
            )
            chart_drawn = await browser.evaluate(
                "(() => { const c = document.getElementById('chart');"
                " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                " for (let i = 3; i < d.length; i += 4) if (d[i]) return true; return false; })()"
            )
            return first, later, stored_first, stored_later, list(resources), bool(chart_drawn)

    first, later, stored_first, stored_later, resources, chart_drawn = asyncio.run(drive())
    assert later > first and stored_later > stored_first
    assert chart_drawn
    # every request the page made went to the worker itself: nothing from outside
    assert resources and all(url.startswith(live_crawl.base + "/") for url in resources)
    shot = tmp_path / "dashboard-2.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_metrics_parse_and_count_the_crawl(live_crawl: LiveCrawl) -> None:
    def families() -> dict[str, Any]:
        text = get(live_crawl.base + "/metrics").decode()
        return {f.name: f for f in text_string_to_metric_families(text)}

    def fetched_200() -> float:
        fams = families()
        return sum(
            s.value
            for s in fams["seine_pages_fetched"].samples
            if s.name == "seine_pages_fetched_total" and s.labels.get("status") == "200"
        )

    first = wait_until(fetched_200, 90, "no 200 fetch in /metrics", live_crawl)

    def stages_counted() -> dict[str, Any] | None:
        # A page's first 200 is counted when its fetch ends; parse and link-extract
        # handle it a moment later, so wait for their counts rather than race them.
        fams = families()
        counted = {
            s.labels.get("stage")
            for s in fams["seine_stage_events"].samples
            if s.name == "seine_stage_events_total" and s.value > 0
        }
        return fams if {"frontier", "parse", "link-extract"} <= counted else None

    fams = wait_until(stages_counted, 60, "stages never counted in /metrics", live_crawl)
    for name in (
        "seine_pages_fetched",
        "seine_fetched_bytes",
        "seine_fetch_latency_seconds",
        "seine_stage_events",
        "seine_stage_items",
        "seine_stage_errors",
        "seine_consumer_lag",
        "seine_frontier_queued",
        "seine_urlseen_bloom_fill_ratio",
        "seine_page_store_bytes",
    ):
        assert name in fams, name
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples
    }
    assert values[("seine_fetched_bytes_total", ())] > 0
    assert values[("seine_fetch_latency_seconds_count", ())] >= first
    # (the fetch topic carries only requests this worker could not start at their
    # dispatch: none here, so its count may be 0)
    for stage in ("frontier", "parse", "link-extract"):
        assert values[("seine_stage_events_total", (("stage", stage),))] > 0, stage
    # ... but the fetch stage's work shows as its items: the requests it started
    assert values[("seine_stage_items_total", (("stage", "fetch"),))] > 0
    assert 0 < values[("seine_urlseen_bloom_fill_ratio", ())] < 0.5
    assert values[("seine_page_store_bytes", ())] > 0
    lag_stages = {
        dict(labels)["stage"] for (name, labels) in values if name == "seine_consumer_lag"
    }
    assert {"frontier", "fetch", "parse", "url-seen"} <= lag_stages
    wait_until(lambda: fetched_200() > first, 60, "fetch count in /metrics never grew", live_crawl)


def test_stats_json_for_the_whole_crawl(live_crawl: LiveCrawl) -> None:
    # pages_per_second leaves out the current second: wait for a complete second
    # with a fetch in it, not just for the first fetch (which may be this second's).
    snap = wait_until(
        lambda: (
            (s := stats(live_crawl, "crawl"))["outcomes"].get("fetched")
            and any(count for _, count in s["pages_per_second"])
            and s
        ),
        90,
        "nothing fetched in a complete second",
        live_crawl,
    )
    assert snap["scope"] == "crawl" and snap["workers"] == snap["workers_expected"] == 1
    assert snap["statuses"].get("200", 0) > 0
    # hosts with work or a fetch in flight; none once the crawl has drained
    assert snap["hosts"] or snap["queued"] == 0, snap
    for host in snap["hosts"]:
        assert {"host", "queued", "next_at", "busy"} <= set(host)
    assert any(count for _, count in snap["pages_per_second"])
    page = get(live_crawl.base + "/").decode()
    assert "<canvas" in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )


def test_seine_status_summarises_the_running_crawl(live_crawl: LiveCrawl) -> None:
    wait_until(
        lambda: stats(live_crawl)["outcomes"].get("fetched", 0) > 5, 90, "no fetches", live_crawl
    )
    done = run_seine(
        ["status", "--bootstrap", live_crawl.bootstrap, "--app-id", live_crawl.app_id],
        env=crawl_env(live_crawl.app_id),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"crawl {live_crawl.app_id!r}" in out
    fetched = int(out.split("fetched: ", 1)[1].split(" ", 1)[0])
    assert fetched > 5
    assert "by status: 200 " in out
    assert "consumer lag (group" in out and "frontier" in out
    assert "dead letters: 0" in out
    missing = run_seine(
        ["status", "--bootstrap", live_crawl.bootstrap, "--app-id", "no-such-crawl"],
        env=crawl_env("no-such-crawl"),
    )
    assert missing.returncode == 1 and "is a crawl running" in missing.stderr


def test_top_short_links_by_clicks(live_crawl: LiveCrawl) -> None:
    def create(url: str) -> str:
        request = urllib.request.Request(
            live_crawl.base + "/links",
            data=json.dumps({"url": url}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=20) as response:
            return str(json.loads(response.read())["code"])

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)

    def click(code: str) -> None:
        try:
            opener.open(f"{live_crawl.base}/s/{code}", timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 302

    codes = wait_until(
        lambda: [create("http://popular.example/"), create("http://quiet.example/")],
        60,
        "short links never created",
        live_crawl,
    )
    for _ in range(5):
        click(codes[0])
    click(codes[1])

    def top() -> list[dict[str, Any]] | None:
        links = stats(live_crawl, "crawl")["links"]
        counts = {link["code"]: link["clicks"] for link in links}
        return links if counts.get(codes[0]) == 5 and counts.get(codes[1]) == 1 else None

    links = wait_until(top, 60, "clicks never reached the dashboard data", live_crawl)
    assert [link["code"] for link in links[:2]] == codes
    assert links[0]["url"] == "http://popular.example/"


def test_search_answers_json_hits_while_the_crawl_runs(live_crawl: LiveCrawl) -> None:
    def hits() -> list[dict[str, Any]]:
        return list(json.loads(get(f"{live_crawl.base}/search?q=page&limit=5")))

    found = wait_until(hits, 90, "no search hits for 'page'", live_crawl)
    assert 1 <= len(found) <= 5
    assert [hit["rank"] for hit in found] == list(range(1, len(found) + 1))
    for hit in found:
        assert set(hit) >= {"query", "rank", "url", "title", "score", "snippet"}
        assert hit["query"] == "page" and hit["url"].startswith("http://")
    assert [hit["score"] for hit in found] == sorted((h["score"] for h in found), reverse=True)
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(f"{live_crawl.base}/search?q=")
    assert refused.value.code == 400


def test_dashboard_search_box_shows_highlighted_hits(live_crawl: LiveCrawl, tmp_path: Path) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on this machine (apt-get install chromium) to drive the page")
    wait_until(
        lambda: json.loads(get(f"{live_crawl.base}/search?q=page")),
        90,
        "no search hits for 'page'",
        live_crawl,
    )

    async def drive() -> tuple[int, list[str], list[str]]:
        async with Chromium(binary, tmp_path / "profile") as browser:
            await browser.open(live_crawl.base + "/", ready="document.getElementById('q')")
            await browser.evaluate(
                "document.getElementById('q').value = 'page';"
                "document.getElementById('search-form').requestSubmit()"
            )
            deadline = time.monotonic() + 30
            while True:
                count = await browser.evaluate("document.querySelectorAll('#hits li a').length")
                if isinstance(count, int) and count > 0:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError("the search box showed no hits")
                await asyncio.sleep(0.2)  # poll interval; the page fetches once
            marks = await browser.evaluate(
                "[...document.querySelectorAll('#hits mark')].map(m => m.textContent)"
            )
            links = await browser.evaluate(
                "[...document.querySelectorAll('#hits li a')].map(a => a.href)"
            )
            await browser.screenshot(tmp_path / "search.png")
            return count, list(marks), list(links)

    count, marks, links = asyncio.run(drive())
    assert count > 0 and all(link.startswith("http://") for link in links)
    assert marks and all(mark.lower() == "page" for mark in marks)
