"""`seine status` and `seine replay`: the crawl-log topic read from outside a worker.

The crawl log has one record per fetch and per decision not to fetch, so it is
the crawl's history: `status` folds it into the same `CrawlTally` a worker keeps
(plus the consumer group's lag per stage from the broker), and `replay` picks
the URLs fetched in a time or offset range and feeds them to the frontier again.

Re-feeding: a replayed URL goes to the *frontier* topic (the partition of its
host), as a candidate marked ``via = "recrawl:replay"``. That skips url-seen,
which would drop it as already seen, and nothing else: the frontier queues it
behind the host's other URLs and fetches it under the same politeness rules
(one request in flight per host, delay, Crawl-delay, robots.txt checked at
dequeue). The fetched page then takes the usual path: a changed page is a new
capture in the page store, an unchanged one a WARC revisit record.

Reads use assign() with explicit offsets, not a consumer group: nothing is
committed, and several readers never disturb each other or the crawl.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import topology
from streams import codec
from streams.core.provenance import Via
from streams.core.stats import REPLAY_OUTCOMES, CrawlTally, duplicate_rate, recent_rate
from streams.kafka.patches.highwaters import true_highwaters
from streams.settings import Settings


class CrawlNotFound(RuntimeError):
    """No crawl-log topic for this app id on this broker."""


def _consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"seine-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


@dataclass
class LogRead:
    """What a read of the crawl log met: records, and how far it got."""

    records: int = 0
    partitions: int = 0
    complete: bool = True
    end_offsets: dict[int, int] = field(default_factory=dict)


def read_crawl_log(
    settings: Settings,
    *,
    since: float | None = None,
    from_offset: int | None = None,
    deadline_s: float = 60.0,
    read: LogRead | None = None,
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(partition, offset, record) of every crawl-log record from `since` (a unix
    time: the broker's time index finds the start, the record's own time filters)
    or `from_offset` (per partition) up to the end the log had when reading began."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    topic = topology.topic_name(settings.app_id, topology.CRAWL_LOG)
    consumer = _consumer(settings.kafka.bootstrap)
    read = read if read is not None else LogRead()
    try:
        metadata = consumer.list_topics(timeout=10)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise CrawlNotFound(f"topic {topic} not found on {settings.kafka.bootstrap}")
        partitions = sorted(info.partitions)
        read.partitions = len(partitions)
        ends: dict[int, int] = {}
        for p in partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        if settings.kafka.tansu_fixes:
            # Tansu lists a partition's end as its last record batch's start plus one:
            # reading up to that missed the rest of the last batch (`seine status`
            # counted 3 pages fetched of the 6 the worker had logged).
            listed = {(topic, p): end for p, end in ends.items()}
            ends = {
                p: end for (_t, p), end in true_highwaters(settings.kafka.bootstrap, listed).items()
            }
        read.end_offsets = dict(ends)
        starts = {p: OFFSET_BEGINNING for p in partitions}
        if from_offset is not None:
            starts = {p: from_offset for p in partitions}
        elif since is not None:
            try:
                found = consumer.offsets_for_times(
                    [TopicPartition(topic, p, int(since * 1000)) for p in partitions], timeout=10
                )
                starts = {
                    tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition]
                    for tp in found
                }
            except Exception:  # a broker without a time index: filter from the beginning
                starts = {p: OFFSET_BEGINNING for p in partitions}
        pending = {p for p in partitions if ends[p] > 0 and (starts[p] < 0 or starts[p] < ends[p])}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in partitions if p in pending])
        deadline = time.monotonic() + deadline_s
        while pending:
            if time.monotonic() > deadline:
                read.complete = False
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p = msg.partition()
            if msg.error() is not None:
                eof = msg.error().code() == KafkaError._PARTITION_EOF
                if eof and msg.offset() >= ends.get(p, 0):
                    pending.discard(p)
                continue
            if msg.offset() >= ends[p]:
                pending.discard(p)
                continue
            if msg.offset() + 1 >= ends[p]:
                pending.discard(p)
            try:
                record = codec.decode("crawl_log", msg.value())
            except codec.DecodeError:
                continue
            if since is not None and float(record["at"]) < since:
                continue
            read.records += 1
            yield p, msg.offset(), record
    finally:
        consumer.close()


def group_lag(settings: Settings) -> dict[str, int]:
    """Per stage: messages on the broker that the crawl's consumer group has not
    committed yet (log end offset − committed offset, summed over partitions)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.kafka.bootstrap})
    consumer = _consumer(settings.kafka.bootstrap)
    lag: dict[str, int] = {}
    try:
        metadata = consumer.list_topics(timeout=10)
        wanted: list[TopicPartition] = []
        stage_of: dict[str, str] = {}
        for spec in topology.TOPICS:
            if spec.name in (topology.CRAWL_LOG.name, topology.DEAD_LETTERS.name):
                continue
            name = topology.topic_name(settings.app_id, spec)
            info = metadata.topics.get(name)
            if info is None or info.error is not None:
                continue
            stage_of[name] = spec.name
            wanted.extend(TopicPartition(name, p) for p in info.partitions)
        if not wanted:
            return lag
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(settings.app_id, wanted)], request_timeout=10
        )
        committed = {}
        for future in futures.values():
            for tp in future.result(timeout=15).topic_partitions:
                committed[(tp.topic, tp.partition)] = tp.offset
        for tp in wanted:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            done = committed.get((tp.topic, tp.partition), -1)
            position = done if done >= 0 else low
            stage = stage_of[tp.topic]
            lag[stage] = lag.get(stage, 0) + max(0, high - position)
    finally:
        consumer.close()
    return lag


def dead_letter_count(settings: Settings) -> int:
    from confluent_kafka import TopicPartition

    consumer = _consumer(settings.kafka.bootstrap)
    try:
        name = topology.topic_name(settings.app_id, topology.DEAD_LETTERS)
        info = consumer.list_topics(timeout=10).topics.get(name)
        if info is None or info.error is not None:
            return 0
        lows: dict[tuple[str, int], int] = {}
        highs: dict[tuple[str, int], int] = {}
        for p in info.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
            lows[(name, p)], highs[(name, p)] = low, high
        if settings.kafka.tansu_fixes:
            # Tansu lists a partition's end short of its last batch's later records
            highs = true_highwaters(settings.kafka.bootstrap, highs)
        return sum(highs[tp] - lows[tp] for tp in highs)
    finally:
        consumer.close()


def _clock(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "-"


def status_report(
    settings: Settings,
    tally: CrawlTally,
    read: LogRead,
    lag: dict[str, int],
    dead: int,
    *,
    source: str = "",
) -> str:
    """The text `seine status` prints; `source` names the data dir whose kept crawl
    log was read (else the crawl's topics were)."""
    now = time.time()
    o = tally.outcomes
    where = f"in {source}" if source else f"on {settings.kafka.bootstrap}"
    lines = [f"crawl {settings.app_id!r} {where}"]
    if not tally.records:
        lines.append("crawl log: empty (nothing fetched yet)")
    else:
        partial = "" if read.complete else " (partial: the read hit its deadline)"
        parts = f"{read.partitions} files" if source else f"{read.partitions} partitions"
        lines.append(
            f"crawl log: {tally.records} records over {parts}, "
            f"{_clock(tally.first_at)} → {_clock(tally.last_at)}{partial}"
        )
    series = tally.pages.series(now, 60)
    last_at = tally.last_at or 0.0
    lines.append(
        f"fetched: {tally.fetched} pages, {tally.bytes / 1e6:.1f} MB; "
        f"{recent_rate(series, 60):.1f} pages/s over the last minute; "
        f"duplicates {100 * duplicate_rate(o):.1f}%"
        + (f"; last record {now - last_at:.0f} s ago" if last_at else "")
    )
    if tally.statuses:
        lines.append("by status: " + ", ".join(f"{k} {v}" for k, v in tally.statuses.most_common()))
    if o:
        lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in o.most_common()))
    errors = sum(tally.errors.values())
    lines.append(f"errors: {errors}")
    for reason, n in tally.errors.most_common(5):
        lines.append(f"  {n:>8}  {reason}")
    refusals = [(r, n) for r, n in tally.reasons.most_common() if r not in tally.errors]
    if refusals:
        lines.append("not stored, and why:")
        for reason, n in refusals[:5]:
            lines.append(f"  {n:>8}  {reason}")
    if tally.hosts:
        lines.append("most fetched hosts:")
        for host, n in tally.hosts.most_common(5):
            lines.append(f"  {n:>8}  {host}")
    if lag:
        lines.append(
            f"consumer lag (group {settings.app_id!r}, uncommitted): "
            + ", ".join(f"{k} {v}" for k, v in sorted(lag.items()))
            + f"; total {sum(lag.values())}"
        )
    elif not source:  # a kept crawl log has no broker to ask
        lines.append("consumer lag: no committed offsets found")
    lines.append(f"dead letters: {dead}")
    return "\n".join(lines)


@dataclass
class ReplayPlan:
    """URLs to re-feed, and why the others were left out."""

    urls: dict[str, dict[str, Any]] = field(default_factory=dict)
    too_recent: int = 0
    skipped_outcome: int = 0


def plan_replay(
    records: Iterator[tuple[int, int, dict[str, Any]]],
    *,
    outcomes: tuple[str, ...] = REPLAY_OUTCOMES,
    min_age: float = 0.0,
    until: float | None = None,
    now: float | None = None,
) -> ReplayPlan:
    """Each URL once (its latest fetch), leaving out URLs fetched less than `min_age`
    seconds ago (the revisit schedule: a page is not fetched again sooner)."""
    now = time.time() if now is None else now
    plan = ReplayPlan()
    latest: dict[str, dict[str, Any]] = {}
    for _p, _offset, record in records:
        if record.get("stage") != "fetch":
            continue
        if until is not None and float(record["at"]) > until:
            continue
        if record.get("outcome") not in outcomes:
            plan.skipped_outcome += 1
            continue
        url = record["url"]
        previous = latest.get(url)
        if previous is None or float(record["at"]) >= float(previous["at"]):
            latest[url] = record
    for url, record in latest.items():
        if min_age and now - float(record["at"]) < min_age:
            plan.too_recent += 1
            continue
        plan.urls[url] = record
    return plan


def refeed(settings: Settings, urls: dict[str, dict[str, Any]]) -> int:
    """Send URLs to the frontier topic, one frontier event per partition per batch."""
    from confluent_kafka import Producer

    topic = topology.topic_name(settings.app_id, topology.FRONTIER)
    producer = Producer({"bootstrap.servers": settings.kafka.bootstrap})
    metadata = producer.list_topics(timeout=10)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise CrawlNotFound(f"topic {topic} not found on {settings.kafka.bootstrap}")
    count = len(info.partitions)
    by_partition: dict[int, list[dict[str, Any]]] = {}
    for url, record in urls.items():
        partition = topology.url_partition(url, count)
        by_partition.setdefault(partition, []).append(
            {"url": url, "depth": int(record.get("depth", 0)), "priority": 0, "via": Via.REPLAY}
        )
    sent = 0
    for partition, candidates in sorted(by_partition.items()):
        for i in range(0, len(candidates), 500):
            chunk = candidates[i : i + 500]
            event = {"new_urls": chunk, "completions": [], "tick": False}
            producer.produce(topic, codec.encode("frontier_event", event), partition=partition)
            sent += len(chunk)
        producer.poll(0)
    if producer.flush(30):
        raise RuntimeError("replay: the broker did not take every message within 30 s")
    return sent


def parse_since(text: str, now: float | None = None) -> float:
    """A point in time: unix seconds, ISO-8601 (UTC unless it says otherwise), or an
    age like ``90s``, ``15m``, ``2h``, ``1d`` (that long ago)."""
    from datetime import UTC, datetime

    now = time.time() if now is None else now
    value = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value and value[-1] in units:
        try:
            return now - float(value[:-1]) * units[value[-1]]
        except ValueError:
            pass
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give unix seconds, an ISO-8601 time or an age like 15m"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
