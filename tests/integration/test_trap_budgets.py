"""Trap budgets in a real crawl: a per-host page budget and a cap on URLs queued per host.

Judged by the demo server's own log (no host is asked for more pages than its
budget) and by the crawl log (what went over is logged with its reason).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.ops.resume import url_states
from tests.integration.conftest import read_crawl_log, run_crawl

SPEC = WebSpec(hosts=4, pages_per_host=40, seed=5, cross_host_fraction=0.1)
HOST_PAGES = 6
HOST_QUEUE = 10


def test_host_budgets_bound_each_host_and_are_logged(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    server = start_server_process(SPEC, tmp_path / "requests.jsonl", tmp_path / "web")
    try:
        run = run_crawl(
            broker,
            tmp_path / "data",
            server.seeds,
            partitions=2,
            resolve=server.resolve,
            extra_args=[
                "--max-host-pages",
                str(HOST_PAGES),
                "--max-host-queue",
                str(HOST_QUEUE),
            ],
            timeout=120.0,
        )
        assert run.returncode == 0, run.stderr[-3000:]
    finally:
        assert server.stop() == 0
    assert server.log_path is not None
    pages = Counter(
        r["host"] for r in read_request_log(server.log_path) if r["path"] != "/robots.txt"
    )
    # every host had far more pages than its budget, and got exactly its budget
    assert set(pages) == set(server.web.hosts)
    assert all(n == HOST_PAGES for n in pages.values()), pages

    records = read_crawl_log(broker.bootstrap, run.app_id)
    refused = Counter(r["outcome"] for r in records if r["stage"] == "frontier")
    assert refused["host-budget"] > 0 and refused["host-queue-full"] > 0, refused
    for record in records:
        if record["outcome"] == "host-budget":
            assert record["reason"] == f"host page budget of {HOST_PAGES} spent"
        if record["outcome"] == "host-queue-full":
            assert record["reason"] == f"{HOST_QUEUE} URLs already queued for the host"
            assert urlsplit(record["url"]).hostname in server.web.hosts
    # nothing logged as refused was fetched
    fetched = {r["url"] for r in records if r["stage"] == "fetch"}
    over = {r["url"] for r in records if r["outcome"] in ("host-budget", "host-queue-full")}
    assert not fetched & over
    # the URL registry (2 partitions) says the same: each refused URL with the frontier's
    # reason, each fetched page with its status
    states = url_states(run.data_dir)
    for record in records:
        state = states.get(record["url"])
        if record["outcome"] in ("host-budget", "host-queue-full"):
            assert state is not None and (state["s"], state["outcome"], state["reason"]) == (
                "refused",
                record["outcome"],
                record["reason"],
            ), (record, state)
        elif record["stage"] == "fetch" and not record["url"].endswith("/robots.txt"):
            assert state is not None and state["s"] == "fetched", (record, state)
            assert state["status"] == record["status"]
