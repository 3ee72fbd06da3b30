"""Patch: mode's Worker closes its event loop without a one-second nap.

On its way out, `mode.worker.Worker` runs `_sentinel_task`, an `asyncio.sleep(1.0)`,
on the loop before closing it, so callbacks scheduled by closing transports get to
run. Everything of Seine's is stopped and flushed by then (services, tables, page
store, producer), and a few loop turns give those callbacks their chance: the full
second was 1.0 of the 2.3 s from a crawl's last request to its exit.
`close_loop_promptly` makes the sentinel sleep 50 ms.

Broker-independent. Checked on mode-streaming 0.7.1 (faust-streaming 0.15.3).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mode.worker import Worker

#: What is left of the sentinel's sleep: a few turns of the loop.
SENTINEL_SECONDS = 0.05


def close_loop_promptly() -> None:
    if getattr(Worker._sentinel_task, "_seine_wrapped", False):
        return

    async def _sentinel_task(self: Any) -> None:
        await asyncio.sleep(SENTINEL_SECONDS)

    _sentinel_task._seine_wrapped = True  # type: ignore[attr-defined]
    Worker._sentinel_task = _sentinel_task  # type: ignore[method-assign]
