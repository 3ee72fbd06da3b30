"""Fault harness (issue 11): 3 workers crawl the demo web while faults hit them every few
seconds, several times. Judged by the page stores and the demo server's own request log:

    .venv/bin/python bench/faults.py                 # 12 hosts x 25 pages, 3 kills
    .venv/bin/python bench/faults.py --hosts 24 --pages 30 --kills 4 --every 8
    .venv/bin/python bench/faults.py --broker kafka --nodes 3 --scenario all

The scenarios (--scenario; each round is one fault, --kills rounds, --every apart):

* worker (the default): SIGKILL a worker, restart it a second later;
* leader: SIGKILL the broker node leading the most frontier partitions, restart it
  --broker-restart-after seconds later (Apache Kafka only: --broker kafka --nodes 3,
  replication factor 3, min.insync.replicas 2);
* rebalance: start one more worker, and once it holds partitions stop another (SIGTERM);
* all: the three in turn (leader, worker, rebalance, leader, ...).

With --broker kafka the harness starts its own --nodes node Apache Kafka
(streams/kafka_local.py); by default it runs on the embedded Tansu. The same runs,
smaller, are tests: tests/integration/test_faults.py (Tansu, worker kills) and
tests/integration/test_kafka_faults.py (3-node Kafka, each scenario). Exit status 1
when a property below does not hold; the report is printed as JSON.

* every reachable allowed page is stored, and each URL has exactly one response record
  across the workers' stores (a copy fetched again after a kill is a revisit at most);
* pages fetched more than once are counted, and stay within the fetches that can have
  been in flight at the faults: at most one per host (politeness) at each rebalance a
  fault brings, for the hosts whose crawl was not over then: two for a worker's kill
  (the dead member leaves, the restarted one joins), one for a worker added or
  stopped, one for a broker's kill (its partitions' leadership moves; no member
  leaves, but a worker whose commit fails there may rejoin);
* no host ever saw two requests at once, or two closer than its delay;
* per partition the victim held when it was killed (a worker's partitions, or the
  frontier partitions a broker led), the recovery time: from the kill to that
  partition's first request after it (partitions whose hosts were done by then have
  none);
* the crawl ends by itself: every page stored and every worker quiet, with no worker
  exiting on its own along the way (one that does fails the run, with its log).

Bounded: at most --kills rounds, --every seconds apart, and a deadline on the whole run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import Producer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import topology  # noqa: E402
from streams.admin import ensure_topics, resolve_replication  # noqa: E402
from streams.broker import EmbeddedBroker  # noqa: E402
from streams.demo.server import read_request_log, start_server_process  # noqa: E402
from streams.demo.webgen import WebSpec  # noqa: E402
from streams.kafka_local import KafkaCluster, quiet_config  # noqa: E402
from streams.multiworker import read_status  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.stages.link_extract import HANDOFF_MISS_REASON  # noqa: E402
from streams.storeset import open_stores  # noqa: E402

#: Timestamps come from the server's clock and the harness's: a millisecond of slack.
SLACK = 0.001

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
#: What each Faust consumer fix logs when it acts (see the report's consumer_fixes_acted).
CONSUMER_FIX_LINES = {
    "guard_commits": "] held: offset ",
    "refetch_skips": "were skipped by the fetch: reading them again",
    "hold_gaps": "were skipped by the fetch: the commit waits",
}
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


def run(
    broker: EmbeddedBroker | KafkaCluster,
    tmp_path: Path,
    plan: FaultPlan,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """One fault run; returns the report (AssertionError when a property fails)."""
    begun = time.monotonic()
    until = begun + plan.deadline
    cluster = broker if isinstance(broker, KafkaCluster) else None
    if cluster is not None:
        plan = kafka_plan(plan)  # Kafka refuses Tansu's short session timeouts
    rounds = plan.rounds()
    if "kill leader" in rounds:
        assert cluster is not None and cluster.nodes >= 3, (
            "killing a leader needs an Apache Kafka of 3 nodes or more (min.insync.replicas 2)"
        )
    app_id = f"faults{uuid.uuid4().hex[:8]}"
    settings = resolve_replication(
        Settings(app_id=app_id, bootstrap=broker.bootstrap, partitions=plan.partitions)
    )
    ensure_topics(settings)
    frontier = topology.topic_name(app_id, topology.FRONTIER)
    log = tmp_path / "requests.jsonl"
    root = tmp_path / "data"
    timeline: dict[str, float] = {}

    def mark(what: str) -> None:
        timeline[what] = round(time.monotonic() - begun, 2)
        say(f"faults: {timeline[what]:6.2f} s {what}")

    with start_server_process(plan.spec, log, tmp_path / "web") as server:
        expected = set(server.web.reachable_allowed())
        args = ["--bootstrap", broker.bootstrap, "--partitions", str(plan.partitions)]
        args += ["--allow-private", "--delay", str(plan.delay)]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        env = crawl_env(app_id, plan, kafka=cluster is not None)
        root.mkdir(parents=True, exist_ok=True)
        workers = Workers(root, args, env, plan)
        workers.spare()  # more come as workers start: imports in parallel are slower
        kills: list[Kill] = []

        def status(index: int) -> dict[str, Any] | None:
            return read_status(root / f"worker-{index}" / "status.json")

        def settled(index: int) -> bool:
            workers.check_alive()
            s = status(index)
            return bool(s and s["partitions"] and not s["rebalancing"])

        def one_owner_each() -> bool:
            """Every worker settled, and together they hold each host partition once: a
            member the group dropped (a missed heartbeat on a loaded machine) still
            reports its old partitions until it notices, and a crawl started then
            has two owners dispatching to the same hosts."""
            workers.check_alive()
            statuses = [status(i) for i in workers.procs]
            if not all(s and s["partitions"] and not s["rebalancing"] for s in statuses):
                return False
            held = sorted(p for s in statuses if s for p in s["partitions"])
            return held == list(range(plan.partitions))

        def every_one_settled(newcomer: int) -> bool:
            """`newcomer` up and in the group, and the partitions each held once."""
            workers.check_alive()
            # its status says nothing of a group it holds no partition of: its log does
            log_text = workers.logs[newcomer].read_text(encoding="utf-8", errors="replace")
            if "Successfully synced group" not in log_text:
                return False
            statuses = [status(i) for i in workers.procs]
            if not all(s and not s["rebalancing"] for s in statuses):
                return False
            held = sorted(p for s in statuses if s for p in s["partitions"])
            return held == list(range(plan.partitions))

        def kill_worker(victim: int) -> None:
            # A kill of a worker that holds nothing (still joining) tests nothing.
            wait_for(functools.partial(settled, victim), until, f"worker {victim} to settle")
            held = list((status(victim) or {}).get("partitions", []))
            workers.kill(victim)
            kills.append(Kill(time.time(), victim, held))
            mark(f"worker {victim} killed (held partitions {held})")
            time.sleep(plan.restart_after)  # the fault schedule
            workers.start(victim)

        def kill_leader() -> None:
            assert cluster is not None
            # the previous victim back in every ISR first: see replicas_in_sync
            wait_for(
                lambda: replicas_in_sync(cluster.bootstrap, cluster.nodes),
                until,
                "every replica in sync",
            )
            led = frontier_leaders(cluster.bootstrap, frontier)
            node = Counter(led.values()).most_common(1)[0][0]
            held = sorted(p for p, n in led.items() if n == node)
            cluster.kill(node)
            kills.append(Kill(time.time(), node, held, kind="kill leader"))
            mark(f"broker node {node} killed (led frontier partitions {held})")
            time.sleep(plan.broker_restart_after)  # the fault schedule
            cluster.start_node(node)
            mark(f"broker node {node} restarted")
            # A node killed again while it starts would be one long outage, not two.
            wait_for(lambda: node_serving(cluster, node), until, f"broker node {node} serving")
            mark(f"broker node {node} serving")

        def rebalance() -> None:
            # the newcomer joins a settled group, so that the stop is a rebalance of its own
            wait_for(one_owner_each, until, "every worker holding partitions")
            added = workers.next_index()
            workers.start(added)
            kills.append(Kill(time.time(), added, [], kind="add worker"))
            mark(f"worker {added} added")
            # Faust's assignor may give the newcomer nothing (6 partitions, 3 members
            # holding 2 each stay as they are): wait for it to be in the group, settled
            wait_for(lambda: every_one_settled(added), until, f"worker {added} in the group")
            mark(f"worker {added} holds {(status(added) or {}).get('partitions')}")
            victim = min(workers.procs)  # the oldest: it held partitions longest
            held = list((status(victim) or {}).get("partitions", []))
            at = time.time()
            workers.stop_one(victim, until)
            kills.append(Kill(at, victim, held, kind="stop worker"))
            mark(f"worker {victim} stopped (held partitions {held})")

        try:
            # One at a time: members joining Tansu's group at once went through
            # rebalance after rebalance (tests/integration/test_shortlinks.py saw it too).
            for index in range(plan.workers):
                workers.start(index)
                if plan.stagger or index == plan.workers - 1:
                    wait_for(one_owner_each, until, f"{index + 1} workers holding partitions")
                    mark(f"{index + 1} workers hold partitions")
            producer = Producer(
                {"bootstrap.servers": broker.bootstrap, "log.connection.close": False}
            )
            seeds = topology.topic_name(app_id, topology.SEEDS)
            for url in server.seeds:
                producer.produce(seeds, url.encode(), partition=_partition(url, plan))
            assert producer.flush(10) == 0
            del producer  # else librdkafka keeps reconnecting after the broker stops
            wait_for(log.exists, until, "the first request")
            mark("first request")

            next_kill = time.monotonic() + plan.every
            for number, kind in enumerate(rounds):
                # the fault schedule itself, not synchronisation
                time.sleep(max(0.0, next_kill - time.monotonic()))
                workers.check_alive()
                if len(_page_requests(log)) >= len(expected):
                    break  # the crawl is over: no point killing more
                if kind == "kill worker":
                    alive = sorted(workers.procs)
                    kill_worker(alive[number % len(alive)])
                elif kind == "kill leader":
                    kill_leader()
                else:
                    rebalance()
                next_kill = time.monotonic() + plan.every

            def all_stored() -> bool:
                workers.check_alive()
                try:
                    with open_stores(root) as store:
                        return expected <= set(store.urls())
                except FileNotFoundError:  # no worker has stored a page yet
                    return False

            try:
                wait_for(all_stored, until, "every page stored")
            except AssertionError as timed_out:
                raise AssertionError(
                    f"{timed_out}\n"
                    f"{stall_diagnosis(root, expected, log, status, sorted(workers.procs))}"
                ) from None
            mark("every page stored")

            # Quiet: every worker up, holding partitions, with nothing queued, in
            # flight or unsent (a late duplicate fetch would be in flight or queued).
            def quiet() -> bool:
                workers.check_alive()
                statuses = [status(i) for i in workers.procs]
                return all(
                    s is not None
                    and not s["rebalancing"]
                    and not s["busy"]
                    and s["partitions"]
                    and time.time() - s["at"] < 1.0
                    for s in statuses
                )

            wait_for(quiet, until, "every worker quiet")
            mark("every worker quiet")
        finally:
            workers.stop()
    requests = read_request_log(log)
    report = judge(requests, expected, kills, root, server.port, plan)
    report["scenario"] = plan.scenario
    report["broker"] = f"kafka, {cluster.nodes} nodes" if cluster else "tansu"
    report["timeline_seconds"] = timeline
    # from the first request to the last page stored: the crawl, faults and all
    report["crawl_seconds"] = round(timeline["every page stored"] - timeline["first request"], 2)
    return report


#: Worker log lines worth showing when a run stalls.
_NOTABLE = ("Traceback", "ERROR", "Error", "CRITICAL", "crashed", "stall")


def stall_diagnosis(
    root: Path,
    expected: set[str],
    log: Path,
    status: Callable[[int], dict[str, Any] | None],
    indices: list[int],
) -> str:
    """What a run that never stored every page left behind, for the failure message:
    which pages are missing and whether the server saw them asked for, what each
    worker's status says it holds, and the notable lines of the workers' logs. A stall
    on a CI machine is seen once; this is what there is to read afterwards."""
    try:
        with open_stores(root) as store:
            missing = sorted(expected - set(store.urls()))
    except FileNotFoundError as error:
        missing = [f"(page stores unreadable: {error})"]
    asked = Counter((r["host"], r["path"]) for r in read_request_log(log)) if log.exists() else {}
    lines = [f"{len(missing)} pages missing:"]
    for url in missing[:20]:
        parts = urlsplit(url)
        lines.append(f"  {url} (requested {asked.get((parts.hostname, parts.path), 0)} times)")
    keys = ("partitions", "rebalancing", "busy", "queued", "in_flight", "lagging", "sent", "done")
    for index in indices:
        s = status(index)
        shown = {key: s.get(key) for key in keys} if s else None
        age = f", {time.time() - float(s['at']):.1f} s old" if s else ""
        lines.append(f"worker {index} status{age}: {json.dumps(shown)}")
    for path in sorted(root.glob("spare-*.log")):
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        notable = [line for line in text if any(word in line for word in _NOTABLE)]
        if notable:
            lines.append(f"{path.name}: {len(notable)} notable lines, the last ones:")
            lines += [f"  {line[:300]}" for line in notable[-15:]]
    return "\n".join(lines)


def _partition(url: str, plan: FaultPlan) -> int:

    return topology.url_partition(url, plan.partitions)


def _page_requests(log: Path) -> list[dict[str, Any]]:
    return [r for r in read_request_log(log) if r["path"] != "/robots.txt"]


def judge(
    requests: list[dict[str, Any]],
    expected: set[str],
    kills: list[Kill],
    root: Path,
    port: int,
    plan: FaultPlan,
) -> dict[str, Any]:
    assert len(kills) >= 2, "the crawl ended before the faults: make the web bigger"
    # stored: every reachable page; each URL once as a response
    with open_stores(root) as store:
        stored = set(store.urls())
        cdxj = io.StringIO()
        store.export_cdxj(cdxj)
    responses: Counter[str] = Counter()
    for line in cdxj.getvalue().splitlines():
        fields = json.loads(line.split(" ", 2)[2])
        if fields.get("mime") != "warc/revisit":
            responses[fields["url"]] += 1
    missing = expected - stored
    assert not missing, f"{len(missing)} pages lost, e.g. {sorted(missing)[:5]}"
    assert stored <= expected, sorted(stored - expected)[:5]
    stored_twice = {u: n for u, n in responses.items() if n > 1}

    # politeness, from the server's log: per host, no overlap and at least the delay apart
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        by_host[r["host"]].append(r)
    too_close: list[tuple[str, float]] = []
    too_close_detail: list[str] = []
    too_close_at: list[float] = []
    t0 = min((r["start"] for r in requests), default=0.0)
    for host, rs in by_host.items():
        rs.sort(key=lambda r: r["start"])
        for a, b in itertools.pairwise(rs):
            gap = b["start"] - a["end"]
            if gap < plan.delay - SLACK:
                too_close.append((host, round(gap, 4)))
                too_close_at.append(b["start"])
                too_close_detail.append(
                    f"{host}: {a['path']} {a['start'] - t0:.3f}-{a['end'] - t0:.3f} s then "
                    f"{b['path']} {b['start'] - t0:.3f}-{b['end'] - t0:.3f} s"
                )

    # fetched more than once, against what can have been in flight at the kills
    pages = [
        f"http://{r['host']}:{port}{r['path']}" for r in requests if r["path"] != "/robots.txt"
    ]
    twice = {u: n for u, n in Counter(pages).items() if n > 1}
    extra = sum(n - 1 for n in twice.values())
    for kill in kills:
        kill.active_hosts = sum(
            1
            for rs in by_host.values()
            if rs[0]["start"] <= kill.at <= max(r["end"] for r in rs) + plan.delay
        )
    in_flight_bound = sum(REBALANCES[kill.kind] * kill.active_hosts for kill in kills)
    # pages whose body was in a hand-off cache that a kill or a rebalance took away
    # (streams/core/handoff.py): each is fetched again, and its worker logs it
    handoff_refetches = sum(
        path.read_text(encoding="utf-8", errors="replace").count(HANDOFF_MISS_REASON)
        for path in root.glob("spare-*.log")
    )

    # recovery of each partition the victim held: kill → its first request after it
    partition_of = {h: topology.host_partition(h, plan.partitions) for h in by_host}
    recovery: dict[str, dict[int, float | None]] = {}
    for k, kill in enumerate(kills):
        firsts: dict[int, float | None] = dict.fromkeys(kill.partitions)
        for r in requests:
            p = partition_of[r["host"]]
            if r["start"] > kill.at and p in firsts:
                first = firsts[p]
                firsts[p] = r["start"] if first is None else min(first, r["start"])
        if not kill.partitions:
            continue  # a worker added holds nothing yet
        recovery[f"{k + 1}: {kill.describe()}"] = {
            p: None if t is None else round(t - kill.at, 2) for p, t in sorted(firsts.items())
        }
    figures = [t for by_p in recovery.values() for t in by_p.values() if t is not None]
    report = {
        "pages": len(expected),
        "pages_stored": len(stored & expected),
        "requests": len(requests),
        # SIGKILLs, of workers and of broker nodes
        "kills": sum(1 for kill in kills if kill.kind.startswith("kill")),
        "faults": [kill.describe() for kill in kills],
        "fetched_more_than_once": len(twice),
        "extra_fetches": extra,
        "in_flight_bound_at_kills": in_flight_bound,
        "handoff_refetches": handoff_refetches,
        "urls_with_two_responses_stored": len(stored_twice),
        "requests_closer_than_the_delay": len(too_close),
        # requests delivered twice while in flight, started once (Frontier.claim)
        "duplicate_requests_refused": sum(
            path.read_text(encoding="utf-8", errors="replace").count("not started twice")
            for path in root.glob("spare-*.log")
        ),
        # the Faust consumer fixes at work (streams/kafka_tuning.py guard_commits,
        # streams/consumer_state.py refetch_skips and hold_gaps): each line a message
        # Faust 0.15.3 would have committed over unhandled, i.e. lost
        "consumer_fixes_acted": {
            name: sum(
                path.read_text(encoding="utf-8", errors="replace").count(line)
                for path in root.glob("spare-*.log")
            )
            for name, line in CONSUMER_FIX_LINES.items()
        },
        "recovery_seconds_by_partition": recovery,
        "recovery_seconds_max": max(figures, default=None),
    }
    kill_times = ", ".join(
        f"{k.describe()} at {k.at - t0:.3f} s (partitions {k.partitions})" for k in kills
    )
    assert not too_close, (
        f"requests closer than the delay (or overlapping): {too_close[:5]}; "
        f"{'; '.join(too_close_detail[:5])}; kills: {kill_times}; "
        f"worker log lines around them (t0 = first request, {t0:.3f}):\n"
        + "\n".join(worker_log_lines(root, too_close_at[:3], t0))
    )
    assert not stored_twice, f"stored twice: {sorted(stored_twice)[:5]} ({report})"
    assert extra <= in_flight_bound + handoff_refetches, (
        extra,
        in_flight_bound,
        handoff_refetches,
        sorted(twice)[:5],
    )
    return report


#: Worker log lines that say what the group and the fetch gate did around a failure.
LOG_SIGNS = (
    "Heartbeat",
    "Revoking",
    "Joined group",
    "Successfully synced",
    "Seek stream partitions",
    "Worker ready",
    "rebalance:",
    "frontier:",
    "fetch:",
    "membership",
    "Marking the coordinator",
)


def worker_log_lines(
    root: Path, around: list[float], t0: float, window: float = 4.0, limit: int = 60
) -> list[str]:
    """The workers' log lines (every process's log under `root`) about the group and
    the fetch gate within `window` seconds of the times `around`, oldest first, each
    with its process's log file and its time from `t0`. The logs stay in the run's
    directory; this puts what matters into the failure message."""
    found: list[tuple[float, str]] = []
    for path in sorted(root.glob("spare-*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith("[20") or not any(sign in line for sign in LOG_SIGNS):
                continue
            try:
                at = time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))
                at += int(line[21:24]) / 1000.0
            except ValueError:
                continue
            if any(abs(at - t) <= window for t in around):
                found.append((at, f"{at - t0:8.3f} s {path.name}: {line[26:200]}"))
    found.sort()
    return [text for _, text in found[:limit]]


def kafka_plan(plan: FaultPlan) -> FaultPlan:
    """`plan` with the group timings Apache Kafka accepts."""
    # Apache Kafka refuses session timeouts under its group.min.session.timeout.ms (6 s
    # by default); a rebalance then waits up to the rebalance timeout for every member.
    return dataclasses.replace(
        plan, session_timeout=6.0, rebalance_timeout=6.0, heartbeat_interval=1.0
    )


def run_on_own_broker(
    work: Path,
    plan: FaultPlan,
    kind: str = "tansu",
    nodes: int = 3,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """One run of `plan` on a broker started for it under `work`: the embedded Tansu,
    or an Apache Kafka of `nodes` nodes (with kafka_plan's timings)."""
    work.mkdir(parents=True, exist_ok=True)
    if kind == "kafka":
        started = time.monotonic()
        with KafkaCluster(work / "kafka", nodes) as cluster:
            say(f"faults: {nodes}-node Apache Kafka up in {time.monotonic() - started:.1f} s")
            return run(cluster, work, kafka_plan(plan), say=say)
    with EmbeddedBroker(log_path=work / "tansu.log") as broker:
        return run(broker, work, plan, say=say)


def main() -> int:
    parser = argparse.ArgumentParser(description="3 workers, faults every few seconds")
    plan = FaultPlan()
    parser.add_argument("--hosts", type=int, default=plan.spec.hosts)
    parser.add_argument("--pages", type=int, default=plan.spec.pages_per_host)
    parser.add_argument(
        "--kills", type=int, help=f"fault rounds (default {plan.kills}, 6 for --scenario all)"
    )
    parser.add_argument("--every", type=float, default=plan.every)
    parser.add_argument("--delay", type=float, default=plan.delay)
    parser.add_argument("--keep", help="keep the run's files (logs, stores) here")
    parser.add_argument("--together", action="store_true", help="start the workers at once")
    parser.add_argument("--deadline", type=float, default=plan.deadline, help="seconds, in all")
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    parser.add_argument("--nodes", type=int, default=3, help="Apache Kafka nodes (--broker kafka)")
    parser.add_argument(
        "--scenario",
        default=plan.scenario,
        help=f"one of {', '.join(SCENARIOS)}, or several comma-separated (each on its own "
        "broker, one report per scenario)",
    )
    parser.add_argument(
        "--broker-restart-after",
        type=float,
        default=plan.broker_restart_after,
        help="seconds from a broker node's kill to its restart",
    )
    args = parser.parse_args()
    scenarios = [name.strip() for name in args.scenario.split(",") if name.strip()]
    unknown = [name for name in scenarios if name not in SCENARIOS]
    if unknown or not scenarios:
        parser.error(f"--scenario: unknown {unknown}; choose from {', '.join(SCENARIOS)}")
    kills_brokers = "leader" in scenarios or "all" in scenarios
    if kills_brokers and (args.broker != "kafka" or args.nodes < 3):
        parser.error("--scenario leader/all kill a broker: --broker kafka --nodes 3 (or more)")
    reports: dict[str, Any] = {}
    print(f"faults: load average {os.getloadavg()[0]:.1f}", flush=True)
    for scenario in scenarios:
        kills = args.kills if args.kills is not None else (6 if scenario == "all" else plan.kills)
        one = FaultPlan(
            spec=WebSpec(hosts=args.hosts, pages_per_host=args.pages, seed=31),
            kills=kills,
            every=args.every,
            delay=args.delay,
            stagger=not args.together,
            deadline=args.deadline,
            scenario=scenario,
            broker_restart_after=args.broker_restart_after,
        )
        with tempfile.TemporaryDirectory(prefix="seine-faults-") as tmp:
            work = Path(args.keep) / scenario if args.keep else Path(tmp)
            try:
                reports[scenario] = run_on_own_broker(
                    work, one, args.broker, args.nodes, say=lambda line: print(line, flush=True)
                )
            except AssertionError as exc:
                print(f"faults: {scenario}: FAILED: {exc}")
                return 1
    print(json.dumps(reports[scenarios[0]] if len(scenarios) == 1 else reports, indent=1))
    print(f"faults: load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
