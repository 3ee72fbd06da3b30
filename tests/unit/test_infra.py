"""infra/: the compose file and Prometheus config, checked without Docker.

This machine has no Docker engine, so `docker compose config` cannot run here; these
tests parse the YAML (PyYAML, merge keys included) and check it against the code:
3 KRaft brokers with replication 3, topics created from topology/ before any worker,
workers with settings Seine knows, and Prometheus scraping the workers' /metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from streams.kafka.admin import build_parser
from streams.kafka.local import docker_env, kafka_version
from streams.settings import GROUP_OF

INFRA = Path(__file__).resolve().parents[2] / "infra"


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((INFRA / "docker-compose.yml").read_text()))


def env_file(service: dict[str, Any]) -> dict[str, str]:
    """The variables of a service's env_file(s), as compose reads them."""
    out: dict[str, str] = {}
    for name in service.get("env_file") or []:
        for line in (INFRA / name).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition("=")
                out[key] = value
    return out


def test_broker_env_is_generated_from_the_shared_properties() -> None:
    # one source for the brokers' settings: the local clusters read broker.properties,
    # compose reads broker.env, which must be that file for 3 nodes
    assert (INFRA / "kafka" / "broker.env").read_text() == docker_env(3)


def test_compose_runs_the_kafka_version_the_project_fetches() -> None:
    image = compose()["x-kafka"]["image"]
    assert image == f"apache/kafka:{kafka_version()}"


def test_three_kraft_brokers_replicating_three_ways() -> None:
    services = compose()["services"]
    brokers = {name: s for name, s in services.items() if name.startswith("kafka-")}
    assert sorted(brokers) == ["kafka-1", "kafka-2", "kafka-3"]
    ids = set()
    for name, service in brokers.items():
        env = {**env_file(service), **service["environment"]}
        assert "controller" in env["KAFKA_PROCESS_ROLES"]
        voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
        assert sorted(v.split("@")[1].split(":")[0] for v in voters) == sorted(brokers)
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert int(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]) == 3
        assert int(env["KAFKA_MIN_INSYNC_REPLICAS"]) == 2
        assert str(env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"]) == "false"
        # a page batch may be up to the stages' 16 MiB producer cap
        assert int(env["KAFKA_MESSAGE_MAX_BYTES"]) >= 16 * 1024 * 1024
        ids.add(env["KAFKA_NODE_ID"])
    assert len(ids) == 3


def test_topics_are_created_from_topology_before_workers_start() -> None:
    services = compose()["services"]
    topics = services["topics"]
    assert topics["command"][:3] == ["python", "-m", "streams.kafka.admin"]
    build_parser().parse_args(topics["command"][3:])  # flags the module accepts
    assert topics["environment"]["SEINE_REPLICATION_FACTOR"] == "3"
    worker = services["worker"]
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_workers_use_only_settings_seine_knows() -> None:
    known = {"SEINE_" + name.upper() for name in GROUP_OF}
    for name, service in compose()["services"].items():
        for key in service.get("environment") or {}:
            if key.startswith("SEINE_"):
                assert key in known, (name, key)
    worker = compose()["services"]["worker"]
    assert worker["environment"]["SEINE_BOOTSTRAP"].count("kafka-") == 3
    assert worker["environment"]["SEINE_WEB_BIND"] == "0.0.0.0"
    assert worker["volumes"] == ["/data"], "one anonymous data dir per worker replica"


def test_prometheus_scrapes_every_worker() -> None:
    services = compose()["services"]
    worker_port = services["worker"]["command"][
        services["worker"]["command"].index("--web-port") + 1
    ]
    config = yaml.safe_load((INFRA / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and str(sd["port"]) == worker_port
    mount = services["prometheus"]["volumes"][0]
    assert mount.startswith("./prometheus.yml:")


def test_the_image_holds_what_a_worker_needs() -> None:
    dockerfile = (INFRA / "Dockerfile").read_text()
    for part in ("streams", "topology", "schemas", "pyproject.toml"):
        assert f"COPY {part}" in dockerfile
