"""A failed delivery stops the next offset commit: the stage producer's flush (which
Faust's pre-commit flush awaits, see `hook_into_commits`) raises instead of returning
as if the message were on the broker. Real librdkafka, against a loopback port that
nothing listens on, with a short message timeout."""

from __future__ import annotations

import asyncio
import socket
import time
from types import SimpleNamespace

import pytest

from streams.kafka.producer import Deliveries, DeliveryFailed, StageProducer, hook_into_commits


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_message_that_was_never_acknowledged_fails_the_flush_once() -> None:
    producer = StageProducer(
        f"127.0.0.1:{closed_port()}",
        **{"message.timeout.ms": 300, "log_level": 0},
    )
    try:
        producer.produce("stage-topic", b"a frontier message", 0)

        async def flush() -> None:
            await producer.flush(timeout=20.0)

        with pytest.raises(DeliveryFailed, match="1 messages failed delivery"):
            asyncio.run(flush())
        assert producer.delivery_errors == 1
        asyncio.run(flush())  # reported once: the worker has stopped by then
    finally:
        producer._producer = None  # type: ignore[assignment]  # nothing left to deliver


def _failing_producer(changelog_linger_ms: float | None) -> StageProducer:
    return StageProducer(
        f"127.0.0.1:{closed_port()}",
        changelog_linger_ms=changelog_linger_ms,
        **{"message.timeout.ms": 300, "log_level": 0},
    )


def test_changelog_records_linger_past_a_stage_wait_but_not_past_a_flush() -> None:
    """The fetch stage's wait before its frontier events (`wait`) is for its own
    messages only; the commit's flush waits for the changelog producer too and reports
    its failures like the stages'."""
    producer = _failing_producer(changelog_linger_ms=200)
    try:
        producer.produce_changelog("seine-hosts-changelog", b"key", b"value", 0)
        # had it waited for the record, it would have seen it fail (below)
        asyncio.run(producer.wait(Deliveries(), timeout=20.0))
        assert producer.delivery_errors == 0

        with pytest.raises(DeliveryFailed, match="1 messages failed delivery"):
            asyncio.run(producer.flush(timeout=20.0))
        assert producer.delivery_errors == 1
    finally:
        producer._producer = None  # type: ignore[assignment]
        producer._changelogs = None


def test_without_a_changelog_linger_a_flush_takes_the_changelogs() -> None:
    producer = _failing_producer(changelog_linger_ms=None)
    try:
        producer.produce_changelog("seine-hosts-changelog", b"key", b"value", 0)
        with pytest.raises(DeliveryFailed, match="1 messages failed delivery"):
            asyncio.run(producer.flush(timeout=20.0))
    finally:
        producer._producer = None  # type: ignore[assignment]


def test_waiting_for_a_flush_s_own_messages_reports_their_failure() -> None:
    """The fetch stage's outbox waits for its own messages (`wait`) before it sends the
    completions; one that fails stops it like a failed flush."""
    producer = _failing_producer(changelog_linger_ms=None)
    try:
        awaited = Deliveries()
        producer.produce("stage-topic", b"a page", 0, awaited=awaited)
        assert awaited.waiting == 1
        with pytest.raises(DeliveryFailed, match="1 messages failed delivery"):
            asyncio.run(producer.wait(awaited, timeout=20.0))
        assert (awaited.waiting, awaited.failed) == (0, 1)
    finally:
        producer._producer = None  # type: ignore[assignment]


def test_waiting_for_nothing_does_not_wait_for_what_others_queued() -> None:
    """A flush waits for everything queued, including what other stages produce while
    it waits; `wait` only for the messages counted in its `Deliveries`."""
    producer = StageProducer(
        f"127.0.0.1:{closed_port()}",
        **{"message.timeout.ms": 60_000, "log_level": 0},
    )
    try:
        producer.produce("stage-topic", b"another stage's message", 0)
        started = time.monotonic()
        asyncio.run(producer.wait(Deliveries(), timeout=30.0))
        assert time.monotonic() - started < 5.0
        assert producer.pending() >= 1  # still queued: not waited for
    finally:
        producer._producer = None  # type: ignore[assignment]


@pytest.mark.parametrize("changelog_linger_ms", [None, 200])
def test_tracked_changelog_records_are_waited_for(changelog_linger_ms: float | None) -> None:
    """The frontier's table writes of a dispatch are counted (`track_changelogs`) and
    its request starts only after `wait` saw them acknowledged: here they fail, so the
    wait reports it, whichever producer (and linger) carries the changelogs. Records
    produced after the tracking ended are not counted."""
    producer = _failing_producer(changelog_linger_ms=changelog_linger_ms)
    try:
        written = Deliveries()
        with producer.track_changelogs(written):
            producer.produce_changelog("seine-hosts-changelog", b"host", b"busy", 0)
            producer.produce_changelog("seine-queue-changelog", b"slot", None, 1)
        producer.produce_changelog("seine-hosts-changelog", b"other", b"idle", 0)
        assert written.waiting == 2
        with pytest.raises(DeliveryFailed):
            asyncio.run(producer.wait(written, timeout=20.0))
        assert (written.waiting, written.failed) == (0, 2)
    finally:
        producer._producer = None  # type: ignore[assignment]
        producer._changelogs = None


def test_the_commit_hook_flushes_both_producers_then_calls_before_commit() -> None:
    """The worker's status is written after the flushes Faust's commit awaits, so it
    counts every message the commit that follows covers; what it sent is noted before
    them, so each of those is acknowledged by then."""
    events: list[str] = []

    async def faust_flush() -> None:
        events.append("faust flush")

    app = SimpleNamespace(producer=SimpleNamespace(flush=faust_flush))
    producer = StageProducer(f"127.0.0.1:{closed_port()}", **{"log_level": 0})
    try:

        def note() -> str:
            events.append("sent")
            return "sent"

        hook_into_commits(app, producer, lambda noted: events.append(f"status after {noted}"), note)
        asyncio.run(app.producer.flush())
        assert events == ["sent", "faust flush", "status after sent"]
    finally:
        producer._producer = None  # type: ignore[assignment]  # nothing was produced
