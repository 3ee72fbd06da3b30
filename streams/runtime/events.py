"""Faust's current event, which table writes read their changelog partition from.

Faust sets it per stream item; a stage that handles a batch of events, or applies a
completion outside any event (`CrawlLoop.complete_at_fetch_end`), sets it itself.
"""

from __future__ import annotations

import contextvars
import weakref
from types import SimpleNamespace
from typing import Any

import faust.streams as faust_streams

from streams import codec

#: The frontier event that only wakes a partition (timers, adoption after a restart).
TICK = codec.encode("frontier_event", {"new_urls": [], "completions": [], "tick": True})


def set_current_event(event: Any) -> contextvars.Token[Any]:
    """Point Faust's current-event context at `event` (tables read its partition);
    the token puts back what was current before (`reset_current_event`)."""
    return faust_streams._current_event.set(weakref.ref(event))


def reset_current_event(token: contextvars.Token[Any]) -> None:
    faust_streams._current_event.reset(token)


class LocalEvent:
    """Stands for a frontier message while this worker's frontier handles a completion
    at its fetch's end (topology.LOCAL_PATHS): table writes go to the changelog
    partition of the current event, and only its topic and partition are read."""

    __slots__ = ("__weakref__", "message")

    def __init__(self, topic: str, partition: int) -> None:
        self.message = SimpleNamespace(topic=topic, partition=partition, offset=None)


def current_offset() -> int | None:
    """The offset of the message being handled (url-seen stamps registrations with it)."""
    event = faust_streams.current_event()
    return None if event is None else int(event.message.offset)
