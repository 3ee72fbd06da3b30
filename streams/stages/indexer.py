"""indexer: the sink at the end of the stream. It applies each record of the
documents topic to this worker's full-text index (streams/index/fulltext.py): a
document replaces the one under its id (the record's key), a null value deletes it.

Commits are batched (`Settings.crawl.index_commit_interval`): a commit makes the
documents since the last one searchable and durable, and costs a new segment. The
worker's timer commits what waits when no document comes (`commit_due`), and the
worker commits the rest as it stops. A kill loses at most the uncommitted interval
of the index, never of the topic, which keeps every document.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from streams.core.poison import Limits, document_reason
from streams.index.fulltext import FullTextIndex
from streams.stages.context import Outbox


class IndexerStage:
    """The indexer of one worker."""

    name = "indexer"
    decode = True
    count_items = False
    #: the agent hands `step` (key, decoded value or None for a tombstone)
    keyed = True

    def __init__(
        self,
        index: FullTextIndex,
        commit_interval: float,
        clock: Callable[[], float] = time.monotonic,
        limits: Limits | None = None,
    ) -> None:
        self.index, self.commit_interval, self.clock = index, commit_interval, clock
        self.limits = limits or Limits()
        self.committed_at = clock()
        self.applied = self.deleted = 0

    def step(self, partition: int, record: tuple[bytes | None, Any], out: Outbox) -> None:
        key, document = record
        if document is not None:
            refused = document_reason(document, self.limits)
            if refused is not None:
                raise ValueError(refused)
        if key is None:
            raise ValueError("a documents record without a key (its id): nothing to index it by")
        doc_id = key.decode("utf-8", "strict")
        self.index.apply(doc_id, document)
        if document is None:
            self.deleted += 1
        else:
            self.applied += 1
        self.commit_due()

    def commit_due(self, *, force: bool = False) -> int:
        """Commit if the interval has passed since the last commit (or `force`);
        returns the changes committed."""
        now = self.clock()
        if not self.index.pending or (not force and now - self.committed_at < self.commit_interval):
            return 0
        self.committed_at = now
        return self.index.commit()

    def close(self) -> None:
        self.index.close()
