"""A fetch that passes over a record is re-done at once (streams/kafka/patches/refetch.py,
`refetch_skipped`).

A test-only sitecustomize makes aiokafka's fetcher skip one link-extract record
(the fault seen in multi-worker crawls on the embedded broker), with the
stuck-partition rewind off: without the refetch the crawl can never go idle, since
that record's page is never stored.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from streams.store.storeset import open_stores
from tests.integration.conftest import broker_kind, run_crawl

SPEC = WebSpec(hosts=3, pages_per_host=10, seed=5)
INJECT = Path(__file__).parent / "faultinject"

pytestmark = pytest.mark.skipif(
    broker_kind() == "kafka",
    reason="a Tansu workaround (Settings.kafka.tansu_fixes), off on Apache Kafka",
)


def test_a_skipped_record_is_fetched_again_at_once(broker: EmbeddedBroker, tmp_path: Path) -> None:
    server = start_server_process(SPEC, tmp_path / "requests.jsonl", tmp_path / "web")
    try:
        app_id = "trefetch" + os.urandom(3).hex()
        run = run_crawl(
            broker,
            tmp_path / "data",
            server.seeds,
            partitions=1,
            resolve=server.resolve,
            app_id=app_id,
            extra_args=["--log-level", "warning"],
            timeout=90,
            SEINE_TEST_SKIP_RECORD=f"{app_id}.link-extract:0:2",
            SEINE_STUCK_REWIND_AFTER="0",
            PYTHONPATH=os.pathsep.join(filter(None, [str(INJECT), os.environ.get("PYTHONPATH")])),
        )
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr[-3000:]
    with open_stores(run.data_dir) as store:
        assert set(store.urls()) == server.web.reachable_allowed()
    assert (
        f"offsets 2..2 of {app_id}.link-extract[0] were skipped by the fetch: reading them again"
    ) in run.stderr
    assert "the commit waits for them" not in run.stderr  # nothing left to the held commit
