"""The frontier and fetch stages of one worker, as the one loop they are.

A host's pace is its cycle: dispatch, fetch, completion back at the frontier. Both
hops go through the broker only when they must (topology.LOCAL_PATHS): the frontier
hands each request it dispatches to this worker's fetch stage, which starts it at
once if it holds the fetch partition, and a fetch's completion is applied by this
worker's frontier at its end, once its page is acknowledged. The frontier topic still
carries new URLs, ticks, and the completions of a rebalance or a drain; the fetch
topic the requests not started here for want of a fetch slot. A request dispatched
during a rebalance waits here for its end (`CrawlLoop.start_deferred`).

Also the worker's side of a rebalance for these two stages (fetches of revoked
partitions cancelled, the frontier forgetting what memory held of them) and the timer
that wakes sleeping hosts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust

import topology
from streams.core.freshness import RevisitSchedule
from streams.core.frontier import Frontier
from streams.core.records import FetchRequest, FrontierEvent
from streams.kafka.producer import Deliveries
from streams.runtime.events import TICK, LocalEvent, reset_current_event, set_current_event
from streams.runtime.seine_app import SeineApp
from streams.stages import frontier
from streams.stages.context import Outbox, StageContext
from streams.stages.fetch import FetchStage
from streams.store.pagestore import PageStore
from streams.store.storeset import held_anywhere, stored_anywhere

log = logging.getLogger("seine")


class CrawlLoop:
    """The frontier's step, the completions applied at a fetch's end, and the
    rebalance hooks and wake-up timer of the two stages, for one worker. It is the
    frontier stage (streams.stages.base.Stage); `FetchStage` is the fetch stage."""

    name = "frontier"
    decode = True
    count_items = True

    def __init__(
        self,
        seine: SeineApp,
        tables: dict[str, Any],
        revisits: RevisitSchedule,
    ) -> None:
        self.seine = seine
        self.app: faust.App = seine.app
        self.ctx: StageContext = seine.ctx
        self.settings = seine.settings
        self.frontier: Frontier = seine.frontier
        self.fetch: FetchStage = seine.fetch
        self.store: PageStore = seine.store
        # An adopted fetch in flight, or a queued hand-off refetch, whose page is in
        # this worker's store or in the partition's previous owner's is not done again.
        self.frontier.stored_since = stored_anywhere(self.store, seine.siblings)
        # A page queued a second time (a kill kept the queue's record of an enqueue
        # and lost the registry's) is not fetched if a page store holds it.
        self.frontier.fetched_already = held_anywhere(self.store, seine.siblings)
        self.tables = tables
        self.revisits = revisits
        self.frontier_topic = topology.topic_name(self.settings.app_id, topology.FRONTIER)
        self.fetch_topic = topology.topic_name(self.settings.app_id, topology.FETCH)
        #: Partitions a tick was sent to and not handled yet (one at a time each).
        self.ticks_pending: set[int] = set()
        #: When each partition was last ticked for its leases.
        self.lease_ticks: dict[int, float] = {}
        self.completion_outbox = self.ctx.outbox()
        #: Requests the frontier dispatched while the group rebalanced, started here
        #: once it is over (`start_deferred`) instead of going through the fetch topic.
        self.deferred: list[tuple[int, FetchRequest]] = []
        self.deferred_outbox = self.ctx.outbox()

    def install(self) -> None:
        """Hook the loop into the app: the local completion path, the fetch results'
        flusher, the rebalance signals, the wake-up timer and the busy check."""
        app = self.app
        self.fetch.out.apply_frontier = self.complete_at_fetch_end
        app.task(self.flush_fetch_results)
        app.on_partitions_revoked.connect(self.on_partitions_revoked)  # type: ignore[arg-type]
        app.on_partitions_assigned.connect(self.on_partitions_assigned)  # type: ignore[arg-type]
        app.timer(interval=0.02)(self.wake_sleeping_hosts)
        self.ctx.busy_checks.append(lambda: bool(self.unadopted_partitions()))
        self.ctx.busy_checks.append(lambda: bool(self.deferred))

    async def apply_frontier_event(self, partition: int, event: FrontierEvent, out: Outbox) -> None:
        ctx, settings, tables = self.ctx, self.settings, self.tables
        handled_at = time.time()
        for completion in event["completions"]:
            ctx.counters.host_cycle.observe(
                handled_at,
                completion.get("dispatched_at", 0.0),
                completion["finished_at"],
                completion["elapsed_ms"],
            )
        dispatched: list[FetchRequest] = []
        written = Deliveries()
        with ctx.producer.track_changelogs(written):
            frontier.handle(
                partition,
                event,
                self.frontier,
                tables["hosts"].items(),
                out,
                tables["done"],
                self.revisits,
                tables["revisits"].items() if settings.crawl.recrawl else (),
                dispatch=self.seine.dispatching,
                registry=tables["seen"],
                dispatched=dispatched,
            )
        if dispatched:
            # A request starts only once the table writes naming its dispatch are on
            # the broker: a kill then leaves a successor whose tables know of every
            # request the web saw, and it redoes at most the one in flight per host,
            # not the fetches whose record was still lingering in the producer.
            paused = time.thread_time()
            await ctx.producer.wait(written)
            # what other tasks ran meanwhile is theirs, not the frontier's
            ctx.counters.stage_cpu["frontier"] -= time.thread_time() - paused
        for request in dispatched:
            # started here at once, after the rebalance, or sent through the fetch topic
            if self.app.rebalancing:
                self.deferred.append((partition, request))
            elif not await self.fetch.start_dispatched(partition, request):
                out.add(topology.FETCH, partition, request)

    async def step(self, partition: int, event: FrontierEvent, out: Outbox) -> None:
        """The frontier agent's step."""
        if event["tick"]:
            self.ticks_pending.discard(partition)
        await self.apply_frontier_event(partition, event, out)

    async def complete_at_fetch_end(self, partition: int, event: FrontierEvent) -> bool:
        """Apply a frontier event of the fetch stage (its completions; their pages are
        acknowledged) here at once instead of sending it, when this worker's frontier
        holds the partition (it does: the topics are co-partitioned): the hosts' next
        fetches are dispatched, and started (`FetchStage.start_dispatched`), without
        the completions' way through the broker, Faust's consumer and the frontier
        agent's turn. False (then the event is sent) during a rebalance or a drain,
        before the frontier has adopted the partition, or if applying failed.

        The table writes go to the partition's changelogs, as the agent's would, and
        they are the completions' record: the message would have been produced in the
        same instant, so a kill that loses those writes would mostly have lost it too,
        and its successor re-dispatches what the tables say was in flight."""
        ctx = self.ctx
        if (
            self.app.rebalancing
            or not self.seine.dispatching
            or partition not in self.fetch.local_partitions
            or not self.frontier.knows_partition(partition)
        ):
            return False
        cpu_before = time.thread_time()
        standin = LocalEvent(self.frontier_topic, partition)
        token = set_current_event(standin)
        try:
            local_event: FrontierEvent = {
                "new_urls": [],
                "completions": event["completions"],
                "tick": False,
            }
            await self.apply_frontier_event(partition, local_event, self.completion_outbox)
            await self.completion_outbox.flush()
        except Exception:  # sent instead; the agent applies what is still to apply
            log.exception("frontier: completions at a fetch's end failed")
            return False
        finally:
            reset_current_event(token)
            ctx.counters.stage_cpu["frontier"] += time.thread_time() - cpu_before
        ctx.counters.completions_at_fetch_end += len(event["completions"])
        return True

    async def flush_fetch_results(self) -> None:
        """Fetches finish one by one; send their results in coalesced batches."""
        ctx = self.ctx
        while not self.app.should_stop:
            await asyncio.sleep(self.settings.worker.batch_linger)
            out = self.fetch.out
            cpu_before, elsewhere_before = time.thread_time(), out.cpu_elsewhere
            await out.flush()
            ctx.counters.stage_cpu["fetch"] += (time.thread_time() - cpu_before) - (
                out.cpu_elsewhere - elsewhere_before
            )

    async def start_deferred(self) -> None:
        """Start the requests dispatched while the group rebalanced, now that it is over.

        A request sent to the fetch topic during a rebalance is read only after it, by
        whoever then holds the partition; once (the fault test on Apache Kafka) this
        worker held the partition after and never read it, and the two hosts waiting
        for it stood still until the fetch's lease ran out (120 s). Held here, a
        request starts if the frontier still waits for that very dispatch in a
        partition this worker holds (through the topic when no fetch slot is free);
        any other is dropped: its host went with a revoked partition, and whoever
        adopts the host does that fetch again (`Frontier.adopt`)."""
        deferred, self.deferred = self.deferred, []
        out = self.deferred_outbox
        for partition, request in deferred:
            if not self.frontier.is_current(request["host"], request["dispatched_at"]):
                continue
            # the revisit record the start reads lies in the request's partition
            token = set_current_event(LocalEvent(self.frontier_topic, partition))
            try:
                if not await self.fetch.start_dispatched(partition, request):
                    out.add(topology.FETCH, partition, request)
            finally:
                reset_current_event(token)
        await out.flush()

    def unadopted_partitions(self) -> list[int]:
        """Frontier partitions this worker was assigned but has not adopted yet.

        The frontier rebuilds a partition's schedule from its tables on the first event
        of that partition; after a restart or a rebalance, hosts with queued URLs get
        no event unless someone sends one, so a tick goes to each such partition.
        """
        if self.app.rebalancing:
            return []
        return [
            tp.partition
            for tp in self.app.assignor.assigned_actives()
            if tp.topic == self.frontier_topic and not self.frontier.knows_partition(tp.partition)
        ]

    async def on_partitions_revoked(self, sender: Any, *args: Any, **_: Any) -> None:
        """Politeness through a rebalance: fetches of revoked partitions stop before
        the group moves them, and the frontier forgets what memory held of them, so
        whoever is assigned them next (this worker too) adopts them from the tables.
        Faust revokes every partition at each rebalance (eager protocol), so a fetch
        in flight then is done again: counted by bench/faults.py and its test."""
        revoked: set[Any] = args[0]
        fetches = {tp.partition for tp in revoked if tp.topic == self.fetch_topic}
        self.fetch.forget_partitions(fetches)
        self.deferred = [(p, request) for p, request in self.deferred if p not in fetches]
        cancelled = await self.fetch.cancel(fetches)
        for tp in revoked:
            if tp.topic == self.frontier_topic:
                self.frontier.forget(tp.partition)
                self.ticks_pending.discard(tp.partition)
        if cancelled:
            log.info("rebalance: %d fetches in flight cancelled, to be redone", cancelled)

    async def on_partitions_assigned(self, sender: Any, *args: Any, **_: Any) -> None:
        """The fetch partitions this worker now holds: their dispatches start here at
        once (topology.LOCAL_PATHS)."""
        assigned: set[Any] = args[0]
        self.seine.siblings.expire()  # what their previous owners stored: seen from now
        self.fetch.local_partitions |= {
            tp.partition for tp in assigned if tp.topic == self.fetch_topic
        }

    async def wake_sleeping_hosts(self) -> None:
        """Tick each partition whose earliest sleeping host is due (table writes need an
        event of the partition), and now and then one with fetches in flight, so that
        lost completions are noticed by lease expiry."""
        if not self.seine.dispatching:
            # nothing is dispatched while draining: no wake-ups needed, and nothing
            # held back starts (the tables keep those dispatches for the next run)
            self.deferred.clear()
            return
        if self.deferred and not self.app.rebalancing:
            await self.start_deferred()
        ctx, the_frontier, revisits = self.ctx, self.frontier, self.revisits
        now = time.time()
        for partition in self.unadopted_partitions():
            if partition not in self.ticks_pending:
                self.ticks_pending.add(partition)
                await ctx.send(topology.FRONTIER, partition, TICK)
        for partition in {*the_frontier.partitions(), *revisits.partitions()}:
            wake = the_frontier.next_wake(partition)
            revisit = revisits.next_wake(partition)
            due = (wake is not None and wake <= now) or (revisit is not None and revisit <= now)
            lease_check = bool(the_frontier.in_flight) and (
                now - self.lease_ticks.get(partition, 0.0) >= self.settings.fetch.fetch_lease / 4
            )
            if (due or lease_check) and partition not in self.ticks_pending:
                self.ticks_pending.add(partition)
                self.lease_ticks[partition] = now
                await ctx.send(topology.FRONTIER, partition, TICK)
