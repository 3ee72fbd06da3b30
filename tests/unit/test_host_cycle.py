"""`HostCycle`: a host's time from a dispatch to its completion at the frontier, in parts."""

from __future__ import annotations

import pytest

from streams.core.stats import HostCycle


def test_a_cycle_splits_into_the_way_to_the_fetch_the_fetch_and_the_way_back() -> None:
    cycle = HostCycle()
    # dispatched at 100.000, fetched 100.090-100.110, handled at the frontier at 100.230
    cycle.observe(handled_at=100.230, dispatched_at=100.0, finished_at=100.110, elapsed_ms=20.0)
    # a second one: 10 ms to the start, 30 fetching, 60 back
    cycle.observe(handled_at=200.100, dispatched_at=200.0, finished_at=200.040, elapsed_ms=30.0)
    assert cycle.count == 2
    assert cycle.to_fetch_s == pytest.approx(0.090 + 0.010)
    assert cycle.fetch_s == pytest.approx(0.050)
    assert cycle.back_s == pytest.approx(0.120 + 0.060)
    assert cycle.describe() == (
        "165 ms on average over 2 fetches = 50 to the fetch's start + 25 fetching + "
        "90 back to the frontier"
    )


def test_completions_without_a_dispatch_time_are_left_out() -> None:
    cycle = HostCycle()
    cycle.observe(handled_at=10.0, dispatched_at=0.0, finished_at=9.0, elapsed_ms=5.0)
    assert cycle.count == 0 and cycle.fetch_s == 0.0
    assert cycle.describe().startswith("0 ms on average over 0 fetches")


def test_clock_skew_never_makes_a_part_negative() -> None:
    cycle = HostCycle()
    # a completion stamped by a clock ahead of the frontier's
    cycle.observe(handled_at=10.0, dispatched_at=10.0, finished_at=10.5, elapsed_ms=100.0)
    assert cycle.back_s == 0.0 and cycle.to_fetch_s == pytest.approx(0.4)
