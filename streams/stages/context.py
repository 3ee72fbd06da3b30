"""What every stage shares: topics, the outbox that batches sends, counters, dead letters.

A stage handler is a short function over one decoded message; the `Outbox` turns
what it emits into one message per (topic, partition), because consuming a
message costs ~0.2 ms in Faust here whatever its size. The counters record every
message sent and every message fully handled, per topic; when they balance and
the frontier has nothing queued or in flight, the crawl is idle (`--until-idle`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust

import topology
from streams import codec
from streams.core.doccache import DocumentCache
from streams.core.handoff import HandoffCache
from streams.core.partitioning import partition_for
from streams.core.poison import Limits
from streams.core.records import FrontierEvent
from streams.core.stall import offsets_handled
from streams.core.stats import CrawlTally, HostCycle
from streams.core.urls import host_of
from streams.kafka.producer import Deliveries, StageProducer
from streams.settings import Settings
from streams.store.journal import CRAWL_LOG_FILE, DEAD_LETTERS_FILE, Journal
from topology import TopicSpec

log = logging.getLogger("seine")

#: How a batch schema wraps its items.
BATCH_FIELD = {
    "url_batch": "urls",
    "fetch_batch": "requests",
    "page_batch": "pages",
    "parsed_batch": "pages",
    "anchor_batch": "anchors",
}
#: Batch schemas whose items carry a page body: only these are split by size.
SIZED_SCHEMAS = frozenset({"page_batch", "parsed_batch"})
#: Topics no stage consumes (they are outputs for people and tools).
UNCONSUMED_TOPICS = frozenset({topology.CRAWL_LOG.name, topology.DEAD_LETTERS.name})
#: Split a batch before it grows past this many encoded bytes (Kafka's default cap is 1 MB).
MAX_BATCH_BYTES = 768 * 1024
#: The most of a refused message a dead letter keeps: the producer's cap is 16 MiB.
DEAD_LETTER_VALUE_MAX = 15 * 1024 * 1024


@dataclass
class Counters:
    """Messages sent and handled per topic, and outcomes, for idle detection and progress."""

    sent: Counter[str] = field(default_factory=Counter)
    done: Counter[str] = field(default_factory=Counter)
    #: `sent` as it was when the last offset commit's flush began: each of those
    #: messages is acknowledged. A killed worker's successor counts by this, not
    #: `sent`, which may count messages the kill lost before they left (a parent
    #: summing those waited for them for ever: `multiworker.ghost_of`).
    sent_committed: dict[str, int] = field(default_factory=dict)
    #: `done` as it was then: a killed worker's successor handles again what came
    #: after its last commit, and any output of those the kill lost with it.
    done_committed: dict[str, int] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    fetch_in_flight: int = 0
    #: Fetch completions this worker's frontier applied at the fetch's end, without
    #: their message (topology.LOCAL_PATHS).
    completions_at_fetch_end: int = 0
    pages_stored: int = 0
    bytes_fetched: int = 0
    dead_letters: int = 0
    #: Partitions read again because their consumer stood still short of the end
    #: (streams/core/stall.py): each is a message that would otherwise never come.
    rewinds: int = 0
    started_at: float = field(default_factory=time.time)
    #: Topics no stage of this crawl consumes: UNCONSUMED_TOPICS, and documents when
    #: the indexer is off.
    unconsumed: frozenset[str] = UNCONSUMED_TOPICS
    #: Documents sent, and deletions (tombstones) among them.
    documents: int = 0
    deletions: int = 0
    #: Per consumed topic: smoothed milliseconds from produce to handling.
    latency_ms: dict[str, float] = field(default_factory=dict)
    #: A host's time from a dispatch to its completion at the frontier, in parts.
    host_cycle: HostCycle = field(default_factory=HostCycle)
    #: This worker's crawl-log records, folded (dashboard, /metrics).
    tally: CrawlTally = field(default_factory=CrawlTally)
    #: Dead letters per stage.
    stage_errors: Counter[str] = field(default_factory=Counter)
    #: Per stage: CPU seconds of the event-loop thread spent decoding, handling and
    #: flushing its messages (the per-stage breakdown of BENCHMARKS.md), and the items
    #: (URLs, requests, pages) its messages carried.
    stage_cpu: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    stage_items: Counter[str] = field(default_factory=Counter)
    #: (topic, partition) -> offset after the last message this worker has handled
    #: there (`caught_up`).
    handled_upto: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Wall-clock time this worker last handled a message: the crawl's work ends at
    #: the latest of these over the workers (its "idle from", printed at info level).
    last_handled_at: float = 0.0

    def observe_latency(self, topic: str, ms: float) -> None:
        previous = self.latency_ms.get(topic)
        self.latency_ms[topic] = ms if previous is None else previous * 0.95 + ms * 0.05

    def balanced(self) -> bool:
        """Every message sent to a consumed topic has been handled."""
        return all(
            self.done[name] >= count
            for name, count in self.sent.items()
            if name not in self.unconsumed
        )

    def handled(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        self.last_handled_at = time.time()
        if offset >= self.handled_upto.get(key, 0):
            self.handled_upto[key] = offset + 1

    def caught_up(self, delivered_upto: dict[tuple[str, int], int]) -> bool:
        """Every message this worker delivered to a consumed topic has been handled.

        Why besides `balanced`: `done` counts every message handled, also those this
        worker did not send (poison, a resumed crawl's re-queued URLs, messages read
        twice after a rebalance or a rewind), and each such one let the counts balance
        while a message of ours was still unhandled: an `--until-idle` crawl then
        stopped early (under load, with 0 pages fetched). A partition is read in order,
        so handling past the offset a message landed at means it was handled. Counts
        still matter: a message the consumer skipped leaves them short.
        """
        return offsets_handled(delivered_upto, self.handled_upto)


class Outbox:
    """Collects a stage's output per (topic, partition) and sends each group as one batch.

    `frontier_after_delivery`: send the frontier events only once everything else of
    the flush is acknowledged by the broker. The fetch stage sets it: its input is
    acknowledged when a fetch starts, not when its results are sent, so a fetch's
    page (to parse) and its completion (to the frontier) are the only record of it;
    a worker killed between the two deliveries would leave the frontier holding the
    URL as fetched and the page nowhere. With the completion last, a kill loses at
    most the completion, and the frontier's lease re-dispatches the fetch.
    """

    def __init__(self, ctx: StageContext, *, frontier_after_delivery: bool = False) -> None:
        self.ctx = ctx
        self.frontier_after_delivery = frontier_after_delivery
        self._items: dict[tuple[str, int], list[Any]] = {}
        self._frontier: dict[int, dict[str, list[Any]]] = {}
        self._logs: list[tuple[int, dict[str, Any]]] = []
        #: Keyed records of compacted topics: (topic, partition, key, value or None).
        self._records: list[tuple[TopicSpec, int, bytes, bytes | None]] = []
        #: Frontier events of a flush waiting for the rest of it to be acknowledged.
        self._held = 0
        #: Offered each frontier event when it is due to be sent (after the rest of the
        #: flush is acknowledged): True means it was applied here, and is not sent. The
        #: fetch stage's: this worker's frontier applies its completions at once, see
        #: `CrawlLoop.complete_at_fetch_end` (streams/runtime/crawl_loop.py).
        self.apply_frontier: Callable[[int, FrontierEvent], Awaitable[bool]] | None = None
        #: Event-loop thread CPU seconds that passed inside flushes but were not the
        #: flush's own: other tasks run while it waits for deliveries, and
        #: `apply_frontier` counts its work to its own stage.
        self.cpu_elsewhere = 0.0

    @property
    def pending(self) -> int:
        return (
            len(self._items) + len(self._frontier) + len(self._logs) + len(self._records)
        ) + self._held

    # Called once per link and URL: a get first, so the empty batch (or event with its
    # two lists) is built once per flush, not as setdefault's argument on every call.
    def add(self, spec: TopicSpec, partition: int, item: Any) -> None:
        key = (spec.name, partition)
        batch = self._items.get(key)
        if batch is None:
            self._items[key] = [item]
        else:
            batch.append(item)

    def add_frontier(self, partition: int, kind: str, item: Any) -> None:
        event = self._frontier.get(partition)
        if event is None:
            event = self._frontier[partition] = {"new_urls": [], "completions": []}
        event[kind].append(item)

    def add_record(self, spec: TopicSpec, partition: int, key: bytes, value: bytes | None) -> None:
        """One keyed record (not batched): a compacted topic keeps the newest value per
        key, so each key is a message of its own; None is a tombstone."""
        self._records.append((spec, partition, key, value))

    def log(self, record: dict[str, Any]) -> None:
        self._logs.append((self.ctx.host_partition(record["host"]), record))

    async def flush(self) -> None:
        items, self._items = self._items, {}
        frontier, self._frontier = self._frontier, {}
        logs, self._logs = self._logs, []
        records, self._records = self._records, []
        ctx = self.ctx
        # this flush's own messages, not whatever else the producer holds meanwhile
        awaited = Deliveries() if frontier and items and self.frontier_after_delivery else None
        for (name, partition), batch in items.items():
            spec = ctx.specs[name]
            wrapper = BATCH_FIELD[spec.schema]
            chunks = _chunks(batch) if spec.schema in SIZED_SCHEMAS else _count_chunks(batch)
            for chunk in chunks:
                value = codec.encode(spec.schema, {wrapper: chunk})
                await ctx.send(spec, partition, value, awaited=awaited)
        for spec, partition, key, keyed_value in records:
            await ctx.send(spec, partition, keyed_value, awaited=awaited, key=key)
        for partition, record in logs:
            ctx.counters.outcomes[record["outcome"]] += 1
            ctx.counters.tally.add(record)
            ctx.journal.write(record)
            value = codec.encode("crawl_log", record)
            await ctx.send(topology.CRAWL_LOG, partition, value, awaited=awaited)
        if logs:
            ctx.journal.flush()
        # held (pending, for idle detection) until each is applied here or sent
        self._held = len(frontier)
        try:
            if awaited is not None:
                paused = time.thread_time()
                try:
                    await ctx.producer.wait(awaited)
                finally:
                    self.cpu_elsewhere += time.thread_time() - paused
            for partition, event in frontier.items():
                if self.apply_frontier is not None:
                    paused = time.thread_time()
                    local: FrontierEvent = {
                        "new_urls": event["new_urls"],
                        "completions": event["completions"],
                        "tick": False,
                    }
                    applied = await self.apply_frontier(partition, local)
                    self.cpu_elsewhere += time.thread_time() - paused
                    if applied:
                        continue
                await ctx.send(
                    topology.FRONTIER,
                    partition,
                    codec.encode("frontier_event", {**event, "tick": False}),
                )
        finally:
            self._held = 0


def _chunks(batch: list[Any]) -> list[list[Any]]:
    """Split a batch so no message grows past MAX_BATCH_BYTES (bodies dominate the size)."""
    out: list[list[Any]] = []
    current: list[Any] = []
    size = 0
    for item in batch:
        item_size = _approx_size(item)
        if current and size + item_size > MAX_BATCH_BYTES:
            out.append(current)
            current, size = [], 0
        current.append(item)
        size += item_size
    if current:
        out.append(current)
    return out


def _count_chunks(batch: list[Any]) -> list[list[Any]]:
    """`_chunks` of a batch whose items carry no body (URLs, fetch requests): every
    item counts 256 bytes there, so the split is by count, without sizing each item."""
    step = MAX_BATCH_BYTES // 256
    if len(batch) <= step:
        return [batch] if batch else []
    return [batch[i : i + step] for i in range(0, len(batch), step)]


def _approx_size(item: Any) -> int:
    if isinstance(item, dict):
        page = item.get("page", item)
        body = page.get("body") if isinstance(page, dict) else None
        # a parsed page without its body (handed off) is mostly its links
        links = item.get("links")
        return (
            256
            + (len(body) if isinstance(body, bytes | bytearray) else 0)
            + (80 * len(links) if isinstance(links, list) else 0)
        )
    return 256


def crawl_log_record(
    url: str,
    stage: str,
    outcome: str,
    *,
    host: str | None = None,
    status: int = 0,
    reason: str = "",
    nbytes: int = 0,
    elapsed_ms: float = 0.0,
    depth: int = 0,
    url_id: int = 0,
) -> dict[str, Any]:
    return {
        "url": url,
        "host": host if host is not None else host_of(url),
        "stage": stage,
        "outcome": outcome,
        "status": status,
        "reason": reason[:2000],
        "bytes": nbytes,
        "elapsed_ms": elapsed_ms,
        "depth": depth,
        "at": time.time(),
        "url_id": url_id,
    }


class StageContext:
    """Handles to everything a stage may touch, built once per app by the factory."""

    def __init__(self, app: faust.App, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.counters = Counters()
        # the crawl log and dead letters kept beside the pages (streams/store/journal.py)
        self.journal = Journal(Path(settings.data_dir) / CRAWL_LOG_FILE)
        self.dead_journal = Journal(Path(settings.data_dir) / DEAD_LETTERS_FILE)
        self.specs: dict[str, TopicSpec] = {spec.name: spec for spec in topology.TOPICS}
        self.topics: dict[str, faust.TopicT] = {}
        for spec in topology.TOPICS:
            partitions = settings.kafka.partitions if spec.scaled else 1
            self.topics[spec.name] = app.topic(
                topology.topic_name(settings.app_id, spec),
                partitions=partitions,
                key_serializer="raw",
                value_serializer="raw",
                config={
                    "max.message.bytes": str(16 * 1024 * 1024),
                    **({"cleanup.policy": "compact"} if spec.compacted else {}),
                },
            )
        self.topic_names = {
            spec.name: topology.topic_name(settings.app_id, spec) for spec in topology.TOPICS
        }
        producer_config: dict[str, Any] = {"compression.type": settings.kafka.compression}
        if settings.kafka.replication_factor > 1:
            # Replicated topics, so leaders move: librdkafka retries the requests a
            # dead leader may have written already, and without idempotence each such
            # retry is a second copy downstream (bench/faults.py --scenario leader on
            # 3 Kafka nodes: 43 pages fetched twice from duplicated stage messages;
            # none with it). The broker drops the retried copies by sequence number.
            producer_config["enable.idempotence"] = True
        linger = settings.kafka.changelog_linger_ms
        self.producer = StageProducer(
            settings.kafka.bootstrap,
            changelog_linger_ms=linger if linger >= 0 else None,
            **producer_config,
        )
        self.outboxes: list[Outbox] = []
        self.seen_filters: Any = None
        self.limits = Limits(settings.kafka.max_message_bytes, settings.crawl.max_url_bytes)
        #: Page bodies parse keeps for link-extract in this worker (streams/core/handoff.py).
        self.handoff = HandoffCache(settings.worker.handoff_cache_bytes)
        #: Documents sent lately, for resends with new anchors (streams/core/doccache.py).
        self.document_cache = DocumentCache(settings.worker.document_cache_bytes)
        self._host_partitions: dict[str, int] = {}
        #: Hooks the idle check consults besides the counters (e.g. the frontier's queues).
        self.busy_checks: list[Callable[[], bool]] = []

    def outbox(self, *, frontier_after_delivery: bool = False) -> Outbox:
        box = Outbox(self, frontier_after_delivery=frontier_after_delivery)
        self.outboxes.append(box)
        return box

    def topic(self, spec: TopicSpec) -> faust.TopicT:
        return self.topics[spec.name]

    def host_partition(self, host: str) -> int:
        """The partition that owns a host (authority or URL host; port ignored).

        Cached per host: a crawl meets few hosts and asks for each one millions
        of times (every link, every log record).
        """
        partition = self._host_partitions.get(host)
        if partition is None:
            partition = topology.host_partition(host, self.settings.kafka.partitions)
            if len(self._host_partitions) >= 1_000_000:
                self._host_partitions.clear()
            self._host_partitions[host] = partition
        return partition

    def url_partition(self, url: str) -> int:
        return self.host_partition(host_of(url))

    def fingerprint_partition(self, fingerprint: str) -> int:
        return partition_for(fingerprint, self.settings.kafka.partitions)

    async def send(
        self,
        spec: TopicSpec,
        partition: int,
        value: bytes | None,
        *,
        awaited: Deliveries | None = None,
        key: bytes | None = None,
    ) -> None:
        """`awaited`: a flush that will wait for this message's acknowledgement."""
        self.counters.sent[spec.name] += 1
        self.producer.produce(
            self.topic_names[spec.name],
            value,
            partition,
            track=spec.name not in self.counters.unconsumed,
            awaited=awaited,
            key=key,
        )

    async def dead_letter(
        self, stage: str, event: Any, error: str, *, value: bytes | None = None
    ) -> None:
        """Keep an unprocessable message whole (or `value`, the refused part of it), with
        where it came from and why.

        Never raises: a dead letter that cannot be produced is logged, and the stage
        carries on. A value too large for one Kafka message is cut to
        DEAD_LETTER_VALUE_MAX bytes, and the reason says so.
        """
        message = getattr(event, "message", None)
        if value is None:
            value = getattr(event, "value", None)
        key = getattr(event, "key", None)
        if isinstance(value, bytes) and len(value) > DEAD_LETTER_VALUE_MAX:
            error = (
                f"{error} (value cut to its first {DEAD_LETTER_VALUE_MAX} of {len(value)} bytes)"
            )
            value = value[:DEAD_LETTER_VALUE_MAX]
        record = {
            "stage": stage,
            "topic": str(getattr(message, "topic", "")),
            "partition": int(getattr(message, "partition", -1) or 0),
            "offset": int(getattr(message, "offset", -1) or 0),
            "key": key if isinstance(key, bytes) else None,
            "value": value if isinstance(value, bytes) else None,
            "error": error[:4000],
            "at": time.time(),
        }
        self.counters.dead_letters += 1
        self.counters.stage_errors[stage] += 1
        self.dead_journal.write({k: v for k, v in record.items() if k not in ("key", "value")})
        self.dead_journal.flush()
        log.warning("dead letter from %s: %s", stage, error[:300])
        try:
            await self.send(topology.DEAD_LETTERS, 0, codec.encode("dead_letter", record))
        except Exception:
            log.exception("could not produce a dead letter from %s: %s", stage, error[:300])

    def locally_busy(self) -> bool:
        """Work this worker holds: fetches in flight, unsent output, queued URLs."""
        if self.counters.fetch_in_flight or self.producer.pending():
            return True
        if any(box.pending for box in self.outboxes):
            return True
        return any(check() for check in self.busy_checks)

    def idle(self) -> bool:
        """True when nothing is queued, in flight, unsent or unhandled anywhere in this
        worker — and, as this worker owns every partition, in the crawl."""
        return not self.locally_busy() and self.all_handled()

    def all_handled(self) -> bool:
        """Every message this worker sent to a consumed topic has been handled."""
        counters = self.counters
        return counters.balanced() and counters.caught_up(self.producer.delivered_upto)
