"""Poison input on every topic: bytes that are not the schema, an oversized
message, and a URL of 100 KB each end in dead-letters with a reason — and the agents
carry on: the crawl that runs over the poisoned topics stores every reachable page.

One crawl runs over topics poisoned beforehand (module fixture, real broker); the
test is parametrized over every topic of topology/ and checks that topic's letters.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
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
from topology import TopicSpec

PARTITIONS = 2
POISON_PARTITION = 1
LIMITS = Settings()
#: Over max_message_bytes (8 MiB), under the broker's and producer's 16 MiB.
OVERSIZED = LIMITS.kafka.max_message_bytes + 512 * 1024
LONG_URL = "http://poison.invalid/" + "a" * 100_000
GARBAGE = b"\xff\xfe\x00 not avro, not a URL \x9c"


def _page(url: str, body: bytes = b"<html>x</html>") -> dict[str, Any]:
    return {
        "url": url,
        "status": 200,
        "headers": [{"name": "Content-Type", "value": "text/html"}],
        "body": body,
        "fetched_at": 1.0,
        "elapsed_ms": 1.0,
        "ip": None,
        "depth": 0,
        "truncated": False,
    }


def _parsed(url: str, body: bytes = b"<html>x</html>") -> dict[str, Any]:
    return {
        "pages": [
            {
                "page": _page(url, body),
                "fingerprint": "f" * 32,
                "title": "",
                "links": [],
                "base": None,
                "nofollow": False,
                "noindex": False,
                "duplicate_of": None,
            }
        ]
    }


def _candidate(url: str, via: str | None = None) -> dict[str, Any]:
    return {"url": url, "depth": 0, "priority": 0, "via": via}


#: A valid record of each schema with its URL set to `url` and `pad` bytes of padding
#: in a field no check reads (to build an oversized but well-formed message).
RECORDS: dict[str, Callable[[str, int], dict[str, Any]]] = {
    "seed": lambda url, pad: {"url": url, "priority": 0},
    "url_batch": lambda url, pad: {"urls": [_candidate(url, "x" * pad)]},
    "frontier_event": lambda url, pad: {
        "new_urls": [_candidate(url, "x" * pad)],
        "completions": [],
        "tick": False,
    },
    "fetch_batch": lambda url, pad: {
        "requests": [
            {
                "url": url,
                "host": "poison.invalid",
                "kind": "page" + " " * pad,
                "depth": 0,
                "dispatched_at": 1.0,
            }
        ]
    },
    "page_batch": lambda url, pad: {"pages": [_page(url, b"x" * pad)]},
    "parsed_batch": lambda url, pad: _parsed(url, b"x" * pad),
    "crawl_log": lambda url, pad: {
        "url": url,
        "host": "poison.invalid",
        "stage": "x" * pad,
        "outcome": "fetched",
        "status": 200,
        "reason": "",
        "bytes": 0,
        "elapsed_ms": 0.0,
        "depth": 0,
        "at": 0.0,
    },
    "anchor_batch": lambda url, pad: {
        "anchors": [{"url": url, "text": "x" * pad, "site": "poison.invalid"}]
    },
    "document": lambda url, pad: {
        "url": url,
        "canonical": url,
        "status": 200,
        "fetched_at": 1.0,
        "text": "x" * pad,
        "digest": "sha1:X",
        "size": pad,
        "site": "poison.invalid",
    },
    "dead_letter": lambda url, pad: {
        "stage": url,
        "topic": "t",
        "partition": 0,
        "offset": 0,
        "key": None,
        "value": b"x" * pad,
        "error": "",
        "at": 0.0,
    },
}


def poisons(spec: TopicSpec) -> dict[str, bytes]:
    """The three poisons for one topic, as the bytes to produce."""
    if spec is topology.SEEDS:
        # Seeds are text, JSON or Avro: the poisons in the forms people would send.
        return {
            "garbage": GARBAGE,
            "oversized": b"http://poison.invalid/" + b"a" * OVERSIZED,
            "long-url": LONG_URL.encode(),
        }
    build = RECORDS[spec.schema]
    oversized = codec.encode(spec.schema, build("http://poison.invalid/", OVERSIZED))
    assert len(oversized) > LIMITS.kafka.max_message_bytes
    return {
        "garbage": GARBAGE,
        "oversized": oversized,
        "long-url": codec.encode(spec.schema, build(LONG_URL, 0)),
    }


#: What the reason of each poison's letter must say.
REASONS = {
    "garbage": ("Avro", "neither UTF-8", "not a valid", "seed"),
    "oversized": ("over the", "bytes is over"),
    "long-url": ("over the 8192-byte limit", "is over 16384", "bytes is over"),
}

CONSUMED = {stage.source.name: stage.name for stage in topology.STAGES}


@dataclass
class PoisonedCrawl:
    app_id: str
    sent: dict[tuple[str, str], int]  # (topic, poison) → offset
    letters: list[dict[str, Any]]
    stored: set[str]
    expected: set[str]


@pytest.fixture(scope="module")
def poisoned(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> PoisonedCrawl:
    tmp = tmp_path_factory.mktemp("poison")
    app_id = f"poison{uuid.uuid4().hex[:8]}"
    ensure_topics(Settings.of(app_id=app_id, bootstrap=broker.bootstrap, partitions=PARTITIONS))
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "message.max.bytes": 16 * 1024 * 1024}
    )
    sent: dict[tuple[str, str], int] = {}

    def delivered(key: tuple[str, str]) -> Callable[[Any, Any], None]:
        def on_delivery(error: Any, message: Any) -> None:
            assert error is None, (key, error)
            sent[key] = message.offset()

        return on_delivery

    for spec in topology.TOPICS:
        partition = POISON_PARTITION if spec.scaled else 0
        for kind, payload in poisons(spec).items():
            producer.produce(
                topology.topic_name(app_id, spec),
                payload,
                partition=partition,
                on_delivery=delivered((spec.name, kind)),
            )
    assert producer.flush(30) == 0
    assert len(sent) == 3 * len(topology.TOPICS)

    web = WebSpec(hosts=4, pages_per_host=8, seed=5)
    with start_server_process(web, None, tmp / "web") as server:
        run = run_crawl(
            broker,
            tmp / "data",
            server.seeds,
            partitions=PARTITIONS,
            resolve=server.resolve,
            app_id=app_id,
            timeout=180,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        expected = set(server.web.reachable_allowed())
    with PageStore(run.data_dir / "pages", read_only=True) as store:
        stored = set(store.urls())
    # one letter per poison on a consumed topic, plus the dead-letters topic's own three
    want = 3 * len(CONSUMED) + 3
    messages = read_topic(
        broker.bootstrap, topology.topic_name(app_id, topology.DEAD_LETTERS), want, 30.0
    )
    letters = []
    for message in messages:
        try:
            letters.append(codec.decode("dead_letter", message.value()))
        except codec.DecodeError:
            letters.append({"poison": message.value()})  # one of the three we put there
    return PoisonedCrawl(app_id, sent, letters, stored, expected)


def test_the_crawl_carried_on(poisoned: PoisonedCrawl) -> None:
    assert poisoned.stored == poisoned.expected
    assert not any(url.startswith("http://poison.invalid") for url in poisoned.stored)


@pytest.mark.parametrize("spec", topology.TOPICS, ids=[s.name for s in topology.TOPICS])
def test_poison_ends_in_dead_letters_with_a_reason(
    poisoned: PoisonedCrawl, spec: TopicSpec
) -> None:
    topic = topology.topic_name(poisoned.app_id, spec)
    mine = [x for x in poisoned.letters if x.get("topic") == topic]
    if spec.name not in CONSUMED:
        # No agent reads crawl-log or dead-letters, so nothing there can stall a stage;
        # the poison simply stays where it was put.
        assert not mine, mine
        return
    stage = CONSUMED[spec.name]
    by_offset = {x["offset"]: x for x in mine}
    assert len(mine) == 3, [(x["offset"], x["error"][:120]) for x in mine]
    for kind in ("garbage", "oversized", "long-url"):
        letter = by_offset.get(poisoned.sent[(spec.name, kind)])
        assert letter is not None, (kind, sorted(by_offset))
        assert letter["partition"] == POISON_PARTITION
        assert letter["stage"] in (stage, "url-filter"), letter["stage"]
        assert any(word in letter["error"] for word in REASONS[kind]), (kind, letter["error"])
        assert letter["value"], "the refused message (or its refused part) is kept"
    long_url = by_offset[poisoned.sent[(spec.name, "long-url")]]
    if spec is not topology.SEEDS:
        # the refused item is kept as a replayable record of the topic's schema
        assert LONG_URL in repr(codec.decode(spec.schema, long_url["value"]))
