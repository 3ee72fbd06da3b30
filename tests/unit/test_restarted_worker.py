"""A multi-worker crawl ends after a worker was killed and started again: what the
dead worker sent, handled and committed still counts (its last status, a "ghost"),
and so do the commits its successor reads instead of handling those messages again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streams.ops.multiworker import caught_up, ghost_of, globally_idle
from streams.runtime.supervision import Supervisor
from streams.stages.context import Counters


def status(sent: dict[str, int], done: dict[str, int], **extra: Any) -> dict[str, Any]:
    return {"sent": sent, "done": done, "busy": False, "rebalancing": False, **extra}


def test_the_dead_workers_last_status_counts_in_the_sums() -> None:
    """Six seeds pushed; the dead worker-0 handled two of them and committed, so its
    successor never handles them again: without its ghost the sums stay short."""
    successor = status({"url-seen": 10}, {"url-seen": 4})
    other = status({"url-seen": 5}, {"seeds": 4, "url-seen": 9})
    ghost = status({"url-seen": 3}, {"seeds": 2, "url-seen": 5}, busy=True, rebalancing=True)
    assert not globally_idle([successor, other], 6)
    # with it the crawl is idle: a ghost's busy and rebalancing are its past
    assert globally_idle([successor, other], 6, ghosts=[ghost])
    assert not globally_idle([{**successor, "busy": True}, other], 6, ghosts=[ghost])


def test_a_commit_counts_as_handled() -> None:
    delivered = status({}, {}, delivered_upto=[["a.content-dedup", 0, 50]])
    successor = status({}, {}, handled_upto=[], committed_upto=[["a.content-dedup", 0, 50]])
    assert caught_up([delivered, successor], {})
    successor["committed_upto"] = [["a.content-dedup", 0, 49]]
    assert not caught_up([delivered, successor], {})
    # the dead worker's own deliveries still have to be handled by someone
    ghost = status({}, {}, delivered_upto=[["a.parse", 1, 7]], handled_upto=[["a.parse", 1, 3]])
    successor["committed_upto"] = [["a.content-dedup", 0, 50]]
    assert not caught_up([delivered, successor, ghost], {})
    successor["handled_upto"] = [["a.parse", 1, 7]]
    assert caught_up([delivered, successor, ghost], {})


def test_a_ghost_counts_the_sends_its_last_commit_saw_acknowledged() -> None:
    """The dead worker's last status counted 3 url-seen messages it produced; the kill
    lost one before it left. Its last commit's flush saw 2 acknowledged: counted by
    those, the sums balance; by `sent`, they waited for the lost one for ever."""
    successor = status({"url-seen": 4}, {"seeds": 6, "url-seen": 4})
    dead = status(
        {"url-seen": 3},
        {"url-seen": 2},
        sent_committed={"url-seen": 2},
        done_committed={"url-seen": 2},
    )
    assert not globally_idle([successor], 6, ghosts=[dead])
    assert globally_idle([successor], 6, ghosts=[ghost_of(dead)])
    # one that never committed sent nothing anyone must wait for
    assert ghost_of(status({"url-seen": 3}, {}))["sent"] == {}


def test_a_ghost_counts_the_handlings_its_last_commit_covered() -> None:
    """The dead worker handled a parse message after its last commit, and the kill
    lost what that handling sent on. Its successor must handle the message again:
    counted by the dead worker's `done`, the sums balanced without it (a successor
    that skipped it ended the crawl with its page never stored)."""
    other = status({"parse": 1}, {"seeds": 6})
    dead = status({}, {"parse": 1}, sent_committed={}, done_committed={})
    successor = status({}, {})
    assert globally_idle([other, successor], 6, ghosts=[dead])
    assert not globally_idle([other, successor], 6, ghosts=[ghost_of(dead)])
    assert globally_idle([other, status({}, {"parse": 1})], 6, ghosts=[ghost_of(dead)])


def test_overlapping_commits_keep_the_larger_acknowledged_count() -> None:
    """Two commits may overlap (the commit timer's and the one at idle): the flush of
    the later note can end first, and the earlier note must not win after it."""
    supervisor = Supervisor.__new__(Supervisor)  # only its counters and no status file
    supervisor.ctx = SimpleNamespace(counters=Counters())  # type: ignore[assignment]
    supervisor.status_path = None
    supervisor.commit_status(({"url-seen": 5, "parse": 1}, {"parse": 4}))
    supervisor.commit_status(({"url-seen": 3, "frontier": 2}, {"parse": 2, "seeds": 1}))
    assert supervisor.ctx.counters.sent_committed == {"url-seen": 5, "parse": 1, "frontier": 2}
    assert supervisor.ctx.counters.done_committed == {"parse": 4, "seeds": 1}
