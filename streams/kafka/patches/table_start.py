"""Patch: Faust's table manager starts without its one-second nap.

`TableManager.on_start` sleeps 1.0 s before it finalizes the tables' channels and
starts recovery, so that tables declared after the app started still make it; the
consumer's subscription waits for that. Seine declares every table in its app
factory (`streams.app.create_app`), before anything starts, so the sleep only
delays every worker's start: it was 1.0 of the 5 s from `seine crawl` to its first
request. `start_tables_at_once` replaces `on_start` with the same steps without it.

Broker-independent. Checked on faust-streaming 0.15.3.
"""

from __future__ import annotations

from typing import Any

from faust.tables.manager import TableManager


def start_tables_at_once() -> None:
    on_start = TableManager.on_start
    if getattr(on_start, "_seine_wrapped", False):
        return

    async def start(self: Any) -> None:
        # faust 0.15.3's on_start, less `await self.sleep(1.0)`
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()

    start._seine_wrapped = True  # type: ignore[attr-defined]
    TableManager.on_start = start  # type: ignore[method-assign]
