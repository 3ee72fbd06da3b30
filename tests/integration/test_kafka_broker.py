"""`seine broker kafka`: a local Apache Kafka cluster from the project's own files.

It runs in the foreground, writes DIR/bootstrap once the cluster accepts writes and
DIR/node-I/pid per node, and SIGTERM stops every node; what cannot work (no Java, no
jars, a port in use) is one line on stderr and exit 2, no traceback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.kafka import local as kafka_local
from streams.kafka.local import quiet_config
from tests.integration.conftest import REPO, run_seine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too: the foreground command reaps its nodes when it stops
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_three_nodes_run_until_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    cmd = [sys.executable, "-m", "streams.cli", "broker", "kafka", "--nodes", "3"]
    proc = subprocess.Popen(
        [*cmd, "--data-dir", str(data)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (data / "bootstrap").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no bootstrap file within 120 s"
            time.sleep(0.2)  # polling for the file, bounded by the deadline
        bootstrap = (data / "bootstrap").read_text().strip()
        assert len(bootstrap.split(",")) == 3
        pids = [int((data / f"node-{i}" / "pid").read_text()) for i in (1, 2, 3)]
        assert all(_alive(pid) for pid in pids)
        for i in (1, 2, 3):  # each node's log is on disk under DIR
            assert any((data / f"node-{i}" / "data").glob("__cluster_metadata-0/*.log"))

        # a topic replicated 3 ways takes a write every replica acknowledges
        topic = f"t{uuid.uuid4().hex[:8]}"
        admin = AdminClient(quiet_config(bootstrap))
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=30)
        deadline = time.monotonic() + 30
        while not (partitions := admin.list_topics(topic, timeout=10).topics[topic].partitions):
            assert time.monotonic() < deadline, "the new topic's metadata never came"
            time.sleep(0.1)  # metadata reaches every broker shortly after creation
        assert sorted(partitions[0].replicas) == [1, 2, 3]
        producer = Producer(quiet_config(bootstrap, acks="all"))
        errors: list[object] = []
        producer.produce(topic, b"hello", on_delivery=lambda err, _m: errors.append(err))
        producer.flush(30)
        assert errors == [None]
        consumer = Consumer(
            quiet_config(bootstrap, **{"group.id": "g", "auto.offset.reset": "earliest"})
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg.value()
        consumer.close()
        assert got == b"hello"

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "3 node(s)" in out and "stopped" in out
    assert not any(_alive(pid) for pid in pids)
    assert not (data / "bootstrap").exists()
    assert not any(data.glob("node-*/pid"))


def _one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_seine(
            ["broker", "kafka", "--data-dir", str(tmp_path / "c"), "--port", str(port)],
            env=dict(os.environ),
            timeout=60,
        )
    _one_line_error(done, "port", str(port), "in use")


def test_no_java_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it: no java, no mvn
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", "broker", "kafka", "--data-dir", str(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    _one_line_error(done, "Java")


def test_no_jars_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "SEINE_KAFKA_LIBS": str(tmp_path / "nothing-here")}
    done = run_seine(["broker", "kafka", "--data-dir", str(tmp_path / "c")], env=env, timeout=60)
    _one_line_error(done, "no Kafka jars")


def test_a_cluster_id_starting_with_a_dash_formats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1 in 64 random ids starts with "-" (base64url): the storage tool once read it
    # as an option and refused to format the node
    monkeypatch.setattr(kafka_local, "_cluster_id", lambda: "-dashed-cluster-id-0000")
    with kafka_local.KafkaCluster(tmp_path / "kafka", 1) as cluster:
        assert cluster.cluster_id == "-dashed-cluster-id-0000"
        assert (tmp_path / "kafka" / "bootstrap").read_text().strip() == cluster.bootstrap
