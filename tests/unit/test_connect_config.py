"""infra/connect/: the documents topic's search-engine sink, checked without Java.

infra/connect/check.py validates the same files against a real Connect worker and
the connector (docs/OPERATIONS.md, "Feeding an external search engine"); it needs
Maven, Java 21 and the connector's release archive, so it is not a test. These
check what the files promise: the documents topic, the key as the document id,
tombstones as deletes, one config in two forms, one Kafka version.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from streams.settings import Settings

CONNECT = Path(__file__).resolve().parents[2] / "infra" / "connect"


def sink() -> dict[str, Any]:
    return dict(json.loads((CONNECT / "opensearch-sink.json").read_text("utf-8")))


def properties(name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in (CONNECT / name).read_text("utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def check_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("connect_check", CONNECT / "check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sink_reads_the_documents_topic_keyed_by_id_with_tombstones_deleting() -> None:
    config = sink()["config"]
    assert config["topics"] == f"{Settings().app_id}.documents"
    assert config["key.converter"] == "org.apache.kafka.connect.storage.StringConverter"
    assert config["key.ignore"] == "false"
    assert config["behavior.on.null.values"] == "delete"
    # a replay after a restart is a version conflict (external version = offset)
    assert config["behavior.on.version.conflict"] == "ignore"
    assert all(isinstance(v, str) for v in config.values())  # the REST API's form


def test_the_standalone_properties_are_the_json_config() -> None:
    body = sink()
    assert properties("opensearch-sink.properties") == {"name": body["name"], **body["config"]}


def test_the_worker_listens_on_loopback_and_has_what_standalone_needs() -> None:
    worker = properties("connect-standalone.properties")
    for key in ("bootstrap.servers", "key.converter", "value.converter", "plugin.path"):
        assert worker[key]
    assert worker["offset.storage.file.filename"]
    assert worker["listeners"].startswith("http://127.0.0.1:")


def test_connect_runs_the_kafka_version_named_once() -> None:
    pom = (CONNECT / "pom.xml").read_text("utf-8")
    assert "<version>${kafka.version}</version>" in pom
    assert not re.search(r"<kafka\.version>", pom)  # infra/kafka/pom.xml's, passed in


def test_the_check_fails_on_errors_and_on_keys_nobody_defines(capsys: Any) -> None:
    report = check_module().report

    def answer(errors: dict[str, list[str]]) -> dict[str, Any]:
        names = ["topics", "key.ignore", "value.converter.schemas.enable"]
        configs = [{"value": {"name": n, "value": "x", "errors": errors.get(n, [])}} for n in names]
        return {"name": "C", "error_count": sum(map(len, errors.values())), "configs": configs}

    config = {"topics": "t", "key.ignore": "false", "value.converter.schemas.enable": "false"}
    assert report(answer({}), config) == 0
    assert report(answer({"key.ignore": ["bad"]}), config) == 1
    assert report(answer({}), {**config, "behavior.on.null.value": "delete"}) == 1
    assert "UNKNOWN behavior.on.null.value" in capsys.readouterr().out
