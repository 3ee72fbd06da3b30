"""Patches of faust-streaming's and aiokafka's private members, one per module, each
saying why it exists, on which broker it is still needed and the versions it was
checked on:

- `fetch_max_wait`: the consumer's fetch wait comes from Settings (Faust hard-codes
  1.5 s, which Tansu waits in full on every quiet hop);
- `highwaters`: Faust's highwater lookups checked against a fetch (Tansu lists a
  partition's end short of its last batch); Tansu only;
- `commit_guard`: a commit never passes an offset the worker did not handle (three
  holes in Faust's own check); both brokers;
- `gap_hold`: offsets a fetch passed over hold the commit back instead of counting
  as handled; both brokers;
- `refetch`: such a fetch is re-done at once; Tansu only;
- `table_start`: the table manager starts without Faust's one-second sleep (every
  table is declared before the app starts); both brokers;
- `worker_close`: mode's Worker closes its loop without its one-second sleep; both
  brokers;
- `recovery_kick`: a table recovery that gets nothing of a changelog partition with
  records left reads it again; both brokers;
- `seek_thread`: a seek from the worker's thread leaves the fetcher's buffered records
  to the consumer's own thread (a race that killed its fetch loop); both brokers;
- `static_members`: workers of one parent share the partitions by index instead of
  joining a consumer group (Tansu's join takes half the session timeout); the
  embedded broker only.

`install` puts them in place for a worker's settings; each is installed once per
process. May import faust, mode, aiokafka, confluent_kafka and streams.core only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.kafka.patches.commit_guard import guard_commits
from streams.kafka.patches.fetch_max_wait import set_fetch_max_wait
from streams.kafka.patches.gap_hold import hold_gaps
from streams.kafka.patches.highwaters import stop_verifying_highwaters, verify_highwaters
from streams.kafka.patches.recovery_kick import kick_stalled_recovery
from streams.kafka.patches.refetch import refetch_skips
from streams.kafka.patches.seek_thread import drop_records_on_fetcher_thread
from streams.kafka.patches.static_members import assign_statically
from streams.kafka.patches.table_start import start_tables_at_once
from streams.kafka.patches.worker_close import close_loop_promptly

if TYPE_CHECKING:
    from streams.settings import KafkaSettings


def install(kafka: KafkaSettings) -> None:
    """Every patch, set for the cluster `kafka` describes (`tansu_fixes`: Tansu's)."""
    set_fetch_max_wait(kafka.fetch_max_wait_ms)
    guard_commits()
    hold_gaps()
    start_tables_at_once()
    close_loop_promptly()
    kick_stalled_recovery(kafka.recovery_kick_after)
    drop_records_on_fetcher_thread()
    refetch_skips(enabled=kafka.tansu_fixes)
    assign_statically(kafka.members, kafka.member_index)
    if kafka.tansu_fixes:
        verify_highwaters(kafka.bootstrap)
    else:
        stop_verifying_highwaters()
