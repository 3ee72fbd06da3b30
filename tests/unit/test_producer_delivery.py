"""A failed delivery stops the next offset commit: the stage producer's flush (which
Faust's pre-commit flush awaits, see `hook_into_commits`) raises instead of returning
as if the message were on the broker. Real librdkafka, against a loopback port that
nothing listens on, with a short message timeout."""

from __future__ import annotations

import asyncio
import socket

import pytest

from streams.producer import DeliveryFailed, StageProducer


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


def test_changelog_records_linger_past_a_stage_flush_but_not_past_a_full_one() -> None:
    """The fetch stage's flush before its frontier events (changelogs=False) waits for
    stage messages only; the commit's flush waits for the changelog producer too and
    reports its failures like the stages'."""
    producer = _failing_producer(changelog_linger_ms=200)
    try:
        producer.produce_changelog("seine-hosts-changelog", b"key", b"value", 0)
        # had it waited for the record, it would have seen it fail (the next test)
        asyncio.run(producer.flush(timeout=20.0, changelogs=False))
        assert producer.delivery_errors == 0

        with pytest.raises(DeliveryFailed, match="1 messages failed delivery"):
            asyncio.run(producer.flush(timeout=20.0))
        assert producer.delivery_errors == 1
    finally:
        producer._producer = None  # type: ignore[assignment]
        producer._changelogs = None


def test_without_a_changelog_linger_every_flush_takes_the_changelogs() -> None:
    producer = _failing_producer(changelog_linger_ms=None)
    try:
        producer.produce_changelog("seine-hosts-changelog", b"key", b"value", 0)
        with pytest.raises(DeliveryFailed, match="1 messages failed delivery"):
            asyncio.run(producer.flush(timeout=20.0, changelogs=False))
    finally:
        producer._producer = None  # type: ignore[assignment]
