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

# With SEINE_TEST_DROP_RECOVERY=<changelog topic suffix>:<partition> set, the first
# fetch response holding records of that changelog partition after Faust's table
# recovery sought it (the active recovery's seek, for a partition with records left)
# is swallowed whole, with aiokafka's fetch position moved past it: what
# faust-streaming 0.15.3's `Consumer.getmany` does to records aiokafka handed over
# while the flow is stopped (streams/kafka/patches/recovery_kick.py). Faust's recovery
# then waits for those records for ever unless something reads them again.
_DROP = os.environ.get("SEINE_TEST_DROP_RECOVERY", "")

if _DROP:
    import sys
    from typing import Any

    from aiokafka.consumer import fetcher as _fetcher
    from faust.tables.recovery import Recovery

    _suffix, _drop_partition = _DROP.rsplit(":", 1)
    #: "armed" once recovery sought the partition, "done" once its records were dropped
    _drop_state: dict[str, bool] = {"armed": False, "done": False}

    def _is_target(topic: str, partition: int) -> bool:
        return topic.endswith(_suffix) and partition == int(_drop_partition)

    _original_seek_offsets = Recovery._seek_offsets

    async def _seek_offsets(self: Any, consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        await _original_seek_offsets(self, consumer, tps, offsets, title)
        if title != "active" or _drop_state["done"]:
            return
        for tp in tps:
            high = self.active_highwaters.get(tp)
            if _is_target(tp.topic, tp.partition) and high is not None and high > offsets[tp]:
                _drop_state["armed"] = True

    Recovery._seek_offsets = _seek_offsets  # type: ignore[method-assign]

    _original_unpack = _fetcher.PartitionRecords._unpack_records

    def _unpack_dropping(self: Any) -> Any:
        dropped: list[int] = []
        for record in _original_unpack(self):
            if (
                _drop_state["armed"]
                and not _drop_state["done"]
                and _is_target(record.topic, record.partition)
            ):
                dropped.append(record.offset)
                continue
            yield record
        if dropped:
            _drop_state["done"] = True
            print(
                f"faultinject: dropped records {dropped[0]}..{dropped[-1]} of "
                f"{_suffix}[{_drop_partition}] in recovery",
                file=sys.stderr,
                flush=True,
            )

    _fetcher.PartitionRecords._unpack_records = _unpack_dropping  # type: ignore[method-assign]

# With SEINE_TEST_STALE_MESSAGE=<topic suffix>:<partition>:<offset> set, the first
# message made of that record carries the generation before the consumer's: Faust's
# stream then passes over it unacknowledged (faust-streaming 0.15.3, `Stream.
# __anext__`, a message of an older generation after a rebalance), the way a
# restarted worker of a multi-worker crawl lost one content-dedup message. The
# records after it are handled, so only the held commit says it is missing.
_STALE = os.environ.get("SEINE_TEST_STALE_MESSAGE", "")

if _STALE:
    import sys
    from typing import Any

    from faust.transport.drivers import aiokafka as _driver

    _stale_suffix, _stale_partition, _stale_offset = _STALE.rsplit(":", 2)
    _stale_done: list[int] = []
    _original_to_message = _driver.Consumer._to_message

    def _to_message(self: Any, tp: Any, record: Any) -> Any:
        message = _original_to_message(self, tp, record)
        if (
            not _stale_done
            and record.topic.endswith(_stale_suffix)
            and record.partition == int(_stale_partition)
            and record.offset == int(_stale_offset)
        ):
            _stale_done.append(record.offset)
            message.generation_id = (message.generation_id or 0) - 1
            print(
                f"faultinject: {record.topic}[{record.partition}] offset {record.offset} "
                "made stale",
                file=sys.stderr,
                flush=True,
            )
        return message

    _driver.Consumer._to_message = _to_message  # type: ignore[method-assign]
