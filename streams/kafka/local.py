"""A local Apache Kafka cluster (KRaft, combined broker+controller nodes) on loopback.

`seine broker kafka --nodes N --data-dir DIR` runs one in the foreground;
`seine crawl --broker kafka` runs a single node under DATA_DIR/kafka for the
length of the crawl; the tests run both. Unlike the embedded Tansu, its topics
live on disk under DIR, so a second run over the same DIR finds them again.

The broker's jars come from Maven Central through infra/kafka/pom.xml, copied once
per machine into a cache dir ($SEINE_KAFKA_LIBS, else ~/.cache/seine/kafka-VERSION).
The broker settings shared with infra/docker-compose.yml are in
infra/kafka/broker.properties; listeners, node ids and log dirs are added here.

DIR holds `cluster.json` (cluster id, node ports), `node-I/` per node (its
`server.properties`, `server.log`, `data/` and, while it runs, `pid`) and, once
the cluster accepts writes, `bootstrap` (`host:port,host:port,...`).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from streams.kafka.broker import die_with_parent

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "infra" / "kafka" / "pom.xml"
BROKER_PROPERTIES = REPO / "infra" / "kafka" / "broker.properties"
#: A topic the readiness check writes to with acks=all: the cluster "accepts writes".
PROBE_TOPIC = "seine-cluster-probe"

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = info
"""


class KafkaError(RuntimeError):
    """The local Apache Kafka cannot be fetched or started; the message is one line."""


def kafka_version(pom: Path = POM) -> str:
    """The broker version: $SEINE_KAFKA_VERSION (to try another), else
    infra/kafka/pom.xml's kafka.version."""
    if os.environ.get("SEINE_KAFKA_VERSION"):
        return os.environ["SEINE_KAFKA_VERSION"]
    try:
        text = pom.read_text("utf-8")
    except OSError as exc:
        raise KafkaError(f"cannot read {pom}: {exc.strerror}") from exc
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", text)
    if not found:
        raise KafkaError(f"{pom} names no kafka.version")
    return found.group(1).strip()


def libs_dir(version: str | None = None) -> Path:
    """Where the jars of this version live (fetched or not)."""
    override = os.environ.get("SEINE_KAFKA_LIBS")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "seine" / f"kafka-{version or kafka_version()}"


def java_binary() -> str:
    """`java` from JAVA_HOME or PATH; Kafka 4 needs Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise KafkaError("no Java runtime: Apache Kafka needs Java 17+ (set JAVA_HOME or PATH)")
    return found


def _has_jars(path: Path, marker: str = "kafka_2.13-*.jar") -> bool:
    return path.is_dir() and any(path.glob(marker))


def ensure_jars(version: str | None = None, *, quiet: bool = True) -> Path:
    """The cache dir with the broker's jars, fetched with Maven on first use."""
    version = version or kafka_version()
    target = libs_dir(version)
    if _has_jars(target):
        return target
    if os.environ.get("SEINE_KAFKA_LIBS"):
        raise KafkaError(f"no Kafka jars in SEINE_KAFKA_LIBS={target}")
    return maven_copy(POM, target, version, "kafka_2.13-*.jar", "Apache Kafka", quiet=quiet)


def maven_copy(
    pom: Path, target: Path, version: str, marker: str, what: str, *, quiet: bool = True
) -> Path:
    """Copy the runtime jars of `pom` (built with -Dkafka.version=`version`) into
    `target` with Maven's dependency:copy-dependencies, unless a jar matching `marker`
    is there already. `what` names the jars in errors.

    Maven copies into a private dir that is renamed into place, so two processes
    fetching at once (the tests on two processes) never see half a dir.
    """
    if _has_jars(target, marker):
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaError(
            f"no {what} jars in {target} and no `mvn` to fetch them (install Maven, "
            f"or copy the jars of {pom} there)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
    cmd = [mvn, "-B", "-Dstyle.color=never", *(["-q"] if quiet else []), "-f", str(pom)]
    cmd += ["dependency:copy-dependencies", "-DincludeScope=runtime"]
    cmd += [f"-DoutputDirectory={staging}", f"-Dkafka.version={version}"]
    try:
        done = subprocess.run(cmd, capture_output=quiet, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not _has_jars(staging, marker):
            lines = (done.stdout or "").splitlines() if quiet else []
            tail = [ln for ln in lines if "ERROR" in ln][:1]
            raise KafkaError(
                f"fetching {what} {version} with Maven failed "
                f"(exit {done.returncode}){': ' + tail[0] if tail else ''}"
            )
        try:
            staging.rename(target)
        except OSError:
            if not _has_jars(target, marker):  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def replication_for(nodes: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of this many brokers."""
    rf = max(1, min(3, nodes))
    return rf, min(2, rf)


def shared_properties(nodes: int, path: Path = BROKER_PROPERTIES) -> dict[str, str]:
    """infra/kafka/broker.properties for a cluster of `nodes` brokers."""
    rf, min_isr = replication_for(nodes)
    out: dict[str, str] = {}
    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().format(rf=rf, min_isr=min_isr)
    return out


def docker_env(nodes: int = 3) -> str:
    """infra/kafka/broker.properties as the apache/kafka image's KAFKA_* variables, for
    a cluster of `nodes` brokers: infra/kafka/broker.env (compose's env_file) is this
    for 3, and tests/unit/test_infra.py checks that it is current."""
    lines = [
        "# Generated from infra/kafka/broker.properties for a 3-node cluster by",
        "# `python -m streams.kafka.local docker-env`: edit that file, not this one.",
    ]
    for key, value in shared_properties(nodes).items():
        lines.append(f"KAFKA_{key.upper().replace('.', '_')}={value}")
    return "\n".join(lines) + "\n"


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_ports(host: str, count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaCluster:
    """N combined broker+controller nodes of Apache Kafka under `data_dir`.

    Use as a context manager or with start()/stop(). Ports: `base_port` asks for
    node I's broker on base_port + 2(I-1) and its controller on the next port (taken
    ports are an error); without it a restart reuses the ports in cluster.json when
    they are free, else takes free ones.
    """

    def __init__(
        self,
        data_dir: str | Path,
        nodes: int = 1,
        *,
        host: str = "127.0.0.1",
        base_port: int = 0,
        heap: str = "",
    ) -> None:
        if nodes < 1:
            raise KafkaError(f"a cluster needs at least one node, not {nodes}")
        self.data_dir = Path(data_dir)
        self.nodes = nodes
        self.host = host
        self.base_port = base_port
        self.heap = heap or os.environ.get("SEINE_KAFKA_HEAP", "-Xms64m -Xmx512m")
        self.cluster_id = ""
        self.ports: list[tuple[int, int]] = []  # (broker, controller) per node
        self.fresh = False  # whether start() formatted new storage
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._libs: Path | None = None

    # -- layout ---------------------------------------------------------------
    def node_dir(self, node: int) -> Path:
        return self.data_dir / f"node-{node}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{broker}" for broker, _ in self.ports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values() if p.poll() is None]

    def _plan(self) -> None:
        """Cluster id and ports: from cluster.json when the cluster exists, else new."""
        meta = self.data_dir / "cluster.json"
        saved: dict[str, object] = {}
        if meta.exists():
            saved = json.loads(meta.read_text("utf-8"))
            if saved.get("nodes") != self.nodes:
                raise KafkaError(
                    f"{self.data_dir} holds a cluster of {saved.get('nodes')} nodes, "
                    f"not {self.nodes}: use --nodes {saved.get('nodes')} or another dir"
                )
        self.cluster_id = str(saved.get("cluster_id") or _cluster_id())
        if self.base_port:
            ports = [self.base_port + i for i in range(2 * self.nodes)]
            taken = [p for p in ports if not _port_free(self.host, p)]
            if taken:
                raise KafkaError(f"port {taken[0]} on {self.host} is in use")
        else:
            ports = [int(p) for p in saved.get("ports", [])]  # type: ignore[attr-defined]
            if len(ports) != 2 * self.nodes or not all(_port_free(self.host, p) for p in ports):
                ports = _free_ports(self.host, 2 * self.nodes)
        self.ports = [(ports[2 * i], ports[2 * i + 1]) for i in range(self.nodes)]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        meta.write_text(
            json.dumps({"cluster_id": self.cluster_id, "nodes": self.nodes, "ports": ports}),
            "utf-8",
        )

    def _write_config(self, node: int) -> Path:
        broker, controller = self.ports[node - 1]
        voters = ",".join(f"{i + 1}@{self.host}:{c}" for i, (_b, c) in enumerate(self.ports))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{broker},CONTROLLER://{self.host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{broker}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.node_dir(node) / "data"),
            **shared_properties(self.nodes),
        }
        path = self.node_dir(node) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), "utf-8")
        return path

    def _java(self, main: str, *args: str, heap: str = "") -> list[str]:
        assert self._libs is not None
        log4j = self.data_dir / "log4j2.properties"
        return [
            java_binary(),
            *(heap or self.heap).split(),
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self._libs}/*",
            main,
            *args,
        ]

    def _format(self, node: int, config: Path) -> None:
        if (self.node_dir(node) / "data" / "meta.properties").exists():
            return
        self.fresh = True
        done = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                # one argument: an id may start with "-" (base64url), which a separate
                # argument would make look like an option to the tool's parser
                f"--cluster-id={self.cluster_id}",
                "-c",
                str(config),
                "--ignore-formatted",
                heap="-Xmx256m",
            ),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise KafkaError(
                f"formatting node {node} failed: {last[0] if last else done.returncode}"
            )

    # -- life cycle -------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> KafkaCluster:
        java_binary()  # before the jars: without Java they are of no use
        self._libs = ensure_jars()
        self._plan()
        (self.data_dir / "log4j2.properties").write_text(LOG4J2, "utf-8")
        (self.data_dir / "bootstrap").unlink(missing_ok=True)
        try:
            for node in range(1, self.nodes + 1):
                self._format(node, self._write_config(node))
            for node in range(1, self.nodes + 1):
                self.start_node(node)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        (self.data_dir / "bootstrap").write_text(self.bootstrap + "\n", "utf-8")
        return self

    def start_node(self, node: int) -> None:
        """Start (or restart, after kill()) node `node` (1-based) in the background."""
        log = open(self.node_dir(node) / "server.log", "ab")  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.node_dir(node) / "server.properties")),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        finally:
            log.close()
        self._procs[node] = proc
        (self.node_dir(node) / "pid").write_text(f"{proc.pid}\n", "ascii")

    def _alive_check(self) -> None:
        for node, proc in self._procs.items():
            if proc.poll() is not None:
                tail = _tail(self.node_dir(node) / "server.log")
                raise KafkaError(
                    f"Kafka node {node} exited with code {proc.returncode}"
                    f"{': ' + tail if tail else ''}"
                )

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until every node is a live broker and a write with acks=all is acknowledged."""
        from confluent_kafka import KafkaException, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        deadline = time.monotonic() + timeout
        admin = AdminClient(quiet_config(self.bootstrap))
        rf, _ = replication_for(self.nodes)
        while True:
            self._alive_check()
            try:
                meta = admin.list_topics(timeout=2)
                if len(meta.brokers) == self.nodes:
                    if PROBE_TOPIC not in meta.topics:
                        futures = admin.create_topics([NewTopic(PROBE_TOPIC, 1, rf)])
                        for future in futures.values():
                            try:
                                future.result(timeout=10)
                            except KafkaException as exc:
                                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                                    raise
                    if self._probe_write(Producer):
                        return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"Apache Kafka on {self.bootstrap} did not accept writes within {timeout:.0f}s "
                    f"(see {self.data_dir}/node-*/server.log)"
                )
            time.sleep(0.2)  # polling the starting cluster, bounded by the deadline

    def _probe_write(self, producer_type: type) -> bool:
        """A write with acks=all, then a group offset commit: the first group request
        creates __consumer_offsets, which clients would otherwise wait for (and log)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        producer = producer_type(
            quiet_config(self.bootstrap, **{"acks": "all", "message.timeout.ms": 5000})
        )
        outcome: list[object] = []
        producer.produce(PROBE_TOPIC, b"ready", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(6)
        if not outcome or outcome[0] is not None:
            return False
        consumer = Consumer(quiet_config(self.bootstrap, **{"group.id": "seine-cluster-probe"}))
        try:
            consumer.commit(offsets=[TopicPartition(PROBE_TOPIC, 0, 1)], asynchronous=False)
        except KafkaException:
            return False
        finally:
            consumer.close()
        return True

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to one node (SIGKILL by default: a crash) and reap it."""
        proc = self._procs.get(node)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        proc.wait(timeout=60)
        (self.node_dir(node) / "pid").unlink(missing_ok=True)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every node at once (a controlled shutdown), SIGKILL what outlives it."""
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout
        for node, proc in self._procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            (self.node_dir(node) / "pid").unlink(missing_ok=True)
        self._procs.clear()
        (self.data_dir / "bootstrap").unlink(missing_ok=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def quiet_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """librdkafka client config that logs nothing (see quiet_logger)."""
    return {"bootstrap.servers": bootstrap, "log_level": 0, "logger": quiet_logger(), **extra}


def quiet_logger() -> logging.Logger:
    """A logger for librdkafka that drops its lines: a starting cluster refuses
    connections, and each refusal would be a line on stderr."""
    log = logging.getLogger("seine.kafka_local.librdkafka")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
    return log


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if " ERROR " in ln]
    return (errors or lines or [""])[-1][:300]


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node id that leads `topic`'s partition now (-1 while it has none)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(quiet_config(bootstrap))
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    return int(meta.partitions[partition].leader)


def cmd_broker(args: argparse.Namespace) -> int:
    """`seine broker kafka|tansu`: a local broker in the foreground until SIGINT/SIGTERM.

    Errors (no Java, no jars, a port in use) are one line on stderr and exit 2.
    """
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    if args.kind == "tansu":
        return _run_tansu(args, stop)
    try:
        if args.fetch_only:
            print(f"seine broker: Apache Kafka {kafka_version()} jars in {ensure_jars()}")
            return 0
        cluster = KafkaCluster(args.data_dir, args.nodes, base_port=args.port)
        cluster.start()
    except KafkaError as exc:
        print(f"seine broker: {exc}", file=sys.stderr)
        return 2
    print(
        f"seine broker: Apache Kafka {kafka_version()}, {args.nodes} node(s) on "
        f"{cluster.bootstrap} (data in {args.data_dir}); Ctrl-C stops it",
        flush=True,
    )
    reported: set[int] = set()
    try:
        while not stop.wait(1.0):
            for node, proc in list(cluster._procs.items()):
                if proc.poll() is not None and node not in reported:
                    reported.add(node)
                    print(
                        f"seine broker: node {node} exited with code {proc.returncode}",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        cluster.stop()
    print("seine broker: stopped", flush=True)
    return 0


def _run_tansu(args: argparse.Namespace, stop: threading.Event) -> int:
    from streams.kafka.broker import BrokerError, EmbeddedBroker

    try:
        broker = EmbeddedBroker(port=args.port).start()
    except BrokerError as exc:
        print(f"seine broker: {exc}", file=sys.stderr)
        return 2
    print(
        f"seine broker: Tansu (memory storage) on {broker.bootstrap}; Ctrl-C stops it", flush=True
    )
    try:
        stop.wait()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["docker-env"]:
        sys.stdout.write(docker_env(3))
    else:
        print("usage: python -m streams.kafka.local docker-env", file=sys.stderr)
        raise SystemExit(2)
