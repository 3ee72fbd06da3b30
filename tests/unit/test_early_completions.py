"""Completions applied at their fetch's end (`EarlyCompletions`): the frontier of the
fetching worker applies a completion at once, and drops its copy from the frontier
topic when that comes, once, so the URL's state and the crawl log are written once."""

from __future__ import annotations

from typing import Any

from streams.stages.frontier import EarlyCompletions


def _completion(host: str, dispatched_at: float, url: str = "") -> dict[str, Any]:
    return {"host": host, "dispatched_at": dispatched_at, "url": url or f"http://{host}/"}


def test_a_copy_of_a_completion_handled_early_is_dropped_once() -> None:
    early = EarlyCompletions()
    early.mark(0, [_completion("a.test", 1.0), _completion("b.test", 2.0)])
    assert len(early) == 2 and early.handled == 2
    copies = [_completion("a.test", 1.0), _completion("c.test", 3.0), _completion("b.test", 2.0)]
    assert early.without_copies(copies) == [_completion("c.test", 3.0)]
    assert early.copies_skipped == 2 and len(early) == 0
    # delivered twice: the second copy is applied (`Frontier.complete` ignores it then)
    assert early.without_copies([_completion("a.test", 1.0)]) == [_completion("a.test", 1.0)]
    assert early.copies_skipped == 2


def test_another_dispatch_of_the_same_host_is_not_a_copy() -> None:
    """A host's next fetch has its own dispatch time: its completion is applied."""
    early = EarlyCompletions()
    early.mark(0, [_completion("a.test", 1.0)])
    later = [_completion("a.test", 1.5)]
    assert early.without_copies(later) == later
    assert early.copies_skipped == 0 and len(early) == 1


def test_a_revoked_partition_forgets_its_early_completions() -> None:
    """The copies of a partition taken away go to its next owner, which applied
    nothing early: there they are applied, and here nothing waits for them."""
    early = EarlyCompletions()
    early.mark(0, [_completion("a.test", 1.0)])
    early.mark(1, [_completion("b.test", 2.0)])
    early.forget({1})
    assert len(early) == 1
    copies = [_completion("a.test", 1.0), _completion("b.test", 2.0)]
    assert early.without_copies(copies) == [_completion("b.test", 2.0)]


def test_completions_whose_early_handling_failed_are_applied_from_their_copies() -> None:
    early = EarlyCompletions()
    batch = [_completion("a.test", 1.0), _completion("b.test", 2.0)]
    early.mark(0, batch)
    early.unmark(batch)
    assert len(early) == 0 and early.handled == 0
    assert early.without_copies(batch) == batch
