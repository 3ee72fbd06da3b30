"""`seine crawl --workers N`: N worker processes of one app on one broker.

The workers share the partitions: by index on the embedded broker (each gets
`SEINE_MEMBER_INDEX`; streams/kafka/patches/static_members.py), through Kafka's
consumer group on a cluster; each worker has its own data dir (RocksDB locks its
files) and page store. The parent process pushes the seeds, and decides when the crawl is idle
from the workers' status files: a message sent by one worker is handled by
another, so only the sums over all workers balance. Idle means, summed over
workers, every message sent to a consumed topic has been handled, nothing is
queued (or the page budget is spent), nothing is in flight or unsent, no
worker is rebalancing and every host partition is held by a worker — continuously
for `IDLE_SECONDS`, confirmed by a status each worker wrote after the idle period
began (`idle_confirmed`); and, by offsets, every message delivered (seeds,
workers' sends) is handled by some worker (`caught_up`), a commit counting as handling.
A worker that died and was started again still counts by its last status (`ghosts`):
its successor starts its counters at zero and skips what it committed. Its sends and
handlings count as of its last commit (`ghost_of`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import topology
from streams.core.stall import StallWatch, offsets_handled
from streams.core.stall import describe as describe_stall
from streams.core.stats import ERROR_OUTCOMES, top_reasons
from streams.kafka.consumer_state import describe as describe_lagging
from streams.ops.ending import UNFINISHED_GRACE, UnfinishedWait, unfinished_partitions
from streams.ops.exits import EXIT_BROKER_LOST, EXIT_NOTHING_FETCHED, nothing_fetched_failure
from streams.ops.hung_workers import hung_limit, kill_hung
from streams.ops.progress import Progress, ProgressFigures, print_idle_from
from streams.settings import Settings

#: How long the crawl must look idle before it stops. Offsets make the idle test
#: exact (`caught_up`); the period only spans a few status writes (every 0.25 s),
#: so one picture taken between two steps of a worker cannot end the crawl.
IDLE_SECONDS = 0.5
#: The parent's poll of the status files.
POLL_SECONDS = 0.1
STATUS_FILE = "status.json"
#: Seconds past a worker's own drain timeout the parent waits before stopping it.
DRAIN_GRACE = 10.0
#: Times a worker that died is started again before the crawl is given up as failed.
MAX_RESTARTS = 3


def worker_dir(data_dir: str | Path, index: int) -> Path:
    return Path(data_dir) / f"worker-{index}"


def settings_env(settings: Settings) -> dict[str, str]:
    """Settings as SEINE_* variables, so a child process builds the same Settings."""
    env: dict[str, str] = {}
    for name, value in settings.flat().items():
        if isinstance(value, dict):
            text = ",".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env["SEINE_" + name.upper()] = text
    return env


def write_status(path: Path, status: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(status), encoding="utf-8")
    tmp.replace(path)


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


UNCONSUMED = (topology.CRAWL_LOG.name, topology.DEAD_LETTERS.name)
#: Seconds without any counter moving, with messages unhandled, before the
#: supervisor says so (a politeness delay or a backoff can hold a crawl still for a
#: few seconds; nothing legitimate holds a sent message unhandled this long).
STALL_SECONDS = 30.0


def totals(statuses: list[dict[str, Any]], seeds_sent: int) -> tuple[Counter[str], Counter[str]]:
    """Messages sent and handled per topic, summed over the workers."""
    sent: Counter[str] = Counter({topology.SEEDS.name: seeds_sent})
    done: Counter[str] = Counter()
    for status in statuses:
        sent.update(status["sent"])
        done.update(status["done"])
    return sent, done


def caught_up(statuses: list[dict[str, Any]], seeds_upto: dict[tuple[str, int], int]) -> bool:
    """Every message the crawl delivered to a consumed topic (the seeds pushed here,
    and each worker's sends) is handled by some worker: the counts alone balanced
    with messages of ours unhandled when others were handled (Counters.caught_up)."""
    delivered = dict(seeds_upto)
    handled: dict[tuple[str, int], int] = {}
    for status in statuses:
        for topic, partition, offset in status.get("delivered_upto", ()):
            key = (topic, partition)
            delivered[key] = max(delivered.get(key, 0), offset)
        # a commit is handling too: the commit guard never passes an offset not
        # handled, and a worker started again does not handle again what its dead
        # predecessor committed
        for field in ("handled_upto", "committed_upto"):
            for topic, partition, offset in status.get(field, ()):
                key = (topic, partition)
                handled[key] = max(handled.get(key, 0), offset)
    return offsets_handled(delivered, handled)


def unowned(statuses: list[dict[str, Any]], partitions: int) -> set[int]:
    """The host partitions no worker holds, by the workers' statuses."""
    held: set[int] = set()
    for status in statuses:
        held.update(status.get("partitions") or ())
    return set(range(partitions)) - held


def globally_idle(
    statuses: list[dict[str, Any]],
    seeds_sent: int,
    seeds_upto: dict[tuple[str, int], int] | None = None,
    partitions: int | None = None,
    ghosts: Sequence[dict[str, Any]] = (),
) -> bool:
    """Idle, summed over the workers (see the module's docstring); with `partitions`,
    also every host partition held by some worker: a partition whose worker died is
    not idle but unowned until the group gives it to another, its queue unseen.

    `ghosts` are the last statuses of workers that died and were started again: what
    they sent and handled counts in the sums and offsets (a worker started again
    starts its counters at zero, and does not handle again what its predecessor
    committed: without them the sums stayed short for ever), what they were doing
    does not."""
    if any(status["busy"] or status["rebalancing"] for status in statuses):
        return False
    if partitions is not None and unowned(statuses, partitions):
        return False
    every = [*statuses, *ghosts]
    sent, done = totals(every, seeds_sent)
    if not all(done[name] >= count for name, count in sent.items() if name not in UNCONSUMED):
        return False
    return caught_up(every, seeds_upto or {})


def idle_confirmed(statuses: list[dict[str, Any]], idle_since: float, now: float) -> bool:
    """Has the crawl looked idle for `IDLE_SECONDS` (wall clock, as the statuses' "at"),
    in statuses every worker wrote after that began?

    Why the second condition: a status file is a worker's picture when it wrote it. A
    worker starved of CPU for a few seconds (a loaded machine) keeps its last picture,
    which does not show what it sent or took since, so stale files could agree on an
    idle crawl that is not, for as long as the starvation lasts. A status written
    after the idle period began that still agrees is a picture of that period."""
    return now - idle_since >= IDLE_SECONDS and all(
        float(status.get("at", 0.0)) > idle_since for status in statuses
    )


def stall_report(statuses: list[dict[str, Any]], missing: dict[str, int], seconds: float) -> str:
    """The supervisor's warning: which topics miss handled messages, and where each
    worker's consumer stands on the partitions it has not caught up on."""
    lines = [f"seine: WARNING: {describe_stall(missing, seconds)}"]
    for index, status in enumerate(statuses):
        lines.extend(describe_lagging(f"worker-{index}", status.get("lagging") or []))
        if status.get("busy") or status.get("queued") or status.get("in_flight"):
            lines.append(
                f"  worker-{index}: busy {status.get('busy')}, queued {status.get('queued')}, "
                f"in flight {status.get('in_flight')}"
            )
    return "\n".join(lines)


def worker_env(
    settings: Settings, base_env: dict[str, str], index: int, directory: Path, status: Path
) -> dict[str, str]:
    """The environment of worker `index`: the crawl's settings, its own directory, and
    ports of its own."""
    env = {
        **base_env,
        "SEINE_DATA_DIR": str(directory),
        "SEINE_STATUS_FILE": str(status),
        "SEINE_WORKER_ID": f"worker{index}",
        "SEINE_MEMBER_INDEX": str(index),
        # the parent forwards a Ctrl-C once (the workers have sessions of their own)
        "SEINE_DRAIN_ON_SIGINT": "1",
    }
    if settings.kafka.standby_replicas == 0:
        # One table dir for all, in the crawl's own layout: a partition's tables go
        # where the partition goes (the resume reads them there too). Not with
        # standbys (a cluster's default): a standby would hold another worker's
        # active partition open.
        env["SEINE_TABLE_DIR"] = str(Path(settings.data_dir).resolve() / "faust/v1/tables")
    if settings.web.web_enabled:
        # One port per worker (--web-port, +1, +2, ...): any of them serves the
        # dashboard of the whole crawl, gathered from the others.
        env["SEINE_WEB_PORT"] = str(settings.web.web_port + index)
        if settings.web.redirect_port:
            # Each worker's redirect process needs a port of its own too.
            env["SEINE_REDIRECT_PORT"] = str(settings.web.redirect_port + index)
    return env


def start_workers(
    settings: Settings, workers: int, *, embedded: bool = False
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    """Start `workers` worker processes, each in its own directory (log, fresh status
    file); returns the processes and the paths of their status files."""
    procs: list[subprocess.Popen[bytes]] = []
    status_paths: list[Path] = []
    for index in range(workers):
        proc, status = start_worker(settings, index, embedded=embedded)
        procs.append(proc)
        status_paths.append(status)
    return procs, status_paths


def start_worker(
    settings: Settings, index: int, *, embedded: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start worker `index` in its directory (a fresh status file; its tables and pages
    kept, so a worker started again takes up where it was); returns it and its
    status file.

    A worker gets a signal when this process dies: SIGTERM on a cluster (it hands its
    partitions over and stops), SIGKILL on the `embedded` broker, which dies with this
    process too: a worker left without it could only retry a dead address for minutes
    while holding its RocksDB locks, so a rerun could not open them."""
    from streams.kafka.broker import die_with_parent

    directory = worker_dir(settings.data_dir, index)
    directory.mkdir(parents=True, exist_ok=True)
    status = directory / STATUS_FILE
    status.unlink(missing_ok=True)
    env = worker_env(settings, {**os.environ, **settings_env(settings)}, index, directory, status)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=open(directory / "worker.log", "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        # a terminal's Ctrl-C reaches the parent alone, which forwards it once: a
        # second one would make a worker stop without draining
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGKILL if embedded else signal.SIGTERM),
    )
    return proc, status


def push_seeds(
    settings: Settings, seeds: list[str], seeds_upto: dict[tuple[str, int], int]
) -> None:
    """Produce the seeds to their partitions of the seeds topic; `seeds_upto` gets, per
    (topic, partition), the offset after the last seed delivered there."""
    from confluent_kafka import Producer

    def seed_delivered(error: Any, message: Any) -> None:
        if error is None:
            key = (message.topic(), message.partition())
            seeds_upto[key] = max(seeds_upto.get(key, 0), message.offset() + 1)

    producer = Producer({"bootstrap.servers": settings.kafka.bootstrap})
    topic = topology.topic_name(settings.app_id, topology.SEEDS)
    for url in seeds:
        partition = topology.url_partition(url, settings.kafka.partitions)
        producer.produce(
            topic, url.encode("utf-8"), partition=partition, on_delivery=seed_delivered
        )
    producer.flush(30)


def ghost_of(last: dict[str, Any]) -> dict[str, Any]:
    """A dead worker's last status as the sums count it: its sends and handlings as
    of its last commit (`sent_committed`, `done_committed`). Its `sent` may count
    messages the kill lost before they left, which nobody handles; its `done`, messages
    whose outputs the kill lost, which its successor must handle again (a skipped
    re-read of one then ended a crawl with its page never stored). What it sent after
    that commit and did reach the broker is handled, and only makes `done` the larger."""
    return {
        **last,
        "sent": last.get("sent_committed", {}),
        "done": last.get("done_committed", {}),
    }


def replace_dead(
    settings: Settings,
    procs: list[subprocess.Popen[bytes]],
    restarts: list[int],
    *,
    embedded: bool,
    ghosts: list[dict[str, Any]] | None = None,
) -> bool:
    """Start again each worker that died (killed, crashed), in its own directory: it
    takes its partitions back (in a group, the others hold them meanwhile). False once one
    died more than MAX_RESTARTS times (a worker that cannot live is a failed crawl).
    The dead worker's last status goes to `ghosts` (`globally_idle`)."""
    for index, proc in enumerate(procs):
        code = proc.poll()
        if code is None:
            continue
        if restarts[index] >= MAX_RESTARTS:
            return False
        restarts[index] += 1
        last = read_status(worker_dir(settings.data_dir, index) / STATUS_FILE)
        if ghosts is not None and last is not None:
            ghosts.append(ghost_of(last))
        print(
            f"seine: worker-{index} exited ({code}); starting it again "
            f"({restarts[index]} of {MAX_RESTARTS})",
            file=sys.stderr,
            flush=True,
        )
        procs[index], _status = start_worker(settings, index, embedded=embedded)
    return True


class Signals:
    """The parent's signal handler: Ctrl-C makes every worker drain (a second one makes
    them stop at once), then the crawl exits 130; SIGTERM stops the crawl."""

    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        self.procs = procs
        self.stopping = False
        #: When the first Ctrl-C came (monotonic), if one did.
        self.interrupted: float | None = None

    def __call__(self, signum: int, _frame: Any) -> None:
        if signum != signal.SIGINT:
            self.stopping = True
            return
        if self.interrupted is None:
            self.interrupted = time.monotonic()
            print(
                "seine: draining (fetches in flight finish, nothing new starts); "
                "Ctrl-C again stops at once",
                file=sys.stderr,
                flush=True,
            )
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)


def drained(
    procs: list[subprocess.Popen[bytes]],
    statuses: list[dict[str, Any]],
    since: float,
    timeout: float,
    ghosts: Sequence[dict[str, Any]] = (),
) -> bool:
    """After a Ctrl-C: is the crawl drained? No fetch in flight anywhere and every
    message any worker sent handled by some worker (a worker alone cannot tell: its
    links go to the others' partitions), in statuses written after the Ctrl-C; or
    the workers exited, or had their time."""
    if all(p.poll() is not None for p in procs):
        return True
    if time.monotonic() - since > timeout + DRAIN_GRACE:
        return True
    if len(statuses) < len(procs) or any(
        s["in_flight"] or s["rebalancing"] or float(s.get("at", 0.0)) < time.time() - 1.0
        for s in statuses
    ):
        return False
    sent, done = totals([*statuses, *ghosts], 0)  # ghosts: see globally_idle
    return all(done[name] >= n for name, n in sent.items() if name not in UNCONSUMED)


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker still running; SIGKILL one not gone within a minute."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def report_crawl(
    settings: Settings,
    status_paths: list[Path],
    workers: int,
    elapsed: float,
    ghosts: Sequence[dict[str, Any]] = (),
) -> tuple[int, int, int]:
    """Print the crawl's summary from the workers' last status files, and those of
    workers that died and were started again (`ghosts`); returns the pages fetched,
    the errors and the dead letters."""
    final: list[dict[str, Any]] = list(ghosts)
    for path in status_paths:
        last = read_status(path)
        if last is not None:
            final.append(last)
    outcomes: Counter[str] = Counter()
    for s in final:
        outcomes.update(s["outcomes"])
    fetched = outcomes.get("fetched", 0)
    errors = sum(outcomes.get(k, 0) for k in ERROR_OUTCOMES)
    print(
        f"seine: {sum(s['pages_stored'] for s in final)} pages stored, {fetched} fetched in "
        f"{elapsed:.1f}s ({fetched / max(elapsed, 1e-6):.0f} pages/s) by {workers} workers, "
        f"{outcomes.get('duplicate', 0)} duplicates, "
        f"{outcomes.get('near-duplicate', 0)} near-duplicates, "
        f"{outcomes.get('robots-disallowed', 0)} disallowed by robots, "
        f"{errors} errors, "
        f"{sum(s['dead_letters'] for s in final)} dead letters, "
        f"{sum(s.get('handoff_misses', 0) for s in final)} hand-off misses (fetched again); "
        f"data in {settings.data_dir}",
        flush=True,
    )
    reasons: Counter[str] = Counter()
    for s in final:
        reasons.update(s.get("reasons", {}))
    if reasons:
        print(f"seine: why pages were not stored: {top_reasons(reasons)}", flush=True)
    if settings.log_level.lower() in ("info", "debug"):
        print_idle_from(max((s.get("last_handled_at", 0.0) for s in final), default=0.0))
    return fetched, errors, sum(s["dead_letters"] for s in final)


class IdleJudge:
    """Is an `--until-idle` crawl over? Idle by the statuses and the ghosts
    (`globally_idle`), with no partition left unfinished (`UnfinishedWait`), for
    `IDLE_SECONDS`, confirmed by statuses written since (`idle_confirmed`)."""

    def __init__(
        self,
        settings: Settings,
        seeds_sent: int,
        seeds_upto: dict[tuple[str, int], int],
        ghosts: list[dict[str, Any]],
    ) -> None:
        self.partitions = settings.kafka.partitions
        self.seeds_sent, self.seeds_upto, self.ghosts = seeds_sent, seeds_upto, ghosts
        self.waiting = UnfinishedWait(2 * settings.kafka.stuck_rewind_after + UNFINISHED_GRACE)
        self.idle_since: float | None = None

    def over(self, statuses: list[dict[str, Any]]) -> bool:
        idle = globally_idle(
            statuses, self.seeds_sent, self.seeds_upto, self.partitions, self.ghosts
        )
        if not idle or self.waiting.holds(time.monotonic(), unfinished_partitions(statuses)):
            self.idle_since = None
            return False
        now = time.time()
        if self.idle_since is None:
            self.idle_since = now
            return False
        return idle_confirmed(statuses, self.idle_since, now)


def run_workers(
    settings: Settings, seeds: list[str], workers: int, until_idle: bool, *, embedded: bool
) -> int:
    """Start the workers, push the seeds, wait for idle (or a signal), stop the workers;
    `embedded`: the broker is this process's child (start_workers)."""
    from streams.kafka.admin import ensure_topics

    ensure_topics(settings)
    #: (topic, partition) -> offset after the last seed delivered there
    seeds_upto: dict[tuple[str, int], int] = {}
    # Workers that share the partitions by index (the embedded broker) never move
    # them: the seeds can wait for them on the broker while they start.
    seeded = bool(settings.kafka.members)
    if seeded:
        push_seeds(settings, seeds, seeds_upto)
    procs, status_paths = start_workers(settings, workers, embedded=embedded)
    signals = Signals(procs)
    restarts = [0] * workers
    #: the last statuses of workers that died and were started again
    ghosts: list[dict[str, Any]] = []

    previous = signal.signal(signal.SIGINT, signals), signal.signal(signal.SIGTERM, signals)
    started = time.time()
    stall = StallWatch(STALL_SECONDS)
    judge = IdleJudge(settings, len(seeds), seeds_upto, ghosts)
    progress: Progress | None = None
    code = 0
    try:
        while not signals.stopping:
            time.sleep(POLL_SECONDS)  # a supervisor's poll interval, not test synchronisation
            if signals.interrupted is not None:
                ready = [s for s in (read_status(path) for path in status_paths) if s]
                if drained(
                    procs, ready, signals.interrupted, settings.worker.drain_timeout, ghosts
                ):
                    code = 130
                    break
                continue
            if any(proc.poll() == EXIT_BROKER_LOST for proc in procs):
                # the cluster is gone for every worker: starting them again would only
                # wait on it; a rerun of the same command continues the crawl
                print(
                    f"seine: lost the Kafka cluster at {settings.kafka.bootstrap}: a worker "
                    "found no broker answering; stopping (run the same command again to "
                    "continue)",
                    file=sys.stderr,
                    flush=True,
                )
                code = EXIT_BROKER_LOST
                break
            if not replace_dead(settings, procs, restarts, embedded=embedded, ghosts=ghosts):
                print(
                    f"seine: a worker died {MAX_RESTARTS + 1} times; stopping the others",
                    file=sys.stderr,
                )
                code = 1
                break
            statuses = [read_status(path) for path in status_paths]
            kill_hung(procs, statuses, hung_limit(settings))
            if any(s is None for s in statuses):
                continue
            ready = [s for s in statuses if s is not None]
            if not seeded:
                # In a group, seed only once every worker holds partitions: a rebalance
                # moving hosts while fetches are in flight is what this avoids.
                if all(s["assigned"] > 0 and not s["rebalancing"] for s in ready):
                    push_seeds(settings, seeds, seeds_upto)
                    seeded = True
                    started = time.time()
                continue
            if progress is None:
                progress = Progress(total=settings.crawl.max_pages or None)
            progress.update(ProgressFigures.of_statuses(ready))
            missing = stall.observe(
                time.monotonic(), *totals([*ready, *ghosts], len(seeds)), UNCONSUMED
            )
            if missing:
                print(stall_report(ready, missing, STALL_SECONDS), file=sys.stderr, flush=True)
            if not until_idle:
                continue
            if judge.over(ready):
                break
    finally:
        if progress is not None:
            progress.close()
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        stop_workers(procs)
    elapsed = time.time() - started
    fetched, errors, dead_letters = report_crawl(settings, status_paths, workers, elapsed, ghosts)
    failure = nothing_fetched_failure(fetched, errors, dead_letters)
    if until_idle and code == 0 and failure:
        print(f"seine: crawl failed: {failure}", file=sys.stderr, flush=True)
        return EXIT_NOTHING_FETCHED
    return code
