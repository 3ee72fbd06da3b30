"""The one protocol every stage of topology.STAGES meets in a worker.

A stage is an object built once per worker from its parts (context, tables, the page
store...). Its agent (streams/runtime/agents.py) takes the messages of the stage's
topic that have queued up as one unit, decodes and screens each, calls `step` with
it, then flushes the outbox once for the unit and counts. A step that raises costs
its message, which goes to the dead letters; the stage carries on.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from streams.stages.context import Outbox


@runtime_checkable
class Stage(Protocol):
    """A stage as its agent runs it."""

    #: topology's name of the stage (`topology.STAGES`)
    name: str
    #: decode the message with its topic's schema first (seeds: raw bytes, False)
    decode: bool
    #: count the items of each batch as the stage's work (fetch counts its own)
    count_items: bool

    def step(self, partition: int, record: Any, out: Outbox) -> object:
        """Handle one message of `partition`: what it produces goes to `out`; may be a
        coroutine, which the agent awaits."""
        ...
