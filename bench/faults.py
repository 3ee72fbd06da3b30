"""Fault harness: 3 workers crawl the demo web while faults hit them every few
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
(streams/kafka/local.py); by default it runs on the embedded Tansu. The same runs,
smaller, are tests: tests/integration/test_faults.py (Tansu, worker kills) and
tests/integration/test_kafka_faults.py (3-node Kafka: leader, and all). Exit status 1
when a property below does not hold; the report is printed as JSON.

* every reachable allowed page is stored, and each URL has exactly one response record
  in the workers' stores read together (a copy fetched again after a kill is a revisit
  at most; one fetch both a killed worker and its successor wrote is one capture);
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

The plan, the workers and the broker checks are in bench/faults_harness.py, the judging
in bench/faults_judge.py; this script runs a plan (`run`, `run_on_own_broker`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import topology  # noqa: E402
from bench.faults_harness import (  # noqa: E402
    SCENARIOS,
    FaultPlan,
    Kill,
    Workers,
    crawl_env,
    frontier_leaders,
    kafka_plan,
    node_serving,
    recovery_stall,
    replicas_in_sync,
    wait_for,
)
from bench.faults_judge import judge, stall_diagnosis  # noqa: E402
from streams.demo.server import ServerProcess, read_request_log, start_server_process  # noqa: E402
from streams.demo.webgen import DemoWeb, WebSpec  # noqa: E402
from streams.kafka.admin import ensure_topics, resolve_replication  # noqa: E402
from streams.kafka.broker import EmbeddedBroker  # noqa: E402
from streams.kafka.local import KafkaCluster  # noqa: E402
from streams.ops.multiworker import read_status  # noqa: E402
from streams.settings import Settings  # noqa: E402
from streams.store.storeset import open_stores  # noqa: E402


class FaultRun:
    """One fault run under way: the workers of its app on the demo web's server, the
    faults done to them so far, and the timeline of what happened when."""

    def __init__(
        self,
        broker: EmbeddedBroker | KafkaCluster,
        plan: FaultPlan,
        app_id: str,
        server: ServerProcess,
        tmp_path: Path,
        begun: float,
        say: Callable[[str], None],
    ) -> None:
        self.plan, self.app_id, self.server, self.begun, self.say = plan, app_id, server, begun, say
        self.broker = broker
        self.cluster = broker if isinstance(broker, KafkaCluster) else None
        self.until = begun + plan.deadline
        self.frontier = topology.topic_name(app_id, topology.FRONTIER)
        self.log = tmp_path / "requests.jsonl"
        self.root = tmp_path / "data"
        self.timeline: dict[str, float] = {}
        self.expected = set(server.web.reachable_allowed())
        args = ["--bootstrap", broker.bootstrap, "--partitions", str(plan.partitions)]
        args += ["--allow-private", "--delay", str(plan.delay)]
        for host, addr in server.resolve.items():
            args += ["--resolve", f"{host}={addr}"]
        env = crawl_env(app_id, plan, kafka=self.cluster is not None)
        self.root.mkdir(parents=True, exist_ok=True)
        self.workers = Workers(self.root, args, env, plan)
        self.workers.spare()  # more come as workers start: imports in parallel are slower
        self.kills: list[Kill] = []

    def mark(self, what: str) -> None:
        self.timeline[what] = round(time.monotonic() - self.begun, 2)
        self.say(f"faults: {self.timeline[what]:6.2f} s {what}")

    def status(self, index: int) -> dict[str, Any] | None:
        return read_status(self.root / f"worker-{index}" / "status.json")

    def settled(self, index: int) -> bool:
        self.workers.check_alive()
        s = self.status(index)
        return bool(s and s["partitions"] and not s["rebalancing"])

    def one_owner_each(self) -> bool:
        """Every worker settled, and together they hold each host partition once: a
        member the group dropped (a missed heartbeat on a loaded machine) still
        reports its old partitions until it notices, and a crawl started then
        has two owners dispatching to the same hosts."""
        self.workers.check_alive()
        statuses = [self.status(i) for i in self.workers.procs]
        if not all(s and s["partitions"] and not s["rebalancing"] for s in statuses):
            return False
        held = sorted(p for s in statuses if s for p in s["partitions"])
        return held == list(range(self.plan.partitions))

    def every_one_settled(self, newcomer: int) -> bool:
        """`newcomer` up and in the group, and the partitions each held once."""
        self.workers.check_alive()
        # its status says nothing of a group it holds no partition of: its log does
        log_text = self.workers.logs[newcomer].read_text(encoding="utf-8", errors="replace")
        if "Successfully synced group" not in log_text:
            return False
        statuses = [self.status(i) for i in self.workers.procs]
        if not all(s and not s["rebalancing"] for s in statuses):
            return False
        held = sorted(p for s in statuses if s for p in s["partitions"])
        return held == list(range(self.plan.partitions))

    def kill_worker(self, victim: int) -> None:
        # A kill of a worker that holds nothing (still joining) tests nothing.
        wait_for(functools.partial(self.settled, victim), self.until, f"worker {victim} to settle")
        held = list((self.status(victim) or {}).get("partitions", []))
        self.workers.kill(victim)
        self.kills.append(Kill(time.time(), victim, held))
        self.mark(f"worker {victim} killed (held partitions {held})")
        time.sleep(self.plan.restart_after)  # the fault schedule
        self.workers.start(victim)

    def kill_leader(self) -> None:
        cluster = self.cluster
        assert cluster is not None
        # the previous victim back in every ISR first: see replicas_in_sync
        wait_for(
            lambda: replicas_in_sync(cluster.bootstrap, cluster.nodes),
            self.until,
            "every replica in sync",
        )
        led = frontier_leaders(cluster.bootstrap, self.frontier)
        node = Counter(led.values()).most_common(1)[0][0]
        held = sorted(p for p, n in led.items() if n == node)
        cluster.kill(node)
        self.kills.append(Kill(time.time(), node, held, kind="kill leader"))
        self.mark(f"broker node {node} killed (led frontier partitions {held})")
        time.sleep(self.plan.broker_restart_after)  # the fault schedule
        cluster.start_node(node)
        self.mark(f"broker node {node} restarted")
        # The next fault waits for it: a node killed again while it starts would be
        # one long outage, not two; and a worker restarted while a node restarts once
        # stalled in its table recovery for good (docs/OPERATIONS.md, "Known limits").
        wait_for(lambda: node_serving(cluster, node), self.until, f"broker node {node} serving")
        self.mark(f"broker node {node} serving")

    def rebalance(self) -> None:
        workers = self.workers
        # the newcomer joins a settled group, so that the stop is a rebalance of its own
        wait_for(self.one_owner_each, self.until, "every worker holding partitions")
        added = workers.next_index()
        workers.start(added)
        self.kills.append(Kill(time.time(), added, [], kind="add worker"))
        self.mark(f"worker {added} added")
        # Faust's assignor may give the newcomer nothing (6 partitions, 3 members
        # holding 2 each stay as they are): wait for it to be in the group, settled
        wait_for(lambda: self.every_one_settled(added), self.until, f"worker {added} in the group")
        self.mark(f"worker {added} holds {(self.status(added) or {}).get('partitions')}")
        victim = min(workers.procs)  # the oldest: it held partitions longest
        held = list((self.status(victim) or {}).get("partitions", []))
        at = time.time()
        workers.stop_one(victim, self.until)
        self.kills.append(Kill(at, victim, held, kind="stop worker"))
        self.mark(f"worker {victim} stopped (held partitions {held})")

    def crawl(self) -> None:
        """Start the workers, seed the crawl, do the faults, wait for its end; the
        workers are stopped whatever happens."""
        try:
            self.start_workers()
            self.seed()
            wait_for(self.log.exists, self.until, "the first request")
            self.mark("first request")
            self.fault_rounds()
            self.wait_all_stored()
            self.mark("every page stored")
            wait_for(self.quiet, self.until, "every worker quiet")
            self.mark("every worker quiet")
        finally:
            self.workers.stop()

    def start_workers(self) -> None:
        # One at a time: members joining Tansu's group at once went through
        # rebalance after rebalance (tests/integration/test_shortlinks.py saw it too).
        plan = self.plan
        for index in range(plan.workers):
            self.workers.start(index)
            if plan.stagger or index == plan.workers - 1:
                wait_for(self.one_owner_each, self.until, f"{index + 1} workers holding partitions")
                self.mark(f"{index + 1} workers hold partitions")

    def seed(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.broker.bootstrap, "log.connection.close": False}
        )
        seeds = topology.topic_name(self.app_id, topology.SEEDS)
        for url in self.server.seeds:
            producer.produce(seeds, url.encode(), partition=_partition(url, self.plan))
        assert producer.flush(10) == 0
        del producer  # else librdkafka keeps reconnecting after the broker stops

    def fault_rounds(self) -> None:
        workers = self.workers
        next_kill = time.monotonic() + self.plan.every
        for number, kind in enumerate(self.plan.rounds()):
            # the fault schedule itself, not synchronisation
            time.sleep(max(0.0, next_kill - time.monotonic()))
            workers.check_alive()
            if len(_page_requests(self.log)) >= len(self.expected):
                break  # the crawl is over: no point killing more
            if kind == "kill worker":
                alive = sorted(workers.procs)
                self.kill_worker(alive[number % len(alive)])
            elif kind == "kill leader":
                self.kill_leader()
            else:
                self.rebalance()
            next_kill = time.monotonic() + self.plan.every

    def all_stored(self) -> bool:
        self.workers.check_alive()
        try:
            with open_stores(self.root) as store:
                return self.expected <= set(store.urls())
        except FileNotFoundError:  # no worker has stored a page yet
            return False

    def wait_all_stored(self) -> None:
        try:
            wait_for(self.all_stored, self.until, "every page stored")
        except AssertionError as timed_out:
            diagnosis = stall_diagnosis(
                self.root, self.expected, self.log, self.status, sorted(self.workers.procs)
            )
            raise AssertionError(f"{timed_out}\n{diagnosis}") from None

    def quiet(self) -> bool:
        """Every worker up, holding partitions, with nothing queued, in flight or
        unsent (a late duplicate fetch would be in flight or queued)."""
        self.workers.check_alive()
        statuses = [self.status(i) for i in self.workers.procs]
        return all(
            s is not None
            and not s["rebalancing"]
            and not s["busy"]
            and s["partitions"]
            and time.time() - s["at"] < 1.0
            for s in statuses
        )


def run(
    broker: EmbeddedBroker | KafkaCluster,
    tmp_path: Path,
    plan: FaultPlan,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """One fault run; returns the report (AssertionError when a property fails)."""
    begun = time.monotonic()
    cluster = broker if isinstance(broker, KafkaCluster) else None
    if cluster is not None:
        plan = kafka_plan(plan)  # Kafka refuses Tansu's short session timeouts
    if "kill leader" in plan.rounds():
        assert cluster is not None and cluster.nodes >= 3, (
            "killing a leader needs an Apache Kafka of 3 nodes or more (min.insync.replicas 2)"
        )
    app_id = f"faults{uuid.uuid4().hex[:8]}"
    settings = resolve_replication(
        Settings.of(app_id=app_id, bootstrap=broker.bootstrap, partitions=plan.partitions)
    )
    ensure_topics(settings)
    log = tmp_path / "requests.jsonl"
    extra: list[str] = []
    if plan.slow_host_delay > 0:
        extra = ["--crawl-delay", f"{DemoWeb(plan.spec).hosts[0]}={plan.slow_host_delay}"]
    with start_server_process(plan.spec, log, tmp_path / "web", extra_args=extra) as server:
        faults = FaultRun(broker, plan, app_id, server, tmp_path, begun, say)
        try:
            faults.crawl()
        except AssertionError as failed:
            stall = recovery_stall(faults.root)
            if stall is not None and "timed out waiting" in str(failed):
                raise stall from failed
            raise
    requests = read_request_log(log)
    report = judge(requests, faults.expected, faults.kills, faults.root, server.port, plan)
    report["scenario"] = plan.scenario
    report["broker"] = f"kafka, {cluster.nodes} nodes" if cluster else "tansu"
    report["timeline_seconds"] = faults.timeline
    # from the first request to the last page stored: the crawl, faults and all
    timeline = faults.timeline
    report["crawl_seconds"] = round(timeline["every page stored"] - timeline["first request"], 2)
    return report


def _partition(url: str, plan: FaultPlan) -> int:

    return topology.url_partition(url, plan.partitions)


def _page_requests(log: Path) -> list[dict[str, Any]]:
    return [r for r in read_request_log(log) if r["path"] != "/robots.txt"]


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
