"""SeineApp: the Faust app of one worker plus the handles a command or a test needs,
and the worker's stop states (drain on Ctrl-C, hand-over on SIGTERM)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import faust

import topology
from streams.core.frontier import Frontier
from streams.kafka.consumer_state import committed_offsets, lagging_partitions
from streams.settings import Settings
from streams.stages.context import StageContext
from streams.stages.fetch import FetchStage
from streams.store.pagestore import PageStore
from streams.store.storeset import SiblingStores

log = logging.getLogger("seine")


@dataclass
class SeineApp:
    """The Faust app plus the handles a CLI command or a test needs."""

    app: faust.App
    settings: Settings
    ctx: StageContext
    frontier: Frontier
    store: PageStore
    fetch: FetchStage
    #: The other workers' page stores, asked when this worker's own has no page a
    #: partition's previous owner may have stored (streams/store/storeset.py).
    siblings: SiblingStores
    until_idle: bool = False
    initial_seeds: list[str] = field(default_factory=list)
    exit_code: int = 0
    idle_since: float | None = None
    worker: Any = None
    #: The indexer stage (streams/stages/indexer.py); None with --no-index.
    indexer: Any = None
    on_progress: Callable[[SeineApp], None] | None = None
    finished: bool = False
    #: `seine crawl` (one process): the first Ctrl-C drains instead of stopping at once.
    drain_on_sigint: bool = False
    #: monotonic time the drain started; None while crawling normally.
    draining_since: float | None = None
    drained_since: float | None = None
    #: monotonic time a SIGTERM started the hand-over (`hand_over`); None until then.
    handing_over_since: float | None = None
    #: Wall-clock time by which a worker stopping on its own (a lost cluster) will have
    #: exited: its timers are stopped, so its parent must not take it for hung till then.
    stopping_until: float | None = None

    def status(self) -> dict[str, Any]:
        """This worker's counters, for a supervisor that sums them over workers."""
        c = self.ctx.counters
        return {
            "sent": dict(c.sent),
            "sent_committed": c.sent_committed,
            "done_committed": c.done_committed,
            "done": dict(c.done),
            "busy": self.ctx.locally_busy(),
            "rebalancing": bool(self.app.rebalancing),
            "assigned": len(self.app.assignor.assigned_actives()),
            # the host partitions this worker holds (bench/faults.py: whose were they?)
            "partitions": sorted(
                tp.partition
                for tp in self.app.assignor.assigned_actives()
                if tp.topic == topology.topic_name(self.settings.app_id, topology.FRONTIER)
            ),
            "stale_fetches_skipped": self.fetch.stale_skipped,
            "fetches_started_at_dispatch": self.fetch.started_at_dispatch,
            "completions_at_fetch_end": c.completions_at_fetch_end,
            "duplicate_fetch_requests": self.frontier.duplicate_requests,
            # fetches in flight at an adoption whose pages were stored already
            "adopted_stored": self.frontier.adopted_stored,
            # fetches in flight at an adoption whose completion came after it (in the
            # grace: Frontier.adopt), so not done again
            "adopted_completed": self.frontier.adopted_completed,
            "queued": self.frontier.queued,
            "fetched": c.outcomes.get("fetched", 0),
            "pages_stored": c.pages_stored,
            "in_flight": c.fetch_in_flight,
            "outcomes": dict(c.outcomes),
            "reasons": dict(c.tally.reasons),
            "dead_letters": c.dead_letters,
            "rewinds": c.rewinds,
            # [topic, partition, offset] after the last message this worker delivered
            # to / handled from a consumed topic (multiworker.globally_idle)
            "delivered_upto": [[t, p, o] for (t, p), o in self.ctx.producer.delivered_upto.items()],
            "handled_upto": [[t, p, o] for (t, p), o in c.handled_upto.items()],
            # [topic, partition, offset] of the consumer's commits: handled too
            "committed_upto": committed_offsets(self.app, self._consumed_topics),
            "last_handled_at": c.last_handled_at,
            # link-extract found no body in the hand-off cache: each page fetched again
            "handoff_misses": self.ctx.handoff.stats.missed,
            "handoff_evicted": self.ctx.handoff.stats.evicted,
            # offsets a fetch skipped that the refetch gave up on (patches.
            # gap_hold): each a message that would have been lost; the commit waits
            "skipped_offsets": getattr(self.app.consumer, "_seine_skipped", 0),
            # fetches re-done at once because they passed over offsets (refetch_skips)
            "refetches": getattr(self.app.consumer, "_seine_refetches", 0),
            # commits held because a message before them was not handled (guard_commits)
            "commits_held": getattr(self.app.consumer, "_seine_commits_held", 0),
            # partitions whose records are not all handed to their agent (a stalled
            # crawl's supervisor prints them: where did the unhandled message stop?)
            "lagging": lagging_partitions(self.app, self._consumed_topics),
            "at": time.time(),
            "stopping_until": self.stopping_until,
            "pid": os.getpid(),
        }

    @property
    def _consumed_topics(self) -> list[str]:
        unconsumed = (topology.CRAWL_LOG, topology.DEAD_LETTERS)
        return [
            topology.topic_name(self.settings.app_id, spec)
            for spec in topology.TOPICS
            if spec not in unconsumed
        ]

    def drain(self) -> None:
        """Stop dispatching fetches and let what is in flight run through every stage.

        What is queued stays in the frontier's tables; once nothing is in flight,
        unsent or unhandled, the worker writes the data dir's clean-stop mark and
        stops, so a resume over the same data dir needs no reconciliation
        (streams/ops/resume.py). A second Ctrl-C, or `drain_timeout`, stops at once
        without the mark.
        """
        if self.draining_since is not None:
            log.warning("second interrupt: stopping without draining")
            self.stop(130)
            return
        print(
            "seine: draining (fetches in flight finish, nothing new starts); "
            "Ctrl-C again stops at once",
            file=sys.stderr,
            flush=True,
        )
        self.draining_since = time.monotonic()

    @property
    def dispatching(self) -> bool:
        """Whether the frontier may start fetches: not while draining or handing over."""
        return self.draining_since is None and self.handing_over_since is None

    def hand_over(self) -> None:
        """SIGTERM: leave the group once the fetches in flight are over and their pages
        and completions are on the broker, so the partitions' next owners find each
        fetch answered instead of doing it again (docs/OPERATIONS.md, "Scaling out and
        in"). Nothing new is dispatched meanwhile; what is queued stays in the tables
        for the next owner. Stopping at once, as mode does on SIGTERM, a worker kept
        dispatching while its services stopped one by one, and lost the completions
        of the fetches it started then: the next owner did them again (bench/faults.py,
        scenario rebalance). Bounded by `HAND_OVER_TIMEOUT`; a second SIGTERM stops
        at once."""
        if self.handing_over_since is not None:
            log.warning("second SIGTERM: stopping without handing over")
            self.stop(0)
            return
        log.info("SIGTERM: handing over (fetches in flight finish, nothing new starts)")
        self.handing_over_since = time.monotonic()

    def handed_over(self) -> bool:
        """No fetch in flight, and their results (pages, completions) all sent: once
        the producer has them acknowledged (`create_app`'s watch flushes it), the
        worker may leave. Not the producer's count of messages unacknowledged: the
        other stages keep producing, and a busy worker never saw it at 0."""
        return not (self.ctx.counters.fetch_in_flight or self.fetch.out.pending)

    def drained(self) -> bool:
        """Nothing in flight, unsent or unhandled: every link is in the frontier's tables."""
        ctx = self.ctx
        if ctx.counters.fetch_in_flight or self.frontier.in_flight or ctx.producer.pending():
            return False
        if any(box.pending for box in ctx.outboxes):
            return False
        return ctx.all_handled()

    def stop(self, code: int = 0) -> None:
        """Ask the worker to shut down (from inside the loop)."""
        self.exit_code = code
        self.finished = True
        if self.worker is not None:
            self.worker._schedule_shutdown(signal.SIGTERM)
