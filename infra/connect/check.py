"""Check infra/connect/ against a real Kafka Connect worker, as far as one machine can.

    .venv/bin/python infra/connect/check.py [--plugin-dir DIR] [--config JSON] [--data-dir DIR]

1. Fetches Kafka Connect (connect-runtime of infra/kafka/pom.xml's Kafka version,
   through infra/connect/pom.xml) with Maven into $SEINE_CONNECT_LIBS, else
   ~/.cache/seine/connect-VERSION (the broker's jars: ~/.cache/seine/kafka-VERSION).
2. Starts a one-node Apache Kafka (streams.kafka.local, as `seine broker kafka`) and
   connect-standalone with connect-standalone.properties, both on loopback.
3. Asks the worker's REST API to validate opensearch-sink.json
   (PUT /connector-plugins/CLASS/config/validate) and prints what it answered: the
   error count, each error, and any setting that neither the connector nor Connect
   defines (validation does not count those as errors: a misspelt key passes).

The OpenSearch sink connector is not on Maven Central: --plugin-dir (or
$SEINE_CONNECT_PLUGINS) is a Connect plugin.path dir holding its release archive
unpacked. Its 4.x releases are built for Java 21: run with JAVA_HOME at a Java 21+.
Without it the worker still starts and the check says the class is missing.

No OpenSearch server is started or asked: validation checks the configuration,
not a write. Exit 0: 0 errors and no unknown setting; 1: otherwise; 2: it could
not run (no Java, Maven failed, the worker did not start).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from streams.kafka.broker import die_with_parent  # noqa: E402
from streams.kafka.local import (  # noqa: E402
    KafkaCluster,
    KafkaError,
    java_binary,
    kafka_version,
    maven_copy,
)

POM = HERE / "pom.xml"
WORKER = HERE / "connect-standalone.properties"
CONNECTOR = HERE / "opensearch-sink.json"

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


def connect_libs(version: str) -> Path:
    """The cache dir with Kafka Connect's jars, fetched with Maven on first use."""
    override = os.environ.get("SEINE_CONNECT_LIBS")
    if override:
        if not any(Path(override).glob("connect-runtime-*.jar")):
            raise KafkaError(f"no Kafka Connect jars in SEINE_CONNECT_LIBS={override}")
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    target = cache / "seine" / f"connect-{version}"
    return maven_copy(POM, target, version, "connect-runtime-*.jar", "Kafka Connect")


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


def run(args: argparse.Namespace) -> int:
    java = java_binary()
    version = kafka_version()
    libs = connect_libs(version)
    print(f"check: Kafka Connect {version} jars in {libs}; Java {java_major(java)} ({java})")
    plugins = args.plugin_dir or os.environ.get("SEINE_CONNECT_PLUGINS") or ""
    if plugins and not Path(plugins).is_dir():
        raise KafkaError(f"no plugin dir {plugins}")
    body = json.loads(Path(args.config).read_text("utf-8"))
    config: dict[str, str] = {"name": body["name"], **body["config"]}
    connector_class = config["connector.class"]

    data = Path(args.data_dir or tempfile.mkdtemp(prefix="seine-connect-check-"))
    data.mkdir(parents=True, exist_ok=True)
    with KafkaCluster(data / "kafka", 1) as cluster:
        print(f"check: Apache Kafka {version} on {cluster.bootstrap}")
        port = free_port()
        worker = read_properties(WORKER)
        worker.update(
            {
                "bootstrap.servers": cluster.bootstrap,
                "listeners": f"http://127.0.0.1:{port}",
                "offset.storage.file.filename": str(data / "connect.offsets"),
            }
        )
        if plugins:
            worker["plugin.path"] = str(Path(plugins).resolve())
        else:
            worker.pop("plugin.path", None)
        (data / "worker.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in worker.items()), "utf-8"
        )
        (data / "connect-log4j2.properties").write_text(LOG4J2, "utf-8")
        log = data / "connect.log"
        cmd = [
            java,
            "-Xms64m",
            "-Xmx512m",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={data / 'connect-log4j2.properties'}",
            "-cp",
            f"{libs}/*",
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
            info = wait_rest(proc, f"{base}/", log, args.timeout)
            print(f"check: Connect worker {info.get('version')} on {base} (log: {log})")
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
            status, result = http(
                "PUT", f"{base}/connector-plugins/{quoted}/config/validate", config
            )
            if status != 200:
                print(f"check: validate answered HTTP {status}: {result}")
                return 1
            (data / "validate.json").write_text(json.dumps(result, indent=1), "utf-8")
            return report(result, config)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


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
