"""A table recovery that lost a changelog partition's records mid-way reads them again
(streams/kafka/patches/recovery_kick.py).

A crawl runs once; the same crawl then starts again on an empty data dir, so Faust
rebuilds every table from its changelog. A test-only sitecustomize swallows the first
fetch response of one `seen` changelog partition after the recovery sought it, with
aiokafka's position moved past it: what faust-streaming's `Consumer.getmany` does to
records handed over while the flow is stopped. Faust's recovery alone then waits for
them for ever (with SEINE_RECOVERY_KICK_AFTER=0 the second run times out); with the
watchdog the partition is read again, the table is whole and nothing is fetched twice.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from tests.integration.conftest import run_crawl

SPEC = WebSpec(hosts=4, pages_per_host=8, seed=23)
INJECT = Path(__file__).parent / "faultinject"


def test_a_recovery_that_lost_records_reads_them_again(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    app_id = f"kick{uuid.uuid4().hex[:8]}"
    first_log = tmp_path / "first.jsonl"
    with start_server_process(SPEC, first_log, tmp_path / "web1") as server:
        first = run_crawl(
            broker,
            tmp_path / "data1",
            server.seeds,
            partitions=2,
            resolve=server.resolve,
            app_id=app_id,
        )
        assert first.returncode == 0, first.stderr[-3000:]
        seeds, resolve = server.seeds, server.resolve
    assert read_request_log(first_log), "the first run fetched nothing"

    second_log = tmp_path / "second.jsonl"
    with start_server_process(SPEC, second_log, tmp_path / "web2") as server:
        # seeds and links carry the first port: point those names at the new server
        resolve = {h: a.rsplit(":", 1)[0] + f":{server.port}" for h, a in resolve.items()}
        second = run_crawl(
            broker,
            tmp_path / "data2",  # empty: every table is rebuilt from its changelog
            seeds,
            partitions=2,
            resolve=resolve,
            app_id=app_id,
            extra_args=["--log-level", "warning"],
            timeout=120,
            SEINE_TEST_DROP_RECOVERY=f"{app_id}-seen-changelog:0",
            PYTHONPATH=os.pathsep.join(filter(None, [str(INJECT), os.environ.get("PYTHONPATH")])),
        )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "faultinject: dropped records 0.." in second.stderr, second.stderr[-3000:]
    assert f"{app_id}-seen-changelog[0] for 10.0s" in second.stderr, second.stderr[-3000:]
    assert "reading it again from offset 0" in second.stderr
    again = [r for r in read_request_log(second_log) if r["path"] != "/robots.txt"]
    assert again == [], f"{len(again)} pages fetched again, e.g. {again[:3]}"
