"""Every topic a worker consumes exists before its consumer subscribes: the stage and
service topics and the tables' changelogs (compacted). A topic Faust created only as
the app started was, on a loaded machine, seen by the consumer with 0 partitions:
every table read failed (PartitionsMismatch) and the crawl's seeds went to the dead
letters. Runs on Tansu or Apache Kafka (pytest --broker)."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient, ConfigResource

import topology
from streams.app import create_app, create_topics
from streams.kafka.broker import EmbeddedBroker
from streams.settings import Settings
from tests.integration.conftest import broker_kind


def test_topics_and_changelogs_exist_before_the_worker_starts(broker: EmbeddedBroker) -> None:
    settings = Settings.of(app_id=f"upfront{uuid.uuid4().hex[:8]}", bootstrap=broker.bootstrap)
    settings = settings.with_overrides(partitions=3)
    seine = create_app(settings)
    try:
        created = set(create_topics(seine))
        again = create_topics(seine)
    finally:
        # the app's producer would go on reconnecting (and logging) once the broker stops
        seine.ctx.producer.close()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=20).topics
    changelogs = {f"{settings.app_id}-{t.name}-changelog" for t in seine.app.tables.values()}
    assert {f"{settings.app_id}-seen-changelog", f"{settings.app_id}-sites-changelog"} <= (
        changelogs
    )
    stage_topics = {
        topology.topic_name(settings.app_id, spec)
        for spec in topology.TOPICS + topology.SERVICE_TOPICS
    }
    assert stage_topics | changelogs <= created  # all new: nothing was there before
    for name in changelogs:
        assert len(topics[name].partitions) == 3, name
    if broker_kind() == "kafka":  # Tansu does not answer DescribeConfigs fully
        resource = ConfigResource("topic", f"{settings.app_id}-hosts-changelog")
        configs = admin.describe_configs([resource])[resource].result(timeout=20)
        assert configs["cleanup.policy"].value == "compact"
    assert again == []  # a second worker creates nothing
