"""The broker a command runs against: an embedded Tansu, a local Apache Kafka under
the data dir, or a given cluster (`--bootstrap`), each with its tuning and, where
topics were lost, the resume plan pushed before the workers start."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams.settings import Settings

#: What `seine crawl` sets for the embedded broker (docs/decisions/0030). Its workers
#: join no consumer group (`members`, set below): Tansu answers a join only after half
#: the session timeout, so they share the partitions by index instead (0045), and no
#: group timeout applies.
EMBEDDED_TUNING: dict[str, Any] = {
    # Tansu holds an empty fetch for the whole wait: keep hops short.
    "fetch_max_wait_ms": 20,
    # Tansu's highwaters lag offsets it has served (see Settings): local tables win.
    "recovery_consistency_check": False,
    # Every worker of an embedded broker shares one machine: a standby there would
    # double the table work (Settings.kafka.standby_replicas) and survive nothing more.
    "standby_replicas": 0,
}


#: Consumer-group timeouts for `seine crawl --broker kafka` (a one-node Apache Kafka
#: on this machine): a clean stop leaves the group at once, so only a killed worker
#: waits out the session timeout; Faust's recovery checks stay on (Kafka's
#: highwaters are exact).
LOCAL_KAFKA_TUNING: dict[str, Any] = {
    "session_timeout": 10.0,
    "rebalance_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "standby_replicas": 0,
}


def _tuned(settings: Settings, tuning: dict[str, Any]) -> dict[str, Any]:
    """The tuning values for settings the user left at their defaults."""
    now, defaults = settings.flat(), Settings().flat()
    return {name: value for name, value in tuning.items() if now[name] == defaults[name]}


def _resume_from_tables(settings: Settings) -> Any:
    """Prepare a data dir whose tables outlived their broker's topics: make the local
    tables authoritative and work out what the lost stage messages carried."""
    from streams.kafka.admin import forget_changelog_offsets
    from streams.ops.resume import plan_resume

    for worker_data in [Path(settings.data_dir), *Path(settings.data_dir).glob("worker-*")]:
        forget_changelog_offsets(worker_data)
    return plan_resume(settings.data_dir, settings.kafka.partitions)


def _push_plan(effective: Settings, plan: Any) -> None:
    from streams.kafka.admin import ensure_topics
    from streams.ops.resume import push_resume

    ensure_topics(effective)
    push_resume(effective.kafka.bootstrap, effective.app_id, plan, effective.kafka.compression)
    print(
        f"seine: resuming an interrupted crawl: {plan.lost_count} of {plan.seen} seen "
        f"URLs re-queued, {plan.link_count} links of {plan.stored_pages} stored pages "
        f"re-sent to url-filter ({plan.seconds:.1f}s)",
        file=sys.stderr,
        flush=True,
    )


@contextlib.contextmanager
def broker_for(settings: Settings, *, workers: int = 1) -> Iterator[Settings]:
    """Yield settings pointing at a broker: the given one, or one started for the
    duration (Settings.kafka.broker) for `workers` workers, with the topics'
    replication resolved."""
    from streams.kafka.admin import resolve_replication

    if settings.kafka.bootstrap:
        from streams.kafka.admin import ensure_topics

        effective = resolve_replication(settings)
        ensure_topics(effective)  # a topic with another partition count: one line, exit 2
        yield effective
        return
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    if settings.kafka.broker == "kafka":
        with _local_kafka(settings) as effective:
            yield effective
        return
    from streams.kafka.broker import EmbeddedBroker

    # A fresh in-memory broker has empty changelogs and no stage messages.
    plan = _resume_from_tables(settings)
    # Every worker is this command's: they share the partitions by index, no join.
    tuning = {**EMBEDDED_TUNING, "members": workers}
    with EmbeddedBroker(log_path=Path(settings.data_dir) / "broker.log") as broker:
        effective = resolve_replication(
            settings.with_overrides(bootstrap=broker.bootstrap, **_tuned(settings, tuning))
        )
        if plan is not None:
            _push_plan(effective, plan)
        yield effective


@contextlib.contextmanager
def _local_kafka(settings: Settings) -> Iterator[Settings]:
    """A one-node Apache Kafka under DATA_DIR/kafka for the crawl. Its topics stay on
    disk, so a rerun resumes from Kafka itself: the changelogs restore the tables and
    the stage topics still hold what was between stages. Only a new node under old
    tables (the dir's first Kafka run) needs the reconciliation Tansu always needs."""
    from streams.kafka.admin import resolve_replication
    from streams.kafka.local import KafkaCluster, KafkaError

    cluster = KafkaCluster(Path(settings.data_dir) / "kafka", 1)
    try:
        cluster.start()
    except KafkaError as exc:
        raise ValueError(str(exc)) from None
    try:
        plan = _resume_from_tables(settings) if cluster.fresh else None
        effective = resolve_replication(
            settings.with_overrides(
                bootstrap=cluster.bootstrap, **_tuned(settings, LOCAL_KAFKA_TUNING)
            )
        )
        if plan is not None:
            _push_plan(effective, plan)
        yield effective
    finally:
        cluster.stop()
