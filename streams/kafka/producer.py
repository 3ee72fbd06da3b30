"""The stages' producer: confluent-kafka (librdkafka), not Faust's aiokafka producer.

Measured here: a Faust agent that consumes and `await topic.send`s manages ~2,300
events/s, one that produces with confluent-kafka ~4,700, because librdkafka
batches and does its socket I/O in its own C threads, off the event loop (and so
on the machine's other core). Faust's consumer and table changelogs stay on
aiokafka.

Delivery: Faust flushes its own producer before committing consumer offsets;
`hook_into_commits` makes that flush also wait for this producer, so a message a
handler produced is on the broker before the offset of the message that caused
it is committed (at-least-once, as with Faust's own sends). "On the broker" means
acknowledged: librdkafka's flush also returns when a message has *failed* (it gave
up after its own retries), so `flush` raises if any delivery failed since the last
flush, and the commit that would have passed over the lost message does not happen
(the worker stops; whoever reads the partition next handles it again).

Table changelog records may go through a second librdkafka producer with a long
linger (`changelog_linger_ms`): librdkafka sends one produce request per partition
batch, and a busy worker's changelogs were ~77% of its produce requests (~150/s of
~195, ~9 records each) because every flush the fetch stage made before its frontier
events (see `Outbox`) sent whatever had lingered; it now waits for its own messages
only (`wait`), which sends nothing early. No one reads a changelog while its
partition's owner lives: only a worker recovering the partition does, after a
rebalance, and Faust flushes (both producers) before it revokes partitions and
before each offset commit. So a changelog record only has to be on the broker by
then, and may wait to travel with its neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streams.settings import KafkaSettings

log = logging.getLogger("seine.producer")


#: Seconds a flush (or a wait) gives librdkafka to have every message acknowledged.
#: A broker node's SIGKILL on a 3-node Apache Kafka leaves its partitions without a
#: leader until the controller fences it (broker.session.timeout.ms, 9 s, plus a
#: controller election when it was the active one); on a loaded 2-core machine the
#: commit's flush then took 13-36 s (bench/faults.py --scenario leader) and did
#: deliver everything. With 30 s here workers crashed with DeliveryFailed while
#: librdkafka was still retrying, so one broker's failure cost the crawl workers.
#: librdkafka's own limit (message.timeout.ms, 300 s) still fails what it cannot send.
DELIVERY_TIMEOUT = 120.0


class DeliveryFailed(RuntimeError):
    """A produced message was not acknowledged: offsets past its cause must not commit."""


class Deliveries:
    """The messages one flush waits for (`StageProducer.produce(..., awaited=)`): how
    many are still unacknowledged, and how many failed. Their delivery reports run on
    whichever thread polls the producer (the event loop's and the waiting one may
    both), hence the lock: `-= 1` is not atomic across threads."""

    __slots__ = ("_lock", "failed", "waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = 0
        self.failed = 0

    def expect(self) -> None:
        with self._lock:
            self.waiting += 1

    def settle(self, failed: bool) -> None:
        with self._lock:
            self.waiting -= 1
            self.failed += failed


class StageProducer:
    def __init__(
        self, bootstrap: str, *, changelog_linger_ms: float | None = None, **config: Any
    ) -> None:
        """`config` overrides librdkafka settings; `changelog_linger_ms` (None: one
        producer for everything) gives table changelog records their own producer
        with that linger, which only :meth:`flush` sends at once."""
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "linger.ms": 2,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 200000,
            "queue.buffering.max.kbytes": 262144,
            "message.max.bytes": 16 * 1024 * 1024,
            "enable.idempotence": False,
            # the embedded broker goes away at the end of a crawl: not worth a log line
            "log.connection.close": False,
            # librdkafka compresses in its own threads; the embedded broker keeps each
            # batch as sent (aiokafka decompresses with cramjam). Why: decision 0001.
            "compression.type": KafkaSettings.compression,
            "acks": "all",
        }
        settings.update(config)
        #: monotonic time librdkafka said every broker is down; None while one answers
        #: (`brokers_down_for`).
        self.brokers_down_since: float | None = None
        settings.setdefault("error_cb", self._on_error)
        self._producer = Producer(settings)
        #: Where changelog records go: the same producer, or one that lingers longer.
        self._changelogs: Producer | None = None
        if changelog_linger_ms is not None:
            self._changelogs = Producer({**settings, "linger.ms": changelog_linger_ms})
        #: `_on_delivery` bound once (every produce passes it).
        self._report = self._on_delivery
        self._report_tracked = self._on_tracked_delivery
        #: (topic, partition) -> offset after the last tracked message delivered there:
        #: a crawl is idle only once its consumers have handled up to these
        #: (`Counters.caught_up`), whatever else the topics hold.
        self.delivered_upto: dict[tuple[str, int], int] = {}
        self.delivery_errors = 0
        self.last_error: str | None = None
        #: Failed deliveries not yet reported by `flush` (they stop the next commit).
        self._unreported_failures = 0
        #: Where changelog records are counted while set (`track_changelogs`).
        self._tracked_changelogs: Deliveries | None = None

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN and self.brokers_down_since is None:
            self.brokers_down_since = time.monotonic()

    def brokers_down_for(self, probe_timeout: float = 2.0) -> float:
        """Seconds every broker has been unreachable, 0.0 while one answers. librdkafka
        says when all are down but not when one is back, so a metadata request asks
        (blocking up to `probe_timeout`: call it off the event loop)."""
        since = self.brokers_down_since
        if since is None:
            return 0.0
        try:
            self._producer.list_topics(timeout=probe_timeout)
        except KafkaException:
            return time.monotonic() - since
        self.brokers_down_since = None
        return 0.0

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.delivery_errors += 1
            self._unreported_failures += 1
            self.last_error = f"{message.topic()}[{message.partition()}]: {error}"
            log.error("delivery failed: %s", self.last_error)

    def _on_tracked_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._on_delivery(error, message)
            return
        key = (message.topic() or "", message.partition() or 0)
        after = (message.offset() or 0) + 1
        if after > self.delivered_upto.get(key, 0):
            self.delivered_upto[key] = after

    def produce(
        self,
        topic: str,
        value: bytes | None,
        partition: int,
        *,
        track: bool = False,
        awaited: Deliveries | None = None,
        key: bytes | None = None,
    ) -> None:
        """`track`: remember the offset it lands at in `delivered_upto` (messages to a
        topic this crawl consumes). `awaited`: count it there until it is
        acknowledged (see :meth:`wait`). `key`: the record's key (a compacted topic's;
        a None value with it is a tombstone)."""
        report = self._report_tracked if track else self._report
        if awaited is not None:
            awaited.expect()
            base = report

            def report(error: KafkaError | None, message: Message) -> None:
                base(error, message)
                awaited.settle(error is not None)

        while True:
            try:
                if key is None:
                    self._producer.produce(topic, value, partition=partition, on_delivery=report)
                else:
                    self._producer.produce(
                        topic, value, key, partition=partition, on_delivery=report
                    )
                return
            except BufferError:
                # librdkafka's queue is full: serve deliveries until there is room.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise RuntimeError(f"cannot produce to {topic}[{partition}]: {exc}") from exc

    def produce_changelog(
        self,
        topic: str,
        key: bytes,
        value: bytes | None,
        partition: int,
        delivered: Callable[[int, int], None] | None = None,
    ) -> None:
        """Produce a table changelog record; `delivered(partition, offset)` on success
        if given (tables pass none: a closure and a Python callback per record cost
        more than the record's produce, and no one reads the offsets)."""
        producer = self._changelogs or self._producer
        tracked = self._tracked_changelogs
        if delivered is None and tracked is None:
            try:  # ~14 records a page: the common case in as few steps as it takes
                producer.produce(topic, value, key, partition=partition, on_delivery=self._report)
                return
            except BufferError:
                pass
        on_delivery: Callable[[KafkaError | None, Message], None] = self._report
        if delivered is not None:
            report = delivered

            def on_delivery(error: KafkaError | None, message: Message) -> None:
                if error is not None:
                    self._on_delivery(error, message)
                else:
                    report(message.partition() or 0, message.offset() or 0)

        if tracked is not None:
            tracked.expect()
            base = on_delivery

            def on_delivery(error: KafkaError | None, message: Message) -> None:
                base(error, message)
                tracked.settle(error is not None)

        while True:
            try:
                producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.05)

    @contextlib.contextmanager
    def track_changelogs(self, awaited: Deliveries) -> Iterator[None]:
        """Count in `awaited` every changelog record produced meanwhile, so that
        :meth:`wait` can wait for exactly those (the frontier's writes of a dispatch,
        acknowledged before its request starts: ``SeineApp`` local dispatch)."""
        self._tracked_changelogs = awaited
        try:
            yield
        finally:
            self._tracked_changelogs = None

    def _all(self) -> list[Producer]:
        return [p for p in (self._producer, self._changelogs) if p is not None]

    def poll(self) -> None:
        for producer in self._all():
            producer.poll(0)

    def pending(self) -> int:
        return sum(len(producer) for producer in self._all())

    async def flush(self, timeout: float = DELIVERY_TIMEOUT) -> None:
        """Wait until every produced message is acknowledged (both producers: the
        commit's and the rebalance's flush), off the event loop.

        Raises :class:`DeliveryFailed` if a message is still unacknowledged after
        `timeout`, or if any delivery failed since the last flush: the caller (the
        offset commit) must not go on as if they had been delivered.
        """
        producers = [p for p in self._all() if len(p) != 0]
        if producers:

            def flush_all() -> int:
                # librdkafka's flush sends what lingers at once; both flush together
                remaining = 0
                deadline = time.monotonic() + timeout
                for producer in producers:
                    remaining += producer.flush(max(0.0, deadline - time.monotonic()))
                return remaining

            loop = asyncio.get_running_loop()
            began = time.monotonic()
            remaining = await loop.run_in_executor(None, flush_all)
            took = time.monotonic() - began
            if took > 5.0:  # a broker failing over: worth a line, with how long it took
                log.warning("flush took %.1fs (%d messages still unacknowledged)", took, remaining)
            if remaining:
                raise DeliveryFailed(f"{remaining} messages not delivered within {timeout}s")
        self.check_delivered()

    async def wait(self, awaited: Deliveries, timeout: float = DELIVERY_TIMEOUT) -> None:
        """Wait until the messages counted in `awaited` are acknowledged, off the event
        loop. Unlike :meth:`flush`, not for every message queued meanwhile: under load
        the producer always holds hundreds (table changelogs of every stage), and the
        fetch stage's flush before its completions took 24 ms at the median and 109 at
        the 90th percentile, on every host's path to its next fetch.

        Raises :class:`DeliveryFailed` as :meth:`flush` does."""
        if awaited.waiting > 0:
            producer, changelogs = self._producer, self._changelogs

            def serve() -> None:
                deadline = time.monotonic() + timeout
                while awaited.waiting > 0 and time.monotonic() < deadline:
                    if changelogs is not None:
                        changelogs.flush(0)  # its long linger would hold tracked records
                    producer.poll(0.005)  # serves delivery reports, returns on the first

            await asyncio.get_running_loop().run_in_executor(None, serve)
            if awaited.waiting > 0:
                raise DeliveryFailed(f"{awaited.waiting} messages not delivered within {timeout}s")
        self.check_delivered()

    def check_delivered(self) -> None:
        """Raise :class:`DeliveryFailed` if a delivery failed since the last check."""
        failed, self._unreported_failures = self._unreported_failures, 0
        if failed:
            raise DeliveryFailed(
                f"{failed} messages failed delivery (last: {self.last_error}): "
                "not committing the offsets that produced them"
            )

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued, then let librdkafka go: a producer left alive keeps
        reconnecting (and logging) after the embedded broker has stopped."""
        for producer in self._all():
            producer.flush(timeout)
        self._producer = None  # type: ignore[assignment]
        self._changelogs = None


def hook_into_commits(
    app: Any,
    producer: StageProducer,
    before_commit: Callable[[Any], None] | None = None,
    before_flush: Callable[[], Any] | None = None,
) -> None:
    """Make Faust's pre-commit producer flush also flush `producer`, then call
    `before_commit`: Faust has chosen the offsets to commit by then (from what was
    handled before the flush), and sends them right after. `before_flush` is called
    first, and what it returns is handed to `before_commit` (None without it): what
    was produced by then is acknowledged once `before_commit` runs (a failed delivery
    raises, and neither it nor the commit happens). Two commits may overlap, so each
    flush keeps its own."""
    faust_producer = app.producer
    original = faust_producer.flush

    async def flush() -> None:
        noted = before_flush() if before_flush is not None else None
        await original()
        await producer.flush()
        if before_commit is not None:
            before_commit(noted)

    faust_producer.flush = flush
