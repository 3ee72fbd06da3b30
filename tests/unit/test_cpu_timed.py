"""`cpu_timed`: a task's CPU time, step by step, without what runs while it waits.

The fetch stage's tasks are timed so: a fetch is a few steps between awaits, and no
stage's unit of work holds it."""

from __future__ import annotations

import asyncio
import time

import pytest

from streams.core.stats import cpu_timed


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_steps_are_counted_and_the_waits_are_not() -> None:
    counted: list[float] = []

    async def work() -> str:
        _burn(0.02)
        await asyncio.sleep(0)
        _burn(0.02)
        return "done"

    async def other() -> None:
        _burn(0.1)  # runs while `work` waits: not its CPU

    async def scenario() -> str:
        timed = asyncio.ensure_future(cpu_timed(work(), counted.append))
        await asyncio.sleep(0)  # let it take its first step
        await other()
        return await timed

    assert asyncio.run(scenario()) == "done"
    assert len(counted) == 2  # one entry per step
    assert 0.04 <= sum(counted) < 0.09, counted


def test_an_error_and_a_cancellation_go_through() -> None:
    counted: list[float] = []

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("broken")

    async def waits(reached: asyncio.Event, cancelled: list[bool]) -> None:
        reached.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def scenario() -> list[bool]:
        with pytest.raises(ValueError, match="broken"):
            await cpu_timed(fails(), counted.append)
        reached, cancelled = asyncio.Event(), list[bool]()
        task = asyncio.ensure_future(cpu_timed(waits(reached, cancelled), counted.append))
        await reached.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return cancelled

    assert asyncio.run(scenario()) == [True]
    assert counted and all(c >= 0 for c in counted)
