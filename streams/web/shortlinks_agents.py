"""The short-link service's agents and timers: creation, sweeps, click counting.

The ``links-create`` agent creates links and sweeps expired ones in its partition's event
order; the ``link-clicks`` agent adds windows of click messages to the counts; timers
send the buffered clicks, the sweep ticks, and apply persisted changelog offsets.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import faust.streams as faust_streams

from streams.core.partitioning import partition_for
from streams.core.shortcodes import assign_code, home_partition, sweep_expired
from streams.core.urls import canonical
from streams.web.shortlinks_base import Outcome, ShortLinksBase, log


class ShortLinkAgents(ShortLinksBase):
    """The agents and timers of :class:`streams.web.shortlinks.ShortLinks`."""

    def _create_agent(self) -> Callable[[Any], Any]:
        async def links_create(stream: Any) -> None:
            async for event in stream.events():
                try:
                    message = json.loads(event.value)
                    if message.get("op") == "sweep":
                        self._sweep(event.message.partition, float(message["at"]))
                    else:
                        self._create(event.message.partition, message)
                except Exception:  # one bad message must not stop creation
                    log.exception("links-create: cannot handle a message")

        return links_create

    def _create(self, partition: int, message: dict[str, Any]) -> None:
        url = message["url"]
        outcome = Outcome()
        if canonical(url) != url or home_partition(url, self.partitions) != partition:
            # Only our web view produces here; anything else would break the
            # one-partition-per-link invariant, so it is refused, not written.
            outcome.error = "create request on the wrong partition or not canonical"
        else:
            try:
                code, link, created = assign_code(
                    url,
                    self.codes,
                    self.urls,
                    partitions=self.partitions,
                    now=float(message["at"]),
                    expires_at=message.get("expires_at"),
                    permanent=bool(message.get("permanent", False)),
                )
                outcome = Outcome(code, link, created)
                if created:
                    self.created += 1
                    self.cache.pop(code)  # a renewed link replaces an expired cached one
            except Exception as exc:
                log.exception("links-create failed for %s", url[:200])
                outcome.error = f"{type(exc).__name__}: {exc}"
        future = self.pending.get(message.get("id", ""))
        if future is not None and not future.done():
            future.set_result(outcome)

    def _sweep(self, partition: int, now: float) -> None:
        n = self.partitions
        swept = sweep_expired(
            self.codes,
            self.urls,
            self.clicks,
            owns=lambda code: partition_for(code, n) == partition,
            now=now,
            grace=self.options.sweep_grace,
        )
        for code in swept:
            self.cache.pop(code)
        if swept:
            log.info("links: swept %d expired links from partition %d", len(swept), partition)

    def _clicks_agent(self) -> Callable[[Any], Any]:
        window = self.options.click_count_window
        batch = self.options.click_count_batch

        async def link_clicks(stream: Any) -> None:
            async for events in stream.take_events(batch, within=window):
                try:
                    await self._count_clicks(events)
                except Exception:
                    log.exception("link-clicks: cannot count a batch of click messages")

        return link_clicks

    async def _count_clicks(self, events: list[Any]) -> None:
        """Add a window of click messages to the counts: one write per code and window.

        A table write goes to the changelog partition of the current event, so the
        counts of each partition are written while one of its events is current."""
        counts: defaultdict[int, Counter[str]] = defaultdict(Counter)
        last_event: dict[int, Any] = {}
        for event in events:
            partition = event.message.partition
            try:
                clicks = json.loads(event.value)["clicks"]
                counts[partition].update(click[0] for click in clicks)
            except (ValueError, KeyError, TypeError, IndexError):
                log.warning("link-clicks: dropping a malformed click message in %d", partition)
                continue
            last_event[partition] = event
        written = 0
        for partition, per_code in counts.items():
            faust_streams._current_event.set(weakref.ref(last_event[partition]))
            for code, count in per_code.items():
                if partition_for(code, self.partitions) != partition:
                    continue  # not a code of this partition: not ours to count
                self.clicks[code] = int(self.clicks.get(code) or 0) + count
                written += 1
                if written % 64 == 0:
                    # Hundreds of table writes in one go would hold up the
                    # redirects queued behind them: let them through.
                    await asyncio.sleep(0)

    def _flush_clicks_timer(self) -> Callable[[], Any]:
        async def flush_link_clicks() -> None:
            if not self.unsent_clicks:
                return
            batches, self.unsent_clicks = self.unsent_clicks, defaultdict(list)
            for partition, clicks in batches.items():
                payload = json.dumps({"clicks": clicks}, separators=(",", ":")).encode()
                await self._send(self.clicks_topic_name, self.clicks_topic, partition, payload)

        return flush_link_clicks

    def _sweep_timer(self) -> Callable[[], Any]:
        async def sweep_expired_links() -> None:
            tick = json.dumps({"op": "sweep", "at": time.time()}).encode()
            for partition in sorted(self.owned):
                await self._send(self.create_topic_name, self.create_topic, partition, tick)

        return sweep_expired_links

    def _persisted_offsets_timer(self) -> Callable[[], Any]:
        async def persist_link_offsets() -> None:
            # streams.tables.produced.ProducedTable records delivered changelog offsets and
            # applies them when asked; the app's own timer asks only its tables.
            for table in (self.codes, self.urls, self.clicks):
                apply = getattr(table, "apply_persisted_offsets", None)
                if apply is not None:
                    apply()

        return persist_link_offsets
