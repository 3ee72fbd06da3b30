"""A worker stopped with SIGTERM hands over (streams/app.py `SeineApp.hand_over`): it
dispatches nothing more and stops once its fetches in flight are over and their
results are acknowledged, so the partitions' next owners do not fetch them again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streams.app import SeineApp


def _seine() -> tuple[SeineApp, Any]:
    parts = SimpleNamespace(
        ctx=SimpleNamespace(counters=SimpleNamespace(fetch_in_flight=0)),
        fetch=SimpleNamespace(out=SimpleNamespace(pending=0)),
    )
    seine = SeineApp(
        app=None,  # type: ignore[arg-type]
        settings=None,  # type: ignore[arg-type]
        ctx=parts.ctx,  # type: ignore[arg-type]
        frontier=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        fetch=parts.fetch,  # type: ignore[arg-type]
        siblings=None,  # type: ignore[arg-type]
    )
    return seine, parts


def test_sigterm_stops_dispatching_and_waits_for_the_fetches_in_flight() -> None:
    seine, parts = _seine()
    assert seine.dispatching
    parts.ctx.counters.fetch_in_flight = 1
    seine.hand_over()
    assert not seine.dispatching and not seine.finished
    assert not seine.handed_over()  # a fetch still runs
    parts.ctx.counters.fetch_in_flight = 0
    parts.fetch.out.pending = 2  # its page and completion, not sent yet
    assert not seine.handed_over()
    parts.fetch.out.pending = 0
    assert seine.handed_over()
    assert not seine.finished  # the watch timer flushes the producer, then stops it


def test_a_second_sigterm_stops_at_once() -> None:
    seine, parts = _seine()
    parts.ctx.counters.fetch_in_flight = 1
    seine.hand_over()
    seine.hand_over()
    assert seine.finished and seine.exit_code == 0
