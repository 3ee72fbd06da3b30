"""Check infra/connect/ against a real Kafka Connect worker, as far as one machine can.

    .venv/bin/python infra/connect/check.py [--plugin-dir DIR] [--config JSON] [--data-dir DIR]

1. Builds the documents converter (converter/, `mvn -q package`) into
   converter/target/plugin/, and fetches Kafka Connect (connect-runtime and
   connect-file of infra/kafka/pom.xml's Kafka version, through infra/connect/pom.xml)
   with Maven into $SEINE_CONNECT_LIBS, else ~/.cache/seine/connect-VERSION-POMHASH.
2. Starts a one-node Apache Kafka (streams.kafka.local, as `seine broker kafka`) and
   connect-standalone with connect-standalone.properties, both on loopback, the
   converter and DIR on its plugin.path.
3. Round trip: writes documents encoded by streams.codec, then a tombstone, to the
   config's topic; a FileStreamSink connector with the config's converters writes
   each value it reads to a file, which must hold every document decoded, then
   "null". A second one reads bytes that are no document: its task must fail with
   the converter's DataException.
4. Asks the worker's REST API to validate opensearch-sink.json
   (PUT /connector-plugins/CLASS/config/validate) and prints what it answered: the
   error count, each error, and any setting that neither the connector nor Connect
   defines (validation does not count those as errors: a misspelt key passes).

The OpenSearch sink connector is not on Maven Central: --plugin-dir (or
$SEINE_CONNECT_PLUGINS) is a Connect plugin.path dir holding its release archive
unpacked. Its 4.x releases are built for Java 21: run with JAVA_HOME at a Java 21+.
Without it the worker still starts, the round trip runs and the check says the
class is missing.

No OpenSearch server is started or asked: validation checks the configuration,
not a write. Exit 0: the round trip as expected, 0 errors and no unknown setting;
1: otherwise; 2: it could not run (no Java, Maven failed, the worker did not start).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from streams import codec  # noqa: E402
from streams.kafka.broker import die_with_parent  # noqa: E402
from streams.kafka.local import (  # noqa: E402
    KafkaCluster,
    KafkaError,
    java_binary,
    kafka_version,
    maven_copy,
    quiet_config,
)

POM = HERE / "pom.xml"
WORKER = HERE / "connect-standalone.properties"
CONNECTOR = HERE / "opensearch-sink.json"
CONVERTER_POM = HERE / "converter" / "pom.xml"
#: What `mvn package` of CONVERTER_POM builds: a plugin.path dir with one plugin.
CONVERTER_PLUGINS = HERE / "converter" / "target" / "plugin"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
#: Bytes that are no Document: an empty url, then a string of length -1.
GARBAGE = b"\x00\x01garbage"

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.herder.name = org.apache.kafka.connect.runtime.rest.RestServer
logger.herder.level = info
"""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seine"


def connect_libs(version: str) -> Path:
    """The cache dir with Kafka Connect's jars, fetched with Maven on first use."""
    override = os.environ.get("SEINE_CONNECT_LIBS")
    if override:
        if not any(Path(override).glob("connect-runtime-*.jar")):
            raise KafkaError(f"no Kafka Connect jars in SEINE_CONNECT_LIBS={override}")
        return Path(override)
    target = cache_dir() / f"connect-{version}"
    return maven_copy(POM, target, version, "connect-runtime-*.jar", "Kafka Connect")


def file_connector(version: str) -> Path | None:
    """A dir with connect-file (FileStreamSink) of this Kafka version, fetched with
    Maven on first use; None when Maven cannot resolve it. Not in pom.xml: the worker
    runs without it, and it does not resolve at every Kafka version (4.4.0 did not
    when checked; 4.3's does not load in a 4.4 worker)."""
    target = cache_dir() / f"connect-file-{version}"
    if any(target.glob("connect-file-*.jar")):
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        return None
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    cmd = [mvn, "-B", "-q", "-Dstyle.color=never", "dependency:copy"]
    cmd += [f"-Dartifact=org.apache.kafka:connect-file:{version}", f"-DoutputDirectory={staging}"]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode == 0 and any(staging.glob("connect-file-*.jar")):
        staging.rename(target)
        return target
    shutil.rmtree(staging, ignore_errors=True)
    return None


def build_converter(version: str) -> Path:
    """`mvn -q package` of converter/pom.xml at this Kafka version: its plugin dir."""
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaError("no `mvn` to build the documents converter (install Maven)")
    cmd = [mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(CONVERTER_POM), "package"]
    done = subprocess.run(
        [*cmd, f"-Dkafka.version={version}"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    jars = list(CONVERTER_PLUGINS.glob("*/seine-document-converter-*.jar"))
    if done.returncode != 0 or not jars:
        tail = [ln for ln in done.stdout.splitlines() if "ERROR" in ln][:1]
        raise KafkaError(
            f"building the converter with Maven failed (exit {done.returncode})"
            f"{': ' + tail[0] if tail else ''}"
        )
    return CONVERTER_PLUGINS


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def java_major(java: str) -> int:
    done = subprocess.run([java, "-version"], capture_output=True, text=True)
    first = (done.stderr or done.stdout).split('"')
    try:
        return int(first[1].split(".")[0])
    except (IndexError, ValueError):
        return 0


def http(method: str, url: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace")
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, text


def wait_rest(proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise KafkaError(f"the Connect worker exited with code {proc.returncode} (see {log})")
        try:
            status, body = http("GET", url, timeout=2)
            if status == 200:
                return body
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise KafkaError(f"the Connect worker's REST API did not answer in {timeout:.0f}s")
        time.sleep(0.5)  # polling a starting JVM, bounded by the deadline


@contextmanager
def worker(
    libs: list[Path], bootstrap: str, plugin_path: list[Path], data: Path, timeout: float
) -> Iterator[str]:
    """connect-standalone with connect-standalone.properties on loopback and the jars
    of `libs` on its class path, stopped on exit: its REST API's base URL."""
    port = free_port()
    props = read_properties(WORKER)
    props.update(
        {
            "bootstrap.servers": bootstrap,
            "listeners": f"http://127.0.0.1:{port}",
            "offset.storage.file.filename": str(data / "connect.offsets"),
            "plugin.path": ",".join(str(p.resolve()) for p in plugin_path),
        }
    )
    (data / "worker.properties").write_text(
        "".join(f"{k}={v}\n" for k, v in props.items()), "utf-8"
    )
    (data / "connect-log4j2.properties").write_text(LOG4J2, "utf-8")
    log = data / "connect.log"
    cmd = [
        java_binary(),
        "-Xms64m",
        "-Xmx512m",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={data / 'connect-log4j2.properties'}",
        "-cp",
        os.pathsep.join(f"{d}/*" for d in libs),
        "org.apache.kafka.connect.cli.ConnectStandalone",
        str(data / "worker.properties"),
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    try:
        base = f"http://127.0.0.1:{port}"
        info = wait_rest(proc, f"{base}/", log, timeout)
        print(f"check: Connect worker {info.get('version')} on {base} (log: {log})")
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# -- the round trip -------------------------------------------------------------------


def sample_documents() -> list[dict[str, Any]]:
    """Three documents as Seine writes them: every field, unions both ways, non-ASCII,
    empty arrays, a text of several lines."""
    first: dict[str, Any] = {
        "url": "https://example.com/a?ref=x",
        "canonical": "https://example.com/a",
        "status": 200,
        "fetched_at": 1_700_000_000.5,
        "last_modified": None,
        "content_type": "text/html",
        "charset": "utf-8",
        "language": "en",
        "title": "A page",
        "description": "ü€",
        "headings": ["One", "Two"],
        "text": "main text\nwith lines",
        "outlinks": [{"url": "https://example.com/b", "anchor": "b", "nofollow": False}],
        "anchors": ["a page"],
        "digest": "sha1:ABC",
        "simhash": -(2**63),
        "size": 2**33,
        "depth": 2,
        "site": "example.com",
    }
    second = {
        **first,
        "url": "https://example.com/b",
        "canonical": "https://example.com/b",
        "last_modified": 1_600_000_000.0,
        "language": "fr",
        "title": "Deuxième page",
        "headings": [],
        "outlinks": [],
        "anchors": [],
        "simhash": None,
        "depth": 3,
    }
    third = {**first, "url": "https://b.example/ü", "canonical": "https://b.example/ü"}
    third.update({"title": "Café ü", "site": "b.example", "text": "", "simhash": 42})
    return [first, second, third]


def produce(bootstrap: str, topic: str, messages: list[tuple[str, bytes | None]]) -> None:
    """Create `topic` (compacted, as Seine's) and write `messages` (key, value) to it."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(quiet_config(bootstrap))
    new = NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})
    for future in admin.create_topics([new]).values():
        future.result(timeout=30)
    producer = Producer(quiet_config(bootstrap, acks="all"))
    failed: list[Any] = []
    for key, value in messages:
        producer.produce(topic, value, key.encode(), on_delivery=lambda e, _m: failed.append(e))
    producer.flush(30)
    if len(failed) != len(messages) or any(failed):
        raise KafkaError(f"writing to {topic} failed: {[e for e in failed if e]}")


def sink_records(path: Path) -> list[str]:
    """FileStreamSink's file as records: it writes each value's toString() and a line
    feed, so a text of several lines spans lines; a record starts "Struct{" or is null."""
    records: list[str] = []
    if not path.exists():
        return records
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("Struct{") or line == "null" or not records:
            records.append(line)
        else:
            records[-1] += "\n" + line
    return records


def java_double(x: float) -> str:
    """Java's Double.toString(x), for the doubles of sample_documents."""
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(x)
    sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exp, int)
    fraction = "".join(map(str, digits[1:])) or "0"
    return f"{'-' if sign else ''}{digits[0]}.{fraction}E{len(digits) + exp - 1}"


def expected_parts(doc: dict[str, Any]) -> list[str]:
    """What Connect's Struct.toString() of `doc` holds (a null field is left out)."""
    parts = [f"Struct{{url={doc['url']},canonical={doc['canonical']},status={doc['status']},"]
    parts += [f",title={doc['title']},", f",text={doc['text']},", f",site={doc['site']}}}"]
    parts.append(f",headings=[{', '.join(doc['headings'])}],")
    for name in ("fetched_at", "last_modified", "simhash", "size"):
        value = doc[name]
        if value is not None:
            shown = java_double(value) if isinstance(value, float) else str(value)
            parts.append(f",{name}={shown},")
    return parts


def task_state(base: str, name: str) -> tuple[str, str]:
    status, body = http("GET", f"{base}/connectors/{name}/status")
    tasks = body.get("tasks") if status == 200 and isinstance(body, dict) else None
    if not tasks:
        return "", ""
    return str(tasks[0].get("state")), str(tasks[0].get("trace") or "")


def file_sink(base: str, name: str, topic: str, out: Path, converters: dict[str, str]) -> None:
    config = {"connector.class": FILE_SINK, "tasks.max": "1", "topics": topic}
    body = {"name": name, "config": {**config, "file": str(out), **converters}}
    status, answer = http("POST", f"{base}/connectors", body)
    if status not in (200, 201):
        raise KafkaError(f"creating {name} answered HTTP {status}: {answer}")


def round_trip(base: str, bootstrap: str, config: dict[str, str], data: Path) -> int:
    """Documents and a tombstone through FileStreamSink with the config's converters,
    then garbage; 0 when the file and the failure are as expected."""
    converters = {k: v for k, v in config.items() if k.split(".")[1:2] == ["converter"]}
    topic = config["topics"]
    docs = sample_documents()
    messages: list[tuple[str, bytes | None]] = [
        (d["canonical"], codec.encode("document", d)) for d in docs
    ]
    messages.append((docs[0]["canonical"], None))
    produce(bootstrap, topic, messages)
    print(f"e2e: wrote {len(docs)} documents (streams.codec) and 1 tombstone to {topic}")
    out = data / "documents.sink.txt"
    file_sink(base, "check-documents-file", topic, out, converters)
    deadline = time.monotonic() + 60
    state, trace = "", ""
    while len(sink_records(out)) < len(messages) and time.monotonic() < deadline:
        state, trace = task_state(base, "check-documents-file")
        if state == "FAILED":
            break
        time.sleep(0.5)  # polling the sink's file, bounded by the deadline
    records = sink_records(out)
    print(f"e2e: FileStreamSink wrote {len(records)} records to {out}")
    ok = len(records) == len(messages)
    for doc, record in zip(docs, records, strict=False):
        missing = [p for p in expected_parts(doc) if p not in record]
        ok = ok and not missing and record.startswith(expected_parts(doc)[0])
        title = record.partition(",title=")[2].partition(",description=")[0]
        shown = f"{record[:70]}... title={title}"
        print(f"  {'ok' if not missing else 'WRONG'}  {shown}")
        for part in missing:
            print(f"         missing {part!r}")
    tombstone = records[len(docs)] if len(records) > len(docs) else "(nothing)"
    ok = ok and tombstone == "null"
    print(f"  {'ok' if tombstone == 'null' else 'WRONG'}  {tombstone}  (the tombstone)")
    if state == "FAILED":
        print(f"e2e: the task failed: {trace.splitlines()[0] if trace else '?'}")
    return (0 if ok else 1) | garbage(base, bootstrap, converters, data)


def garbage(base: str, bootstrap: str, converters: dict[str, str], data: Path) -> int:
    """Bytes that are no document: the task fails (errors.tolerance=none, Connect's
    default) and its trace has the converter's DataException."""
    topic = "check.not-documents"
    produce(bootstrap, topic, [("https://example.com/x", GARBAGE)])
    file_sink(base, "check-garbage-file", topic, data / "garbage.sink.txt", converters)
    deadline = time.monotonic() + 60
    state, trace = task_state(base, "check-garbage-file")
    while state != "FAILED" and time.monotonic() < deadline:
        time.sleep(0.5)  # polling the task's state, bounded by the deadline
        state, trace = task_state(base, "check-garbage-file")
    found = [ln.strip() for ln in trace.splitlines() if "DataException" in ln]
    print(f"e2e: {len(GARBAGE)} bytes of garbage: task {state or 'not started'}")
    print(f"  {'ok' if found else 'WRONG'}  {found[-1] if found else 'no DataException'}")
    return 0 if state == "FAILED" and found else 1


# -- the OpenSearch config's validation -----------------------------------------------


def report(result: dict[str, Any], config: dict[str, str]) -> int:
    """Print the validation answer; 0 when it has no error and every key is known."""
    known: dict[str, Any] = {}
    errors: list[str] = []
    for item in result.get("configs", []):
        value = item.get("value", {})
        known[value.get("name")] = value.get("value")
        for message in value.get("errors") or []:
            errors.append(f"{value.get('name')}: {message}")
    # Connect hands converter.* keys to the converter, not to validation's list.
    prefixes = ("key.converter.", "value.converter.", "header.converter.")
    unknown = [k for k in config if k not in known and not k.startswith(prefixes)]
    print(f"validate: {result.get('name')}, error_count={result.get('error_count')}")
    for line in errors:
        print(f"  error  {line}")
    for key in config:
        if key in known:
            print(f"  ok     {key} = {known[key]}")
    for key in unknown:
        print(f"  UNKNOWN {key} (neither the connector nor Connect defines it)")
    return 0 if result.get("error_count") == 0 and not errors and not unknown else 1


def validate(base: str, config: dict[str, str], plugins: str, java: str, data: Path) -> int:
    """Have the worker validate the sink config; 0 when it has no error and no unknown key."""
    connector_class = config["connector.class"]
    _, listed = http("GET", f"{base}/connector-plugins?connectorsOnly=true")
    classes = {p.get("class"): p.get("version") for p in listed or []}
    if connector_class not in classes:
        print(f"check: the worker has no {connector_class}", end="")
        print(f" in plugin.path={plugins}" if plugins else " (no --plugin-dir given)")
        if plugins and java_major(java) < 21:
            print("check: its 4.x releases are built for Java 21: set JAVA_HOME to one")
        names = ", ".join(sorted(c for c in classes if c)) or "none"
        print(f"check: its connectors: {names}")
        print("check: not validated (the connector's release archive is not on Maven")
        print("       Central: unpack it into a dir and pass --plugin-dir DIR)")
        return 1
    print(f"check: plugin {connector_class} {classes[connector_class]}")
    quoted = urllib.parse.quote(connector_class)
    status, result = http("PUT", f"{base}/connector-plugins/{quoted}/config/validate", config)
    if status != 200:
        print(f"check: validate answered HTTP {status}: {result}")
        return 1
    (data / "validate.json").write_text(json.dumps(result, indent=1), "utf-8")
    return report(result, config)


def run(args: argparse.Namespace) -> int:
    java = java_binary()
    version = kafka_version()
    libs = connect_libs(version)
    print(f"check: Kafka Connect {version} jars in {libs}; Java {java_major(java)} ({java})")
    converter = build_converter(version)
    print(f"check: built the documents converter into {converter}")
    file_jars = file_connector(version)
    if file_jars is None:
        print(f"check: connect-file {version} did not resolve with Maven: no round trip")
        print("       (SEINE_KAFKA_VERSION=V runs everything at a Kafka version V that has it)")
    plugins = args.plugin_dir or os.environ.get("SEINE_CONNECT_PLUGINS") or ""
    if plugins and not Path(plugins).is_dir():
        raise KafkaError(f"no plugin dir {plugins}")
    body = json.loads(Path(args.config).read_text("utf-8"))
    config: dict[str, str] = {"name": body["name"], **body["config"]}

    data = Path(args.data_dir or tempfile.mkdtemp(prefix="seine-connect-check-"))
    data.mkdir(parents=True, exist_ok=True)
    plugin_path = [converter, *([Path(plugins)] if plugins else [])]
    with KafkaCluster(data / "kafka", 1) as cluster:
        print(f"check: Apache Kafka {version} on {cluster.bootstrap}")
        classpath = [libs, *([file_jars] if file_jars else [])]
        with worker(classpath, cluster.bootstrap, plugin_path, data, args.timeout) as base:
            _, listed = http("GET", f"{base}/connector-plugins?connectorsOnly=false")
            for plugin in listed or []:
                if plugin.get("class", "").startswith("seine."):
                    print(f"check: plugin {plugin['class']} {plugin.get('version')} ", end="")
                    print(f"({plugin.get('type')})")
            failed = round_trip(base, cluster.bootstrap, config, data) if file_jars else 1
            return validate(base, config, plugins, java, data) | failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin-dir", help="a Connect plugin.path dir with the connector")
    parser.add_argument("--config", default=str(CONNECTOR), help="a connector's JSON body")
    parser.add_argument("--data-dir", help="where the broker and worker keep their files")
    parser.add_argument("--timeout", type=float, default=120.0, help="worker start, seconds")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except KafkaError as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
