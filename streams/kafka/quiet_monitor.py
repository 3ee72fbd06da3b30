"""A Faust monitor that keeps only what is cheap.

Faust's default Monitor runs bookkeeping on every message, stream event, table
get/set and send (timestamps, deques, per-topic counters). Seine keeps its own
counters per stage (streams.stages.context.Counters), so those per-event hooks are
pure overhead on the hot path; this monitor makes them no-ops and keeps the rest
(rebalance and commit bookkeeping) as Faust has it.
"""

from __future__ import annotations

from typing import Any

from faust.sensors.monitor import Monitor


class QuietMonitor(Monitor):
    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        return None

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> Any:
        return None

    def on_stream_event_out(
        self, tp: Any, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        return None

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        return None

    def on_table_get(self, table: Any, key: Any) -> None:
        return None

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        return None

    def on_table_del(self, table: Any, key: Any) -> None:
        return None

    def on_send_initiated(
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> Any:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        return None
