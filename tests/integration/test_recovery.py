"""Tables survive a worker's exit: a second run of the same crawl fetches nothing again.

Two ways back: the same data dir (RocksDB files on disk), and an empty data dir,
where Faust must rebuild every table from its changelog topic — which checks that
the changelog records Seine produces through librdkafka (streams/tables/produced.py) are
exactly what Faust's recovery reads.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from streams.demo.server import read_request_log, start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.broker import EmbeddedBroker
from tests.integration.conftest import run_crawl

SPEC = WebSpec(hosts=6, pages_per_host=12, seed=11)


@pytest.mark.parametrize("same_data_dir", [True, False], ids=["same-data-dir", "from-changelog"])
def test_second_run_fetches_nothing_again(
    broker: EmbeddedBroker, tmp_path: Path, same_data_dir: bool
) -> None:
    app_id = f"rec{uuid.uuid4().hex[:8]}"
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
        expected = server.web.reachable_allowed()
    first_requests = [r for r in read_request_log(first_log) if r["path"] != "/robots.txt"]
    assert len(first_requests) == len(expected)

    second_log = tmp_path / "second.jsonl"
    # the same web on a new port: the crawl state, not the server, must say "seen"
    with start_server_process(SPEC, second_log, tmp_path / "web2") as server:
        resolve = {host: addr for host, addr in server.resolve.items()}
        data_dir = tmp_path / ("data1" if same_data_dir else "data2")
        # seeds and links carry the first port: point those names at the new server
        old_port = next(iter(expected)).split(":")[2].split("/")[0]
        seeds = [s.replace(f":{server.port}", f":{old_port}") for s in server.seeds]
        resolve = {h: a.rsplit(":", 1)[0] + f":{server.port}" for h, a in resolve.items()}
        second = run_crawl(
            broker,
            data_dir,
            seeds,
            partitions=2,
            resolve=resolve,
            app_id=app_id,
        )
        assert second.returncode == 0, second.stderr[-3000:]
    again = [r for r in read_request_log(second_log) if r["path"] != "/robots.txt"]
    assert again == [], f"{len(again)} pages fetched again, e.g. {again[:3]}"
    assert "0 fetched" in second.stdout
