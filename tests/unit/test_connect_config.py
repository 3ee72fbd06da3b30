"""infra/connect/: the documents topic's search-engine sink, checked without Java.

infra/connect/check.py builds the documents converter, runs documents through it in a
real Connect worker and validates the same files against the connector
(docs/OPERATIONS.md, "Feeding an external search engine"); it needs Maven, Java 21
and the connector's release archive, so it is not a test. These check what the
files promise: the documents topic, the key as the document id, the values read by
the converter built from schemas/document.avsc, tombstones as deletes, one config in
two forms, one Kafka version; and how the check reads the sink's file.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from streams import codec
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]
CONNECT = REPO / "infra" / "connect"
CONVERTER = CONNECT / "converter"
CONVERTER_CLASS = "seine.connect.DocumentAvroConverter"


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
    assert config["value.converter"] == CONVERTER_CLASS
    # the converter's one setting; another converter's (schemas.enable) would do nothing
    assert {k for k in config if k.startswith("value.converter.")} <= {
        "value.converter.schema.path"
    }
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


def test_the_converter_is_the_class_the_config_names_and_reads_the_repo_schema() -> None:
    source = (
        CONVERTER / "src" / "main" / "java" / "seine" / "connect" / "DocumentAvroConverter.java"
    )
    assert "implements Converter" in source.read_text("utf-8")
    services = CONVERTER / "src/main/resources/META-INF/services"
    registered = (services / "org.apache.kafka.connect.storage.Converter").read_text("utf-8")
    assert registered.split() == [CONVERTER_CLASS]  # for plugin.discovery=service_load
    pom = (CONVERTER / "pom.xml").read_text("utf-8")
    # the schema is bundled from schemas/ at build time, not forked into this tree
    assert "<directory>${project.basedir}/../../../schemas</directory>" in pom
    assert (CONVERTER / "../../../schemas/document.avsc").resolve().is_file()
    assert not list((CONVERTER / "src").glob("**/*.avsc"))


def test_the_converter_builds_against_the_brokers_kafka_version() -> None:
    pom = (CONVERTER / "pom.xml").read_text("utf-8")
    broker = (REPO / "infra" / "kafka" / "pom.xml").read_text("utf-8")
    version = re.compile(r"<kafka\.version>([^<]+)</kafka\.version>")
    found, wanted = version.search(pom), version.search(broker)
    assert found and wanted and found.group(1) == wanted.group(1)
    api = re.search(
        r"<artifactId>connect-api</artifactId>\s*<version>([^<]+)</version>\s*"
        r"<scope>([^<]+)</scope>",
        pom,
    )
    assert api and api.groups() == ("${kafka.version}", "provided")  # the worker's
    assert re.search(r"<maven\.compiler\.release>17<", pom)


def test_the_checks_documents_are_seines_and_doubles_print_as_javas() -> None:
    check = check_module()
    docs = check.sample_documents()
    assert len({d["canonical"] for d in docs}) == len(docs)  # no id compacted away
    assert any("\n" in d["text"] for d in docs)  # a record over several lines
    assert {d["simhash"] is None for d in docs} == {True, False}  # unions both ways
    for doc in docs:
        codec.decode("document", codec.encode("document", doc))  # what Seine writes
    assert [check.java_double(x) for x in (1_700_000_000.5, 1.6e9, 0.5, 2.0, -1e-4)] == [
        "1.7000000005E9",
        "1.6E9",
        "0.5",
        "2.0",
        "-1.0E-4",
    ]


def test_the_check_splits_the_sink_file_into_records(tmp_path: Path) -> None:
    check = check_module()
    doc = check.sample_documents()[0]
    text = doc["text"]
    line = (
        f"Struct{{url={doc['url']},canonical={doc['canonical']},status=200,"
        "fetched_at=1.7000000005E9,title=A page,headings=[One, Two],"
        f"text={text},simhash={doc['simhash']},size={doc['size']},site={doc['site']}}}"
    )
    out = tmp_path / "sink.txt"
    out.write_text(f"{line}\nnull\n", "utf-8")
    records = check.sink_records(out)
    assert records == [line, "null"]
    assert all(part in records[0] for part in check.expected_parts(doc))
    assert check.sink_records(tmp_path / "absent.txt") == []


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
