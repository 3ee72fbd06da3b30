"""A deliberately bad Bloom filter (≥ 30% false positives) loses no page and fetches none twice."""

from __future__ import annotations

import re
from pathlib import Path

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.store.pagestore import PageStore
from tests.integration.conftest import run_crawl


def test_tiny_bloom_filter_still_fetches_every_page_exactly_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    spec = WebSpec(hosts=8, pages_per_host=20, seed=5)
    log = tmp_path / "requests.jsonl"
    with start_server_process(spec, log, tmp_path / "web") as server:
        run = run_crawl(
            broker,
            tmp_path / "data",
            server.seeds,
            partitions=2,
            resolve=server.resolve,
            SEINE_BLOOM_CAPACITY="16",
            SEINE_BLOOM_ERROR_RATE="0.6",
            SEINE_LOG_LEVEL="info",
        )
        assert run.returncode == 0, run.stderr[-3000:]
        expected = server.web.reachable_allowed()
    pages = [(r["host"], r["path"]) for r in read_request_log(log) if r["path"] != "/robots.txt"]
    assert len(pages) == len(set(pages)) == len(expected)
    with PageStore(run.data_dir / "pages", read_only=True) as store:
        assert set(store.urls()) == expected
    found = re.search(r"(\d+) false positives confirmed new.*?(\d+) confirmed seen", run.stdout)
    assert found, run.stdout
    false_positives, confirmed_seen = int(found.group(1)), int(found.group(2))
    # of the URLs the filter called "maybe seen", a large share were in fact new
    assert false_positives >= 0.3 * len(expected), (false_positives, confirmed_seen)
