"""When an otherwise idle multi-worker crawl may end: not while a worker holds a
partition at a message it never handled, or with records not handed on.

A message dropped on its way to its agent leaves the crawl's counters and offsets
balanced; only the worker's held commit shows it (`streams.core.stall.unfinished`),
and the worker's stuck-partition rewind reads it again. The parent waits for that,
for a bounded time (`UnfinishedWait`).
"""

from __future__ import annotations

import sys
from typing import Any

from streams.core.stall import rewind_offset, unfinished

#: Seconds an otherwise idle crawl waits for unfinished partitions beyond twice the
#: stuck-partition rewind's wait (`UnfinishedWait`).
UNFINISHED_GRACE = 10.0


def unfinished_partitions(statuses: list[dict[str, Any]]) -> list[str]:
    """Each partition a worker still has to hand on, or holds at a message it never
    handled (`streams.core.stall.unfinished`), as "worker-N topic[p] at offset o"."""
    return [
        f"worker-{index} {entry['topic']}[{entry['partition']}] at offset {rewind_offset(entry)}"
        for index, status in enumerate(statuses)
        for entry in unfinished(status.get("lagging") or [])
    ]


class UnfinishedWait:
    """How long an otherwise idle crawl waits for its unfinished partitions.

    A message dropped on its way to its agent leaves the crawl's counters and
    offsets balanced: only the worker's held commit shows it, and the worker's
    stuck-partition rewind reads it again once the partition stood still for
    `stuck_rewind_after`. The crawl waits for that, and for `patience` seconds at
    most: a partition that never settles (a broker's odd watermark) must not hold
    the crawl for ever, so it then ends with a warning naming them.
    """

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self._since: float | None = None
        self._warned = False

    def holds(self, now: float, unfinished: list[str]) -> bool:
        """Should the crawl not end yet? Prints the warning when patience runs out."""
        if not unfinished:
            self._since, self._warned = None, False
            return False
        if self._since is None:
            self._since = now
        if now - self._since < self.patience:
            return True
        if self._warned:  # the crawl ends within a few polls: one line is enough
            return False
        self._warned = True
        print(
            f"seine: WARNING: ending the crawl with partitions not handled to the end "
            f"after {self.patience:.0f}s: {', '.join(unfinished)}",
            file=sys.stderr,
            flush=True,
        )
        return False
