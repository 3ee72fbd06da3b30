"""`seine seed` pushes seeds to a running crawl's topic, on the partition of each host."""

from __future__ import annotations

import json
import uuid

import topology
from streams.kafka.admin import ensure_topics
from streams.kafka.broker import EmbeddedBroker
from streams.settings import Settings
from tests.integration.conftest import crawl_env, read_topic, run_seine


def test_seed_pushes_json_seeds_to_the_host_partition(broker: EmbeddedBroker) -> None:
    app_id = f"seed{uuid.uuid4().hex[:8]}"
    ensure_topics(Settings.of(app_id=app_id, bootstrap=broker.bootstrap, partitions=4))
    urls = [f"http://site-{i}.example/" for i in range(6)]
    done = run_seine(
        ["seed", *urls, "--bootstrap", broker.bootstrap, "--priority", "3"], env=crawl_env(app_id)
    )
    assert done.returncode == 0, done.stderr
    messages = read_topic(broker.bootstrap, topology.topic_name(app_id, topology.SEEDS), len(urls))
    got = {json.loads(m.value())["url"]: (m.partition(), json.loads(m.value())) for m in messages}
    assert sorted(got) == sorted(urls)
    for url, (partition, payload) in got.items():
        assert partition == topology.url_partition(url, 4)
        assert payload["priority"] == 3


def test_seed_without_a_running_crawl_says_so(broker: EmbeddedBroker) -> None:
    done = run_seine(
        ["seed", "http://a.example/", "--bootstrap", broker.bootstrap],
        env=crawl_env(f"none{uuid.uuid4().hex[:8]}"),
    )
    assert done.returncode == 1
    assert "is a crawl running?" in done.stderr
