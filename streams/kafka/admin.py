"""Create the crawl's topics before any client touches them.

Declaring topics up front with their partition counts matters: a broker that
auto-creates a topic on first produce gives it *its* default partition count,
and then the topic no longer matches the tables co-partitioned with it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import socket
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import topology
from streams.settings import Settings


class TopologyMismatch(ValueError):
    """An existing topic has a different partition count than the settings ask for."""


def expected_partitions(settings: Settings) -> dict[str, int]:
    return {
        topology.topic_name(settings.app_id, spec): settings.kafka.partitions if spec.scaled else 1
        for spec in topology.TOPICS + topology.SERVICE_TOPICS
    }


#: The cluster id Tansu, the embedded broker, reports (DescribeCluster).
TANSU_CLUSTER_ID = "tansu_cluster"


def _reachable(bootstrap: str, timeout: float) -> str | None:
    """None when some address of `bootstrap` takes a TCP connection, else why not
    (librdkafka would retry a refused connection until its own timeout)."""
    why = "no address given"
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or address, int(port)), timeout):
                return None
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return why


def cluster_info(bootstrap: str, timeout: float = 10.0) -> tuple[int, str]:
    """(brokers, cluster id) of the cluster at `bootstrap`; a ValueError naming it when
    it does not answer."""
    from streams.kafka.local import quiet_config

    refused = _reachable(bootstrap, min(timeout, 3.0))
    if refused is not None:
        raise ValueError(f"no Kafka broker answers at {bootstrap}: {refused}")
    admin = AdminClient(quiet_config(bootstrap))
    try:
        described = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout)
    except KafkaException as exc:
        raise ValueError(f"no Kafka broker answers at {bootstrap}: {exc.args[0]}") from None
    except concurrent.futures.TimeoutError:
        raise ValueError(
            f"no Kafka broker answers at {bootstrap} (nothing within {timeout:g} s): "
            "check --bootstrap"
        ) from None
    return len(described.nodes), str(described.cluster_id or "")


def resolve_replication(settings: Settings) -> Settings:
    """Settings fitted to the cluster they point at: the replication factor and
    min.insync.replicas the topics get (-1 means min(3, brokers) and min(2, replication
    factor)), and the Tansu workarounds off on any other broker (Settings.kafka.tansu_fixes)."""
    brokers, cluster_id = cluster_info(settings.kafka.bootstrap)
    rf = settings.kafka.replication_factor
    if rf < 1:
        rf = min(3, max(1, brokers))
    min_isr = settings.kafka.min_insync_replicas
    if min_isr < 1:
        min_isr = min(2, rf)
    if min_isr > rf:
        raise ValueError(
            f"min.insync.replicas {min_isr} is more than the replication factor {rf}: "
            "no write could ever be acknowledged"
        )
    changes: dict[str, Any] = {"replication_factor": rf, "min_insync_replicas": min_isr}
    if cluster_id != TANSU_CLUSTER_ID:
        changes["tansu_fixes"] = False
    return settings.with_overrides(**changes)


def topic_configs(settings: Settings) -> dict[str, str]:
    """Configs of every topic Seine or Faust creates, beyond partitions and replicas."""
    if settings.kafka.replication_factor > 1 and settings.kafka.min_insync_replicas > 0:
        return {"min.insync.replicas": str(settings.kafka.min_insync_replicas)}
    return {}


def _await_visible(admin: AdminClient, names: list[str], timeout: float) -> None:
    """Wait until the cluster's metadata lists every topic of `names` with its
    partitions: a topic just created may not be in a broker's metadata yet (KRaft
    propagates it asynchronously), and a consumer subscribing meanwhile would not be
    assigned it."""
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=timeout).topics
        if all(name in topics and topics[name].partitions for name in names):
            return
        if time.monotonic() > deadline:
            missing = [n for n in names if n not in topics or not topics[n].partitions]
            raise ValueError(f"topics created but not visible after {timeout:g} s: {missing[:3]}")
        time.sleep(0.1)  # polling the cluster's metadata, bounded by the deadline


def _create(admin: AdminClient, missing: list[NewTopic], timeout: float) -> list[str]:
    """Create `missing` (another worker may be creating them too) and wait until the
    cluster lists them; returns the names this call created."""
    if not missing:
        return []
    futures = admin.create_topics(missing, operation_timeout=timeout, request_timeout=timeout)
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    _await_visible(admin, [topic.topic for topic in missing], timeout)
    return created


def ensure_topics(settings: Settings, timeout: float = 20.0) -> list[str]:
    """Create missing topics; returns the names created. Raises on a partition mismatch."""
    admin = AdminClient({"bootstrap.servers": settings.kafka.bootstrap})
    metadata = admin.list_topics(timeout=timeout)
    wanted = expected_partitions(settings)
    for name, count in wanted.items():
        existing = metadata.topics.get(name)
        found = len(existing.partitions) if existing is not None and existing.error is None else 0
        if found and found != count:
            raise TopologyMismatch(
                f"topic {name} has {found} partitions, settings ask for "
                f"{count}: use --partitions {found} or a new app id"
            )
    compacted = {
        topology.topic_name(settings.app_id, spec)
        for spec in topology.TOPICS + topology.SERVICE_TOPICS
        if spec.compacted
    }
    missing = [
        NewTopic(
            name,
            num_partitions=count,
            replication_factor=settings.kafka.replication_factor,
            config={
                **({"cleanup.policy": "compact"} if name in compacted else {}),
                **topic_configs(settings),
            },
        )
        for name, count in wanted.items()
        if name not in metadata.topics or metadata.topics[name].error is not None
    ]
    return _create(admin, missing, timeout)


def ensure_changelogs(
    settings: Settings, topics: dict[str, int], timeout: float = 20.0
) -> list[str]:
    """Create the tables' changelog topics (name → partitions) that are missing,
    compacted, as Faust would; returns the names created.

    Faust creates them itself, but only as its app starts, racing the consumer that
    subscribes to them: a consumer whose metadata was fetched before a changelog
    existed sees it with 0 partitions, and each table read then fails with
    PartitionsMismatch until the next metadata refresh (minutes on Apache Kafka, which
    does not auto-create topics). Seen on a loaded 2-core machine: every seed of a
    crawl went to the dead letters."""
    admin = AdminClient({"bootstrap.servers": settings.kafka.bootstrap})
    existing = admin.list_topics(timeout=timeout).topics
    config = {"cleanup.policy": "compact", **topic_configs(settings)}
    missing = [
        NewTopic(
            name,
            num_partitions=count,
            replication_factor=settings.kafka.replication_factor,
            config=config,
        )
        for name, count in topics.items()
        if name not in existing or existing[name].error is not None
    ]
    return _create(admin, missing, timeout)


#: Where Faust's rocksdb store records the changelog offset a table partition has seen.
_FAUST_OFFSET_KEY = b"__faust\0offset__"


def forget_changelog_offsets(data_dir: str | Path) -> int:
    """Make local tables authoritative again after their changelog topics were lost.

    The embedded broker keeps topics in memory, so a new `seine crawl` over an old
    data dir finds its RocksDB tables intact but every changelog topic empty; Faust
    then refuses to start ("persisted offset higher than highwater"). The tables on
    disk are the newest state there is, so the recorded offsets are dropped and the
    worker starts from them. Returns how many table partitions were touched.
    """
    from rocksdict import Options, Rdict

    touched = 0
    for path in sorted(Path(data_dir, "faust").glob("v*/tables/*.db")):
        db = Rdict(str(path), Options(raw_mode=True))
        try:
            if db.get(_FAUST_OFFSET_KEY) is not None:
                del db[_FAUST_OFFSET_KEY]
                touched += 1
        finally:
            db.close()
    return touched


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streams.kafka.admin",
        description="Create every topic of topology/ with its partition count (SEINE_* "
        "settings apply: SEINE_BOOTSTRAP, SEINE_APP_ID, SEINE_PARTITIONS, "
        "SEINE_REPLICATION_FACTOR).",
    )
    parser.add_argument("--bootstrap", help="Kafka bootstrap HOST:PORT[,...]")
    parser.add_argument("--partitions", type=int, help="partitions of host-scoped topics")
    parser.add_argument(
        "--replication-factor", dest="replication_factor", type=int, help="replicas per topic"
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        help="keep retrying for this many seconds while the brokers do not answer",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m streams.kafka.admin`: the deployment step that creates the topics."""
    import sys
    import time

    from streams.settings import load_settings

    args = build_parser().parse_args(argv)
    settings = load_settings(
        overrides={
            "bootstrap": args.bootstrap,
            "partitions": args.partitions,
            "replication_factor": args.replication_factor,
        }
    )
    if not settings.kafka.bootstrap:
        print("streams.kafka.admin: --bootstrap (or SEINE_BOOTSTRAP) is required", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.wait
    while True:
        try:
            created = ensure_topics(settings)
            break
        except TopologyMismatch as exc:
            print(f"streams.kafka.admin: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # brokers not up yet
            if time.monotonic() >= deadline:
                print(f"streams.kafka.admin: {exc}", file=sys.stderr)
                return 1
            time.sleep(2.0)  # a retry interval while the cluster starts
    print(
        f"streams.kafka.admin: {len(created)} topics created, "
        f"{len(expected_partitions(settings)) - len(created)} already there"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
