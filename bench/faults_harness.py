"""The fault harness of bench/faults.py: the plan of a run, its faults, the worker
processes (restarted through warm spares), and what it waits for on the broker."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.demo.webgen import WebSpec
from streams.kafka.local import KafkaCluster, quiet_config

REPO = Path(__file__).resolve().parents[1]


#: --scenario: the faults of each round, in turn (see the module docstring).
SCENARIOS: dict[str, tuple[str, ...]] = {
    "worker": ("kill worker",),
    "leader": ("kill leader",),
    "rebalance": ("rebalance",),
    "all": ("kill leader", "kill worker", "rebalance"),
}


#: Rebalances each fault brings: a kill's dead member leaves and its restart joins; a
#: worker added or stopped is one; a broker's kill moves leaders, and at most makes a
#: member rejoin (a commit refused by a coordinator that moved).


REBALANCES = {"kill worker": 2, "kill leader": 1, "add worker": 1, "stop worker": 1}


@dataclass(frozen=True)
class FaultPlan:
    """What to crawl, how often to kill, and the group timings."""

    spec: WebSpec = field(default_factory=lambda: WebSpec(hosts=12, pages_per_host=25, seed=31))
    workers: int = 3
    partitions: int = 6
    kills: int = 3
    #: Seconds from the first request to the first kill, and between kills.
    every: float = 6.0
    #: Seconds from a kill to the victim's restart.
    restart_after: float = 1.0
    #: Seconds between two requests to one host.
    delay: float = 0.1
    commit_interval: float = 0.5
    # A SIGKILLed worker is noticed after the session timeout, or sooner: its restart
    # joins at once, and the rebalance that starts waits the rebalance timeout for it.
    session_timeout: float = 4.0
    rebalance_timeout: float = 2.0
    heartbeat_interval: float = 1.0
    #: Bound on the whole run, from the first worker's start.
    deadline: float = 180.0
    #: Start the workers one at a time (each joins a settled group), or all at once.
    stagger: bool = True
    #: What each round does (SCENARIOS); "kill leader" needs a KafkaCluster.
    scenario: str = "worker"
    #: Seconds from a broker node's SIGKILL to its restart.
    broker_restart_after: float = 4.0
    #: A Crawl-delay for the web's first host (its robots.txt), 0 for none: that
    #: host's crawl then lasts at least its pages times this, so every fault lands
    #: mid-crawl however long a broker node takes to restart (10 to 36 s seen).
    slow_host_delay: float = 0.0

    def rounds(self) -> list[str]:
        kinds = SCENARIOS[self.scenario]
        return [kinds[i % len(kinds)] for i in range(self.kills)]


@dataclass
class Kill:
    """One fault (the name is from when every fault was a worker's SIGKILL)."""

    at: float  # time.time() of the fault
    worker: int  # the worker index, or the broker node id for "kill leader"
    partitions: list[int]  # what the victim held then (a node: the frontier ones it led)
    active_hosts: int = 0  # hosts whose crawl was not over at the fault (from the log)
    kind: str = "kill worker"  # a key of REBALANCES

    def describe(self) -> str:
        what = "node" if self.kind == "kill leader" else "worker"
        return f"{self.kind} ({what} {self.worker})"


#: A worker process started ahead of need: it does the slow part of a start (imports,
#: seconds on a loaded machine) and then waits for its go file, which names its data dir
#: and arguments. A restart through a spare is still a new process joining the group,
#: from the same files, as after a real crash; it just does not measure Python's imports.
SPARE = """
import json, os, sys, time
from pathlib import Path
import streams.app, streams.cli
go, give_up = Path(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while not go.exists():
    if time.monotonic() > give_up:
        sys.exit(0)
    time.sleep(0.02)
order = json.loads(go.read_text())
os.environ.update(order["env"])
sys.exit(streams.cli.main(order["argv"]))
"""


class Workers:
    """The worker processes of one run, restarted through warm spares."""

    def __init__(self, root: Path, args: list[str], env: dict[str, str], plan: FaultPlan):
        self.root, self.args, self.env, self.plan = root, args, env, plan
        self.procs: dict[int, Any] = {}
        #: the log of the process running each worker index now
        self.logs: dict[int, Path] = {}
        self._spares: list[tuple[Any, Path]] = []
        self._made = 0
        self._started = 0

    def spare(self) -> None:
        n = self._made
        self._made += 1
        go = self.root / f"spare-{n}.go"
        proc = subprocess.Popen(
            [sys.executable, "-c", SPARE, str(go), str(self.plan.deadline)],
            env=self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=open(self.root / f"spare-{n}.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        self._spares.append((proc, go))

    def next_index(self) -> int:
        """A worker index never used in this run (a worker added mid-crawl)."""
        return self._started

    def start(self, index: int) -> None:
        """Start worker `index` on its data dir (a fresh status file says it is up)."""
        if not self._spares:
            self.spare()
        proc, go = self._spares.pop(0)
        data = self.root / f"worker-{index}"
        data.mkdir(parents=True, exist_ok=True)
        (data / "status.json").unlink(missing_ok=True)
        order = {
            "env": {
                "SEINE_DATA_DIR": str(data),
                "SEINE_STATUS_FILE": str(data / "status.json"),
                "SEINE_WORKER_ID": f"worker{index}",
            },
            "argv": ["worker", *self.args],
        }
        tmp = go.with_suffix(".tmp")
        tmp.write_text(json.dumps(order), encoding="utf-8")
        tmp.replace(go)
        self.procs[index] = proc
        self.logs[index] = go.with_suffix(".log")
        self._started = max(self._started, index + 1)
        self.spare()  # the next restart's, importing while this one runs

    def kill(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait(10)

    def stop_one(self, index: int, until: float) -> None:
        """SIGTERM worker `index` (it leaves the group) and wait for it to exit."""
        proc = self.procs.pop(index)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(max(1.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {index} did not exit after SIGTERM") from None

    def check_alive(self) -> None:
        """AssertionError naming a worker that exited on its own, with its log's end."""
        for index, proc in self.procs.items():
            if proc.poll() is not None:
                lines = self.logs[index].read_text(encoding="utf-8", errors="replace")
                tail = "\n".join(lines.splitlines()[-25:])
                raise AssertionError(
                    f"worker {index} exited by itself with code {proc.returncode}; "
                    f"{self.logs[index].name} ends:\n{tail}"
                )

    def stop(self) -> None:
        every = [*self.procs.values(), *(proc for proc, _ in self._spares)]
        for proc in every:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in every:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


#: What Faust logs, every 5 s, for a changelog partition its recovery gets nothing of.
STALL_LINE = "since recovery start"


class RecoveryStall(AssertionError):
    """A run that timed out while a worker's table recovery stood still: the known
    limit of docs/OPERATIONS.md ("When a broker dies"), not a new failure."""


def recovery_stall(root: Path) -> RecoveryStall | None:
    """The known stall, if a worker's log under `root` shows it: the partitions Faust's
    recovery received nothing of, by log."""
    stuck: dict[str, set[str]] = {}
    for path in sorted(root.glob("spare-*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if STALL_LINE in line and "No event received for active tp" in line:
                tp = line.split("active tp ", 1)[1].split(" since", 1)[0]
                stuck.setdefault(path.name, set()).add(tp)
    if not stuck:
        return None
    where = "; ".join(f"{log}: {', '.join(sorted(tps))}" for log, tps in stuck.items())
    return RecoveryStall(f"a worker's table recovery stood still (known limit): {where}")


def wait_for(condition: Callable[[], bool], until: float, what: str) -> None:
    """Poll `condition` until it holds; AssertionError at the monotonic time `until`."""
    while not condition():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling a condition, bounded by the deadline


def crawl_env(app_id: str, plan: FaultPlan, kafka: bool = False) -> dict[str, str]:
    env = {
        **os.environ,
        "SEINE_APP_ID": app_id,
        "SEINE_FETCH_MAX_WAIT_MS": "20",
        "SEINE_LOG_LEVEL": "info",
        "SEINE_SESSION_TIMEOUT": str(plan.session_timeout),
        "SEINE_REBALANCE_TIMEOUT": str(plan.rebalance_timeout),
        "SEINE_HEARTBEAT_INTERVAL": str(plan.heartbeat_interval),
        # Tansu reports highwaters below offsets it served (Settings docstring);
        # with the check on, restarted workers crashed with ConsistencyError.
        "SEINE_RECOVERY_CONSISTENCY_CHECK": "false",
        "SEINE_COMMIT_INTERVAL": str(plan.commit_interval),
    }
    if kafka:
        # Kafka's highwaters are exact: Faust's recovery check stays on there.
        del env["SEINE_RECOVERY_CONSISTENCY_CHECK"]
    return env


def frontier_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> the node leading it now (-1 while it has none)."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(quiet_config(bootstrap)).list_topics(topic, timeout=10).topics[topic]
    return {p: int(m.leader) for p, m in meta.partitions.items()}


def node_serving(cluster: KafkaCluster, node: int) -> bool:
    """Whether the node's broker port accepts connections: a Kafka node opens it last,
    once the controller has unfenced it (its metadata caught up)."""
    pid = int((cluster.node_dir(node) / "pid").read_text("ascii"))
    assert pid in cluster.pids, (
        f"broker node {node} exited; see {cluster.node_dir(node) / 'server.log'}"
    )
    try:
        socket.create_connection((cluster.host, cluster.ports[node - 1][0]), timeout=1).close()
    except OSError:
        return False
    return True


def replicas_in_sync(bootstrap: str, nodes: int) -> bool:
    """Every node a live broker, and every partition of every topic with all its
    replicas in sync: a second node killed before the first one caught up would leave
    partitions under min.insync.replicas, and no write there would be acknowledged."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        meta = AdminClient(quiet_config(bootstrap)).list_topics(timeout=5)
    except KafkaException:
        return False
    if len(meta.brokers) < nodes:
        return False
    return all(
        len(part.isrs) == len(part.replicas)
        for topic in meta.topics.values()
        for part in topic.partitions.values()
    )


def kafka_plan(plan: FaultPlan) -> FaultPlan:
    """`plan` with the group timings Apache Kafka accepts."""
    # Apache Kafka refuses session timeouts under its group.min.session.timeout.ms (6 s
    # by default); a rebalance then waits up to the rebalance timeout for every member.
    return dataclasses.replace(
        plan, session_timeout=6.0, rebalance_timeout=6.0, heartbeat_interval=1.0
    )
