"""Bad input loses nothing: invalid seeds and malformed stage messages end in dead-letters
with a reason, and the crawl carries on."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer

import topology
from streams import codec
from streams.demo.server import start_server_process
from streams.demo.webgen import WebSpec
from streams.kafka.admin import ensure_topics
from streams.kafka.broker import EmbeddedBroker
from streams.settings import Settings
from streams.store.pagestore import PageStore
from tests.integration.conftest import read_topic, run_crawl

GARBAGE = {
    topology.URL_SEEN: b"\xff\xfe not avro at all",
    topology.FRONTIER: b"\x02\x10http",  # a truncated record
    topology.PARSE: b"",
}
BAD_SEEDS = ["not a url", "javascript:alert(1)", "ftp://files.example/x", '{"url": 42}']


def test_invalid_seeds_and_malformed_messages_go_to_dead_letters(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    app_id = f"dl{uuid.uuid4().hex[:8]}"
    partitions = 2
    settings = Settings.of(app_id=app_id, bootstrap=broker.bootstrap, partitions=partitions)
    ensure_topics(settings)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for topic, payload in GARBAGE.items():
        producer.produce(topology.topic_name(app_id, topic), payload, partition=1)
    # sent to the seeds topic as any producer would (`seine crawl` refuses them up front)
    for seed in BAD_SEEDS:
        producer.produce(topology.topic_name(app_id, topology.SEEDS), seed.encode(), partition=1)
    assert producer.flush(10) == 0

    spec = WebSpec(hosts=4, pages_per_host=8, seed=3)
    with start_server_process(spec, None, tmp_path / "web") as server:
        run = run_crawl(
            broker,
            tmp_path / "data",
            server.seeds,
            partitions=partitions,
            resolve=server.resolve,
            app_id=app_id,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        expected = server.web.reachable_allowed()

    # the crawl went on: every reachable page is stored
    with PageStore(run.data_dir / "pages", read_only=True) as store:
        assert set(store.urls()) == expected

    want = len(GARBAGE) + len(BAD_SEEDS)
    messages = read_topic(
        broker.bootstrap, topology.topic_name(app_id, topology.DEAD_LETTERS), want
    )
    letters = [codec.decode("dead_letter", m.value()) for m in messages]
    assert len(letters) == want, letters
    by_stage: dict[str, list[dict]] = {}
    for letter in letters:
        assert letter["error"], letter
        by_stage.setdefault(letter["stage"], []).append(letter)
    assert sorted(by_stage) == sorted(["seeds", "url-seen", "frontier", "parse"])
    assert len(by_stage["seeds"]) == len(BAD_SEEDS)
    kept = {letter["value"] for letter in by_stage["seeds"]}
    assert kept == {s.encode() for s in BAD_SEEDS}, "the bad seed is kept verbatim"
    assert any("not an absolute URL" in x["error"] for x in by_stage["seeds"])
    assert any("not a valid http(s) URL" in x["error"] for x in by_stage["seeds"])
    for spec_, payload in GARBAGE.items():
        letter = by_stage[spec_.name][0]
        assert letter["value"] == payload
        assert letter["topic"] == topology.topic_name(app_id, spec_)
        assert letter["partition"] == 1
        assert "Avro" in letter["error"] or "bytes" in letter["error"], letter["error"]
