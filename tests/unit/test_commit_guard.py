"""The commit guard: Faust may only commit a run of acknowledged offsets that starts
where the partition's last commit (or, with none yet, its earliest offset) left off."""

from __future__ import annotations

import logging

from streams.kafka.patches.commit_guard import commit_allowed, first_pending_offset


def test_nothing_acknowledged_is_nothing_to_refuse() -> None:
    assert first_pending_offset([], []) is None
    assert commit_allowed(None, 5, None)


def test_a_run_starting_at_the_committed_offset_commits() -> None:
    assert commit_allowed(first_pending_offset([7, 8, 9], []), 7, None)


def test_one_missing_message_after_a_commit_holds_the_commit_back() -> None:
    # committed 7 means "next to read is 7": acknowledged 8.. with 7 missing
    assert not commit_allowed(first_pending_offset([8, 9, 10], []), 7, None)


def test_with_nothing_committed_the_earliest_offset_is_the_head() -> None:
    assert commit_allowed(first_pending_offset([0, 1, 2], []), None, 0)
    # offset 0 dropped at a rebalance: 1.. must not be committed over it
    assert not commit_allowed(first_pending_offset([1, 2, 3], []), None, 0)
    # a log whose retention removed 0..99 starts at 100
    assert commit_allowed(first_pending_offset([100, 101], []), None, 100)


def test_a_known_gap_of_absent_offsets_counts_as_handled() -> None:
    # offsets 7-9 do not exist (compaction, transaction markers): Faust records a gap
    assert commit_allowed(first_pending_offset([10, 11], [7]), 7, None)


def test_nothing_known_yet_holds_the_commit() -> None:
    """Just assigned: Faust's seek has not read the partition's commit yet, and the
    offsets acknowledged meanwhile may start past records this worker never got."""
    assert not commit_allowed(first_pending_offset([45, 46, 47], []), None, None)


def test_the_guard_is_installed_once_and_wraps_faust() -> None:
    from faust.transport.consumer import Consumer

    from streams.kafka.patches.commit_guard import guard_commits

    guard_commits()
    wrapped = Consumer._new_offset
    guard_commits()
    assert Consumer._new_offset is wrapped and getattr(wrapped, "_seine_wrapped", False)


def _consumer_state(acked: list[int], committed: int | None, head: int | None) -> object:
    from collections import defaultdict
    from types import SimpleNamespace

    from faust.types import TP
    from intervaltree import IntervalTree

    tp = TP("links", 0)
    state = SimpleNamespace(
        log=logging.getLogger("test-commit-guard"),
        _acked=defaultdict(list, {tp: list(acked)}),
        _acked_index=defaultdict(set, {tp: set(acked)}),
        _gap=defaultdict(IntervalTree),
        _committed_offset=defaultdict(lambda: None, {tp: committed}),
        _seine_heads={tp: head} if head is not None else {},
    )
    return state


def test_faust_new_offset_with_the_guard() -> None:
    from faust.transport.consumer import Consumer
    from faust.types import TP

    from streams.kafka.patches.commit_guard import guard_commits

    guard_commits()
    tp = TP("links", 0)
    # offset 0 never handled: Faust alone would commit 3 here
    assert Consumer._new_offset(_consumer_state([1, 2], None, 0), tp) is None  # type: ignore[arg-type]
    assert Consumer._new_offset(_consumer_state([0, 1, 2], None, 0), tp) == 3  # type: ignore[arg-type]
    assert Consumer._new_offset(_consumer_state([8, 9], 7, None), tp) is None  # type: ignore[arg-type]
    assert Consumer._new_offset(_consumer_state([7, 8, 10], 7, None), tp) == 9  # type: ignore[arg-type]
    # just assigned, the commit not read yet: Faust alone would commit 48 over 32-44
    assert Consumer._new_offset(_consumer_state([45, 46, 47], None, None), tp) is None  # type: ignore[arg-type]
