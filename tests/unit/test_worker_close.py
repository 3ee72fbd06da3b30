"""mode's Worker closes its loop after a few turns, not after its one-second nap
(streams/kafka/patches/worker_close.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mode.worker import Worker

from streams.kafka.patches.worker_close import SENTINEL_SECONDS, close_loop_promptly


def test_the_sentinel_sleeps_a_few_turns_not_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> None:
        asked.append(delay)
        await real_sleep(0)

    close_loop_promptly()
    close_loop_promptly()  # installed once
    monkeypatch.setattr(asyncio, "sleep", sleep)
    asyncio.run(Worker._sentinel_task(object()))  # type: ignore[arg-type]
    assert asked == [SENTINEL_SECONDS] and SENTINEL_SECONDS < 0.1
