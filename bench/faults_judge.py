"""How bench/faults.py judges a fault run: the page stores and the demo server's request
log against the properties in its docstring, and what a failed run left to read."""

from __future__ import annotations

import io
import itertools
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import topology
from bench.faults_harness import REBALANCES, FaultPlan, Kill
from streams.demo.server import read_request_log
from streams.stages.link_extract import HANDOFF_MISS_REASON
from streams.store.storeset import open_stores

#: Timestamps come from the server's clock and the harness's: a millisecond of slack.
SLACK = 0.001


#: What each Faust consumer fix logs when it acts (see the report's consumer_fixes_acted).
CONSUMER_FIX_LINES = {
    "guard_commits": "] held: offset ",
    "refetch_skips": "were skipped by the fetch: reading them again",
    "hold_gaps": "were skipped by the fetch: the commit waits",
}


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
        target = parts.path + (f"?{parts.query}" if parts.query else "")  # as the server logs it
        lines.append(f"  {url} (requested {asked.get((parts.hostname, target), 0)} times)")
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


def stored_responses(root: Path) -> tuple[set[str], Counter[str]]:
    """The URLs the workers' page stores hold, and per URL its response records (a copy
    fetched again is stored as a revisit, which does not count)."""
    with open_stores(root) as store:
        stored = set(store.urls())
        cdxj = io.StringIO()
        store.export_cdxj(cdxj)
    responses: Counter[str] = Counter()
    for line in cdxj.getvalue().splitlines():
        fields = json.loads(line.split(" ", 2)[2])
        if fields.get("mime") != "warc/revisit":
            responses[fields["url"]] += 1
    return stored, responses


def closer_than_the_delay(
    by_host: dict[str, list[dict[str, Any]]], delay: float, t0: float
) -> tuple[list[tuple[str, float]], list[str], list[float]]:
    """Per host (its requests sorted by start here), each request that started less than
    `delay` after the previous one ended: (host, gap), a description, its start."""
    too_close: list[tuple[str, float]] = []
    too_close_detail: list[str] = []
    too_close_at: list[float] = []
    for host, rs in by_host.items():
        rs.sort(key=lambda r: r["start"])
        for a, b in itertools.pairwise(rs):
            gap = b["start"] - a["end"]
            if gap < delay - SLACK:
                too_close.append((host, round(gap, 4)))
                too_close_at.append(b["start"])
                too_close_detail.append(
                    f"{host}: {a['path']} {a['start'] - t0:.3f}-{a['end'] - t0:.3f} s then "
                    f"{b['path']} {b['start'] - t0:.3f}-{b['end'] - t0:.3f} s"
                )
    return too_close, too_close_detail, too_close_at


def recovery_by_partition(
    requests: list[dict[str, Any]],
    kills: list[Kill],
    by_host: dict[str, list[dict[str, Any]]],
    plan: FaultPlan,
) -> dict[str, dict[int, float | None]]:
    """Per fault, per partition the victim held: seconds from the fault to that
    partition's first request after it (None: none came)."""
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
    return recovery


def count_in_logs(root: Path, text: str) -> int:
    """How often `text` occurs in the logs of the worker processes under `root`."""
    return sum(
        path.read_text(encoding="utf-8", errors="replace").count(text)
        for path in root.glob("spare-*.log")
    )


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
    stored, responses = stored_responses(root)
    missing = expected - stored
    assert not missing, f"{len(missing)} pages lost, e.g. {sorted(missing)[:5]}"
    assert stored <= expected, sorted(stored - expected)[:5]
    stored_twice = {u: n for u, n in responses.items() if n > 1}

    # politeness, from the server's log: per host, no overlap and at least the delay apart
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        by_host[r["host"]].append(r)
    t0 = min((r["start"] for r in requests), default=0.0)
    too_close, too_close_detail, too_close_at = closer_than_the_delay(by_host, plan.delay, t0)

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
    handoff_refetches = count_in_logs(root, HANDOFF_MISS_REASON)

    # recovery of each partition the victim held: kill → its first request after it
    recovery = recovery_by_partition(requests, kills, by_host, plan)
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
        "duplicate_requests_refused": count_in_logs(root, "not started twice"),
        # the Faust consumer fixes at work (streams/kafka/patches/: guard_commits,
        # refetch_skips and hold_gaps): each line a message
        # Faust 0.15.3 would have committed over unhandled, i.e. lost
        "consumer_fixes_acted": {
            name: count_in_logs(root, line) for name, line in CONSUMER_FIX_LINES.items()
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
