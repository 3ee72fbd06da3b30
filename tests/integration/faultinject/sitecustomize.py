"""Loaded by every Python process of a test crawl that puts this directory on
PYTHONPATH: with SEINE_TEST_SKIP_RECORD=topic:partition:offset set, aiokafka's
fetcher passes over that record the first time a fetch response holds it, as a
fetch that skipped an offset did in multi-worker crawls on the embedded broker
(docs/ARCHITECTURE.md, "Commits never pass an unhandled message"). The fetch
position moves past it all the same, so only a consumer that notices the jump
reads it again.
"""

from __future__ import annotations

import os

_WANTED = os.environ.get("SEINE_TEST_SKIP_RECORD", "")

if _WANTED:
    from typing import Any

    from aiokafka.consumer import fetcher

    _topic, _partition, _offset = _WANTED.rsplit(":", 2)
    _skipped: list[int] = []
    _original = fetcher.PartitionRecords._unpack_records

    def _unpack_records(self: Any) -> Any:
        for record in _original(self):
            if (
                not _skipped
                and record.topic == _topic
                and record.partition == int(_partition)
                and record.offset == int(_offset)
            ):
                _skipped.append(record.offset)
                continue
            yield record

    fetcher.PartitionRecords._unpack_records = _unpack_records  # type: ignore[method-assign]
