"""Shared fixtures: one embedded broker per test session, crawls as real subprocesses."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streams.kafka.broker import EmbeddedBroker

REPO = Path(__file__).resolve().parents[2]


def broker_kind() -> str:
    """The broker the integration tests run on (pytest --broker): tansu or kafka."""
    return os.environ.get("SEINE_TEST_BROKER", "tansu")


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One broker per test session (per xdist process): Tansu, or a one-node Apache
    Kafka with `--broker kafka`. Both offer `.bootstrap` and `.pids`."""
    if broker_kind() == "kafka":
        from streams.kafka.local import KafkaCluster

        with KafkaCluster(tmp_path_factory.mktemp("kafka"), 1) as cluster:
            yield cluster  # type: ignore[misc]
        return
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


@dataclass
class CrawlRun:
    returncode: int
    stdout: str
    stderr: str
    data_dir: Path
    app_id: str
    seconds: float


def crawl_env(app_id: str, **extra: str) -> dict[str, str]:
    """Environment for a `seine` subprocess on the shared broker: fast group joins, and
    one worker unless the test asks for more (`--workers N`, or SEINE_WORKERS in
    `extra`). The default, a worker per core, is what test_default_workers.py and
    the tests of several workers run; the others test the stages, not how many
    processes run them."""
    env = dict(os.environ)
    env["SEINE_WORKERS"] = "1"
    if broker_kind() == "kafka":
        env.update(
            {
                "SEINE_APP_ID": app_id,
                # Apache Kafka refuses session timeouts under its
                # group.min.session.timeout.ms (6 s by default).
                "SEINE_SESSION_TIMEOUT": "6",
                "SEINE_REBALANCE_TIMEOUT": "6",
                "SEINE_HEARTBEAT_INTERVAL": "1",
                # `seine crawl` without --bootstrap starts a one-node Kafka too
                "SEINE_BROKER": "kafka",
                "SEINE_LOG_LEVEL": "error",
            }
        )
        env.update(extra)
        return env
    env.update(
        {
            "SEINE_APP_ID": app_id,
            "SEINE_SESSION_TIMEOUT": "4",
            "SEINE_REBALANCE_TIMEOUT": "2",
            "SEINE_HEARTBEAT_INTERVAL": "1",
            "SEINE_FETCH_MAX_WAIT_MS": "20",
            # The session broker is Tansu, whose highwaters lag offsets it has served:
            # with Faust's check on, workers taking over a partition crashed with
            # ConsistencyError (what `seine crawl` turns off with its embedded broker).
            "SEINE_RECOVERY_CONSISTENCY_CHECK": "false",
            "SEINE_LOG_LEVEL": "error",
        }
    )
    env.update(extra)
    return env


def run_seine(
    args: list[str], *, env: dict[str, str], timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


def run_crawl(
    broker: EmbeddedBroker,
    data_dir: Path,
    seeds: list[str],
    *,
    partitions: int,
    resolve: dict[str, str],
    extra_args: list[str] | None = None,
    app_id: str | None = None,
    timeout: float = 240.0,
    **env_extra: str,
) -> CrawlRun:
    """Run `seine crawl` to its end against the session broker with a fresh app id."""
    app_id = app_id or f"t{uuid.uuid4().hex[:10]}"
    seeds_file = data_dir.parent / f"{app_id}-seeds.txt"
    seeds_file.write_text("\n".join(seeds) + "\n", encoding="utf-8")
    args = [
        "crawl",
        "--seeds-file",
        str(seeds_file),
        "--bootstrap",
        broker.bootstrap,
        "--data-dir",
        str(data_dir),
        "--partitions",
        str(partitions),
        "--allow-private",
    ]  # no --until-idle: a crawl ends by itself when it is done, as a user runs it
    for host, addr in resolve.items():
        args += ["--resolve", f"{host}={addr}"]
    args += extra_args or []
    started = time.monotonic()
    done = run_seine(args, env=crawl_env(app_id, **env_extra), timeout=timeout)
    return CrawlRun(
        done.returncode,
        done.stdout,
        done.stderr,
        data_dir,
        app_id,
        time.monotonic() - started,
    )


def read_topic(bootstrap: str, topic: str, want: int, deadline_s: float = 20.0) -> list[Any]:
    """Read a topic from the beginning with assign() (group consumers are unreliable on
    the embedded broker) until `want` messages arrived or the deadline passed."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
    out: list[Any] = []
    deadline = time.monotonic() + deadline_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout`."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_to_end(bootstrap: str, topic: str, deadline_s: float = 20.0) -> list[Any]:
    """Every message of a topic: read until each partition reaches its high watermark.

    The crawl has exited, so the topic no longer grows: this waits for a condition
    (all offsets reached), with a deadline, not for a fixed time.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from streams.kafka.patches.highwaters import true_highwaters

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    out: list[Any] = []
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        listed = {
            (topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
        # Tansu lists a partition's end as its last record batch's start plus one
        # (streams/kafka/patches/highwaters.py): reading up to that misses the rest of that batch
        ends = {p: end for (_t, p), end in true_highwaters(bootstrap, listed).items()}
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + deadline_s
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            out.append(msg)
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None and offset + 1 >= ends[partition]:
                todo.discard(partition)
        assert not todo, f"{topic}: partitions {sorted(todo)} not read to their end"
    finally:
        consumer.close()
    return out


def read_crawl_log(bootstrap: str, app_id: str) -> list[dict[str, Any]]:
    """Every crawl-log record of a finished crawl, decoded."""
    import topology
    from streams import codec

    messages = read_to_end(bootstrap, topology.topic_name(app_id, topology.CRAWL_LOG))
    return [codec.decode("crawl_log", m.value()) for m in messages]


def captures(data: Path, *, responses_only: bool = False) -> Counter[str]:
    """Records per URL in every page store under a data dir (CDXJ: one line each),
    or only its response records (a refetch or an exact copy is a revisit record)."""
    from streams.store.storeset import open_stores

    with open_stores(data) as stores:
        out = io.StringIO()
        stores.export_cdxj(out)
    urls: Counter[str] = Counter()
    for line in out.getvalue().splitlines():
        fields = json.loads(line.split(" ", 2)[2])
        if not (responses_only and fields.get("mime") == "warc/revisit"):
            urls[fields["url"]] += 1
    return urls


def workers_crawl_args(server: Any, data: Path, delay: str) -> list[str]:
    """`seine crawl --workers 2` over a demo server's web, as a user runs it."""
    args = [sys.executable, "-m", "streams.cli", "crawl", *server.seeds, "--workers", "2"]
    args += ["--data-dir", str(data), "--allow-private", "--delay", delay]
    for host, addr in server.resolve.items():
        args += ["--resolve", f"{host}={addr}"]
    return args
