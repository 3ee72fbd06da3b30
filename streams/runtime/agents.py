"""A stage's Faust agent: the loop every stage shares around its step.

A step is a plain function of (partition, decoded record, outbox); the agent takes
what has queued up as one unit, decodes and screens each message (over-size,
not its topic's schema: a dead letter with the reason), runs the step, flushes the
outbox once for the unit, and counts. A step that raises costs its message, which
goes to the dead letters; the stage carries on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust

from streams import codec
from streams.codec.seeds import InvalidSeed
from streams.core.poison import oversized, screen
from streams.runtime.events import set_current_event
from streams.stages.base import Stage
from streams.stages.context import BATCH_FIELD, StageContext
from topology import TopicSpec

log = logging.getLogger("seine")


def declare_agent(app: faust.App, ctx: StageContext, spec: TopicSpec, stage: Stage) -> None:
    """Declare the agent of one stage over its topic `spec`: decode, step, flush,
    count; errors → dead letters."""
    settings, limits = ctx.settings, ctx.limits
    name, step, decode, count_items = stage.name, stage.step, stage.decode, stage.count_items
    # a compacted topic's stage (the indexer) reads (key, value); a None value is a
    # tombstone, handed on as None
    keyed = bool(getattr(stage, "keyed", False))
    out = ctx.outbox()
    items_fields = (
        ()
        if not count_items
        else ("new_urls", "completions")
        if spec.schema == "frontier_event"
        else (BATCH_FIELD[spec.schema],)
        if spec.schema in BATCH_FIELD
        else ()
    )

    async def loop(stream: Any) -> None:
        # Take whatever has queued up (up to max_batch_events) and handle it as one
        # unit: the outbox then sends one message per (topic, partition) for all
        # of it, so under load the messages per page fall instead of rising.
        async for events in stream.take_events(
            settings.worker.max_batch_events, within=settings.worker.batch_linger
        ):
            now_ms = time.time() * 1000.0
            cpu_before = time.thread_time()
            for event in events:
                ctx.counters.observe_latency(spec.name, now_ms - event.message.timestamp * 1000)
                # Table writes go to the changelog partition of the *current event*;
                # Faust sets it per stream item, so set it per taken event here.
                set_current_event(event)
                await handle_one(event)
            try:
                await out.flush()
            finally:
                ctx.counters.done[spec.name] += len(events)
                for event in events:
                    message = event.message
                    ctx.counters.handled(message.topic, message.partition, message.offset)
                # This thread runs every agent: its CPU time across one unit of work
                # is that stage's (what other tasks run while it awaits is counted
                # too; the stages' own awaits rarely yield).
                ctx.counters.stage_cpu[name] += time.thread_time() - cpu_before

    async def handle_one(event: Any) -> None:
        partition = event.message.partition
        try:
            value = event.value
            if keyed and value is None:
                record: Any = (event.key, None)
            elif decode:
                too_big = oversized(len(value), limits) if value is not None else None
                if too_big is not None:
                    await ctx.dead_letter(name, event, too_big)
                    return
                record = codec.decode(spec.schema, value)
                ctx.counters.stage_items[name] += sum(
                    len(record.get(name) or ()) for name in items_fields
                )
                record, refusals = screen(spec.schema, record, limits)
                for refusal in refusals:
                    await ctx.dead_letter(
                        name,
                        event,
                        refusal.reason,
                        value=codec.encode(spec.schema, refusal.record),
                    )
                if record is None:
                    return
                if keyed:
                    record = (event.key, record)
            else:
                record = value
            result = step(partition, record, out)
            if asyncio.iscoroutine(result):
                await result
        except (codec.DecodeError, InvalidSeed) as exc:
            await ctx.dead_letter(name, event, str(exc))
        except Exception as exc:  # a stage survives any message
            log.exception("%s failed on a message", name)
            # a stage may say what the dead letter should keep instead of the
            # message as it came (link-extract: the batch with the bodies it took
            # from the hand-off cache)
            kept = getattr(exc, "dead_letter_value", None)
            await ctx.dead_letter(
                name,
                event,
                f"{type(exc).__name__}: {exc}",
                value=kept if isinstance(kept, bytes) else None,
            )

    loop.__name__ = loop.__qualname__ = name.replace("-", "_")
    app.agent(ctx.topic(spec), name=name)(loop)
