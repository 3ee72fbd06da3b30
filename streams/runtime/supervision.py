"""The worker's own timers: when it stops, and what it does meanwhile to keep going.

Seeds given on the command line are sent once the app runs; the producer's delivery
reports are served; a partition whose consumer stood still short of its end is read
again; a cluster gone for `broker_lost_timeout` stops the worker with one line; and
`watch` ends the run: idle with --until-idle, drained after Ctrl-C (with the data
dir's clean mark), handed over after SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import topology
from streams.core import allocator
from streams.core.stall import StuckPartitions, held_commit
from streams.kafka.consumer_state import lagging_partitions, rewind
from streams.kafka.producer import hook_into_commits
from streams.ops.exits import EXIT_BROKER_LOST
from streams.ops.multiworker import IDLE_SECONDS, write_status
from streams.ops.resume import CLEAN_MARK, clear_marks
from streams.runtime.seine_app import SeineApp

log = logging.getLogger("seine")

#: Seconds a worker stopped with SIGTERM waits at most for its fetches in flight and
#: their results (`SeineApp.hand_over`); one still running then is done again by the
#: partition's next owner.
HAND_OVER_TIMEOUT = 10.0

#: Seconds a worker that lost its cluster waits for its own stop before it exits.
LOST_BROKER_EXIT_AFTER = 15.0


class Supervisor:
    """The timers and start-up task of one worker (`install` registers them)."""

    def __init__(self, seine: SeineApp, tables: Iterable[Any]) -> None:
        self.seine = seine
        self.app = seine.app
        self.ctx = seine.ctx
        self.settings = seine.settings
        self.tables = list(tables)
        self.status_path = Path(self.settings.status_file) if self.settings.status_file else None
        self.stuck = StuckPartitions(self.settings.kafka.stuck_rewind_after)
        #: the watch a SIGTERM started (`hand_over`), referenced until it is done
        self._watching: asyncio.Future[None] | None = None
        #: the commit at idle (`settle_commits`) in progress, if one is
        self._settling: asyncio.Future[None] | None = None

    def install(self) -> None:
        app = self.app
        app.timer(interval=0.1)(self.serve_producer_deliveries)
        app.task(self.push_initial_seeds)
        app.timer(interval=1.0)(self.rewind_stuck_partitions)
        app.timer(interval=5.0)(self.watch_brokers)
        app.timer(interval=0.25)(self.watch)
        if self.settings.worker.malloc_trim_interval > 0:
            app.timer(interval=self.settings.worker.malloc_trim_interval)(self.trim_malloc)

    async def trim_malloc(self) -> None:
        """Hand glibc's free pages back to the kernel (streams/core/allocator.py), in
        a thread: the event loop need not wait for the walk over the arenas."""
        took = await asyncio.get_running_loop().run_in_executor(None, allocator.trim)
        if took > 0.05:
            log.debug("malloc_trim took %.0f ms", took * 1000)

    async def serve_producer_deliveries(self) -> None:
        self.ctx.producer.poll()
        for table in self.tables:
            table.apply_persisted_offsets()

    async def push_initial_seeds(self) -> None:
        seine, ctx = self.seine, self.ctx
        # the status goes out before each commit, so a worker killed after a commit
        # leaves a status counting every message that commit covers: its successor
        # skips them, and the parent counts them from that status (its "ghost")
        hook_into_commits(self.app, ctx.producer, self.commit_status, self.note_sent)
        loop = asyncio.get_running_loop()
        if seine.drain_on_sigint:
            # replaces mode's handler (installed before the app's tasks start)
            loop.add_signal_handler(signal.SIGINT, seine.drain)
        loop.add_signal_handler(signal.SIGTERM, self.hand_over)  # mode's, likewise
        clear_marks(self.settings.data_dir)
        for url in seine.initial_seeds:
            await ctx.send(topology.SEEDS, 0, url.encode("utf-8"))

    def hand_over(self) -> None:
        """SIGTERM (`SeineApp.hand_over`), then the watch at once: an idle worker, the
        end of every `--until-idle` crawl, is handed over now, not at the next tick
        (up to 0.25 s later)."""
        self.seine.hand_over()
        self._watching = asyncio.ensure_future(self.watch())

    async def rewind_stuck_partitions(self) -> None:
        """Read again a partition whose consumer stopped short while nothing else
        happened here: a message dropped between the fetch and the agent otherwise
        waits for a rebalance, and the crawl for it (streams/core/stall.py)."""
        settings, app = self.settings, self.app
        if not settings.kafka.stuck_rewind_after or app.rebalancing:
            return
        c = self.ctx.counters
        activity = (tuple(sorted(c.sent.items())), tuple(sorted(c.done.items())))
        entries = lagging_partitions(app, self.seine._consumed_topics)
        for topic, partition, offset in self.stuck.observe(time.monotonic(), entries, activity):
            here = (topic, partition)
            where = [e for e in entries if (e.get("topic"), e.get("partition")) == here]
            log.warning(
                "%s[%s] stood still for %ss short of what it should have handed on "
                "(%s): reading it again from offset %s",
                topic,
                partition,
                settings.kafka.stuck_rewind_after,
                where,
                offset,
            )
            c.rewinds += 1
            await rewind(app, topic, partition, offset)

    async def watch_brokers(self) -> None:
        """Stop with one line when the cluster has been gone for broker_lost_timeout:
        librdkafka would retry for ever, flooding the log, while nothing moves."""
        seine, producer = self.seine, self.ctx.producer
        if seine.finished or producer.brokers_down_since is None:
            return
        loop = asyncio.get_running_loop()
        down = await loop.run_in_executor(None, producer.brokers_down_for)
        if down >= self.settings.kafka.broker_lost_timeout:
            lost_broker(seine, down)
            self.write_status()  # with its stopping_until, the last before the exit

    async def watch(self) -> None:
        seine = self.seine
        if seine.on_progress is not None:
            seine.on_progress(seine)
        if self.status_path is not None:
            # the status first: a commit waits on the cluster (for ever while it is
            # gone), and a worker whose status stops is killed as hung (kill_hung);
            # the commit's hook writes the status again once it is made
            self.write_status()
            if self._settling is None or self._settling.done():
                self._settling = asyncio.ensure_future(self.settle_commits())
        if seine.handing_over_since is not None and not seine.finished:
            await self._handing_over()
            return
        if seine.draining_since is not None and not seine.finished:
            await self._draining()
            return
        if not seine.until_idle or seine.finished:
            return
        if not self.ctx.idle():
            seine.idle_since = None
            return
        now = time.monotonic()
        if seine.idle_since is None:
            seine.idle_since = now
        elif now - seine.idle_since >= IDLE_SECONDS:
            seine.stop(0)

    def note_sent(self) -> tuple[dict[str, int], dict[str, int]]:
        """Before a commit's flush: what this worker sent and handled so far
        (`commit_status`)."""
        c = self.ctx.counters
        return dict(c.sent), dict(c.done)

    def commit_status(self, noted: tuple[dict[str, int], dict[str, int]] | None) -> None:
        """After a commit's flush: every message sent before it is acknowledged, and
        what was handled before it is committed (`Counters.sent_committed` and
        `done_committed`, the larger count per topic: an overlapping commit's flush
        may end first); then the status."""
        c = self.ctx.counters
        if noted:
            # Counter's union keeps the larger count of each topic
            c.sent_committed = dict(Counter(c.sent_committed) | Counter(noted[0]))
            c.done_committed = dict(Counter(c.done_committed) | Counter(noted[1]))
        self.write_status()

    def write_status(self) -> None:
        """The worker's status file for the parent (every watch tick, and before each
        offset commit); a write that fails is logged, never fails the commit."""
        if self.status_path is None:
            return
        try:
            write_status(self.status_path, self.seine.status())
        except OSError as exc:
            log.warning("status file %s not written: %s", self.status_path, exc)

    async def settle_commits(self) -> None:
        """Commit now when this worker holds no work and a commit stands behind what
        it handed on (once a watch tick at most; a busy worker never does): its
        status then shows a partition held only by a message it never handled (the
        parent's idle check waits for those, `streams.core.stall.unfinished`), not
        one merely waiting for the commit interval, which would hold the end back."""
        if self.ctx.locally_busy() or self.app.rebalancing:
            return
        entries = lagging_partitions(self.app, self.seine._consumed_topics)
        if not any(held_commit(entry) for entry in entries):
            return
        try:
            await self.app.consumer.commit()
        except Exception as exc:  # a commit the next round makes: only the idle check waits
            log.debug("commit at idle failed: %s", exc)

    async def _handing_over(self) -> None:
        seine = self.seine
        assert seine.handing_over_since is not None
        if seine.handed_over():
            try:
                await self.ctx.producer.flush()
            except Exception:  # stopping anyway: the next owner redoes what is lost
                log.exception("SIGTERM: results of the last fetches not acknowledged")
            if seine.finished:
                return  # the other watch (SIGTERM's or the timer's) stopped it meanwhile
            log.info("SIGTERM: handed over, stopping")
            seine.stop(0)
        elif time.monotonic() - seine.handing_over_since > HAND_OVER_TIMEOUT:
            log.warning("hand-over did not finish in %ss: stopping", HAND_OVER_TIMEOUT)
            seine.stop(0)

    async def _draining(self) -> None:
        seine, settings = self.seine, self.settings
        assert seine.draining_since is not None
        now = time.monotonic()
        if not seine.drained():
            seine.drained_since = None
            if now - seine.draining_since > settings.worker.drain_timeout:
                log.warning("drain did not finish in %ss: stopping", settings.worker.drain_timeout)
                seine.stop(130)
        elif seine.drained_since is None:
            seine.drained_since = now
        elif now - seine.drained_since >= 0.5:
            await self.ctx.producer.flush()
            (Path(settings.data_dir) / CLEAN_MARK).write_text(f"{time.time()}\n")
            seine.stop(130)


def lost_broker(seine: SeineApp, down: float) -> None:
    """The cluster is gone: say so in one line and stop. The page store is closed on
    the way out; what was between stages is on the brokers (Kafka) or rebuilt by the
    resume (Tansu), so a rerun continues. A stop can itself wait on the missing
    brokers (commits, flushes), so the process exits after LOST_BROKER_EXIT_AFTER."""
    print(
        f"seine: lost the Kafka cluster at {seine.settings.kafka.bootstrap}: no broker has "
        f"answered for {down:.0f} s; stopping (run the same command again to continue)",
        file=sys.stderr,
        flush=True,
    )
    seine.stopping_until = time.time() + LOST_BROKER_EXIT_AFTER
    seine.stop(EXIT_BROKER_LOST)

    def exit_now() -> None:
        with contextlib.suppress(Exception):
            seine.store.close()
        os._exit(EXIT_BROKER_LOST)

    timer = threading.Timer(LOST_BROKER_EXIT_AFTER, exit_now)
    timer.daemon = True
    timer.start()
