"""Resuming a crawl over a data dir whose topics were lost (the embedded broker).

The embedded broker keeps topics in memory (the shipped Tansu 0.6 has the
`dynostore` engine only: `memory://` or `s3://`; `file://` and `sqlite://` are
refused), so when `seine crawl` stops, whatever was *between* stages is gone:

* URLs url-seen marked seen whose frontier message was lost: seen, not queued;
* pages fetched but not yet stored (parse → content-dedup → link-extract);
* links of stored pages not yet marked seen (url-filter → url-seen);
* the fetch in flight at each busy host (the frontier's `hosts` table still
  says which, and `Frontier.adopt` puts it back at the head of its queue once
  no completion came for it in `Politeness.adopt_grace`).

What the data dir keeps is enough to rebuild those, so a resume loses nothing:

* the `seen` table (every URL ever accepted), the frontier's `queue` and
  `hosts` tables (what is queued and what was in flight), and the `done` table
  (URLs whose crawl ended without a stored page: errors, redirects,
  robots-disallowed, parked hosts) — RocksDB files, durable at a SIGKILL;
* the page store (every stored page, with its body).

At start, before the new broker's workers run, `plan_resume` reads them
directly and `push_resume` sends:

1. every URL that is seen but neither queued, in flight, stored nor done back
   to its partition of the frontier topic as a new URL (the frontier does not
   consult url-seen, so it is enqueued once); queued means a queue item its host
   state will serve (`host_serves`), not any item in the table;
2. the links of every stored page back through url-filter, as link-extract
   would have sent them; url-seen drops the ones it has seen, so only links that
   were lost in transit are new.

A `seine crawl` stopped with Ctrl-C first *drains* (streams/app.py): it stops
dispatching fetches, lets every fetch in flight and every message between
stages run to the end — links enqueued in the frontier's tables — and then
writes `CLEAN_MARK`. A resume after a clean stop needs no reconciliation; after
a SIGKILL (no mark) it runs the two steps above. Re-extracting links reads
and parses every stored page once (measured in tests/integration/test_resume.py).

Limits: a re-enqueued URL's link depth is not kept by `seen`, so it restarts at
depth 0 and re-extracted links at depth 1 — with `--max-depth` a resumed crawl
may go that much deeper on the lost URLs. With a Kafka cluster (`--bootstrap`)
none of this runs: topics, offsets and changelogs survive there.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import topology
from streams.core.provenance import Via
from streams.settings import KafkaSettings

log = logging.getLogger("seine.resume")

#: Written by a worker that drained before it stopped; removed when a crawl starts.
CLEAN_MARK = "clean-stop"
#: Faust's own bookkeeping keys inside a table partition's database.
_FAUST_PREFIX = b"__faust"


def worker_dirs(data_dir: str | Path) -> list[Path]:
    """The data dir of a single-process crawl and those of `--workers N` under it."""
    root = Path(data_dir)
    return [root, *sorted(p for p in root.glob("worker-*") if p.is_dir())]


def table_dbs(data_dir: str | Path, table: str) -> Iterator[tuple[int, Path]]:
    """(partition, database path) of one Faust table in every worker dir."""
    for directory in worker_dirs(data_dir):
        for path in sorted(directory.glob(f"faust/v*/tables/{table}-*.db")):
            suffix = path.stem.rsplit("-", 1)[-1]
            if suffix.isdigit():
                yield int(suffix), path


def _items(path: Path) -> Iterator[tuple[bytes, bytes]]:
    from rocksdict import AccessType, Options, Rdict

    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        for key, value in db.items():
            if isinstance(key, bytes) and not key.startswith(_FAUST_PREFIX):
                yield key, value
    finally:
        db.close()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def seen_url(key: bytes, value: bytes) -> str | None:
    """The URL of one `seen` entry, in either layout: a JSON string key (URL → 1), or
    the URL registry's (16-byte site id + hash key → 8-byte URL id + the URL)."""
    if len(value) > 8 and value[8:12] == b"http":  # the URL, maybe then \x00 + its state
        return value[8:].split(b"\x00", 1)[0].decode("utf-8", "replace")
    if key[:1] == b'"':
        url = _json(key)
        return url if isinstance(url, str) else None
    return None


def url_states(data_dir: str | Path) -> dict[str, dict[str, Any] | None]:
    """Every registered URL under a data dir with its crawl state (None: registered,
    not acted on by the frontier yet), from the URL registry of every worker dir.

    A partition that moved between workers leaves a copy in each worker's dir; the
    state with the latest ``at`` wins, as the newest capture wins in the page store.
    """
    from streams.core.registry import state_of, url_of

    result: dict[str, dict[str, Any] | None] = {}
    for _, path in table_dbs(data_dir, "seen"):
        for key, value in _items(path):
            if len(key) != 16 or len(value) <= 8:
                continue
            url, state = url_of(value), state_of(value)
            if state is not None and "s" not in state:
                state = None  # url-seen's stamp or in-link count only: not acted on
            old = result.get(url)
            if url not in result or (
                state is not None
                and (old is None or float(state.get("at", 0)) >= float(old.get("at", 0)))
            ):
                result[url] = state
    return result


@dataclass
class TableState:
    """What the local tables say about every URL, per partition."""

    seen: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    queued: set[str] = field(default_factory=set)
    in_flight: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)


def read_tables(data_dir: str | Path) -> TableState:
    state = TableState()
    for partition, path in table_dbs(data_dir, "seen"):
        for key, value in _items(path):
            url = seen_url(key, value)
            if url is not None:
                state.seen[partition].add(url)
    #: authority -> every copy of its host state's (heads, tails)
    slots: dict[str, list[tuple[list[int], list[int]]]] = defaultdict(list)
    for _, path in table_dbs(data_dir, "hosts"):
        for key, value in _items(path):
            host = _json(value)
            if not isinstance(host, dict):
                continue
            authority = _json(key)
            heads, tails = host.get("heads"), host.get("tails")
            if isinstance(authority, str) and isinstance(heads, list) and isinstance(tails, list):
                slots[authority].append(([int(h) for h in heads], [int(t) for t in tails]))
            if host.get("busy") and host.get("inflight"):
                url = host["inflight"].get("url")
                if isinstance(url, str):
                    state.in_flight.add(url)
    for _, path in table_dbs(data_dir, "queue"):
        for key, value in _items(path):
            item = _json(value)
            url = item.get("url") if isinstance(item, dict) else None
            if isinstance(url, str) and host_serves(slots, _json(key)):
                state.queued.add(url)
    for _, path in table_dbs(data_dir, "done"):
        for key, _ in _items(path):
            url = _json(key)
            if isinstance(url, str):
                state.done.add(url)
    return state


def host_serves(slots: dict[str, list[tuple[list[int], list[int]]]], key: Any) -> bool:
    """Whether the frontier will serve the queue item at `key` (its JSON-decoded
    ``authority\x00tier\x00seq``): its host state has it between a tier's head and
    tail. Below the head it was served (the fetch in flight, if any, is in the host
    state). A kill between the item's write and its host state's (written once per
    event, `HostStore.flush`) leaves it past the tail, where the frontier never
    looks and its next enqueue writes over it: such an item is not queued, so the
    resume sends its URL again (a kill found 3 such items in ~40 tries). A key of
    another layout counts as queued."""
    if not isinstance(key, str) or key.count("\x00") != 2:
        return True
    authority, tier_text, seq_text = key.split("\x00")
    if not (tier_text.isdigit() and seq_text.lstrip("-").isdigit()):
        return True
    tier, seq = int(tier_text), int(seq_text)
    # no host state at all: the kill came before a new host's first one was written
    return any(
        tier < len(tails) and heads[tier] <= seq < tails[tier]
        for heads, tails in slots.get(authority, ())
    )


def lost_urls(state: TableState, stored: Iterable[str]) -> dict[int, list[str]]:
    """Per partition, the URLs seen but neither queued, in flight, stored nor done."""
    accounted = state.queued | state.in_flight | state.done | set(stored)
    out: dict[int, list[str]] = {}
    for partition, urls in state.seen.items():
        missing = sorted(urls - accounted)
        if missing:
            out[partition] = missing
    return out


@dataclass
class ResumePlan:
    """What a resume sends, and what it found (for the log line and the tests)."""

    lost: dict[int, list[str]] = field(default_factory=dict)
    #: partition of url-filter → link candidates (url, depth, priority, via)
    links: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    seen: int = 0
    stored_pages: int = 0
    seconds: float = 0.0

    @property
    def lost_count(self) -> int:
        return sum(len(v) for v in self.lost.values())

    @property
    def link_count(self) -> int:
        return sum(len(v) for v in self.links.values())


def was_clean(data_dir: str | Path) -> bool:
    """True when every worker dir that holds tables was stopped after a drain."""
    dirs = [d for d in worker_dirs(data_dir) if any(d.glob("faust/v*/tables"))]
    return all((d / CLEAN_MARK).exists() for d in dirs)


def clear_marks(data_dir: str | Path) -> None:
    for directory in worker_dirs(data_dir):
        (directory / CLEAN_MARK).unlink(missing_ok=True)


def plan_resume(data_dir: str | Path, partitions: int) -> ResumePlan | None:
    """Read the data dir and work out what was lost in transit; None when there are
    no tables (a first run) or the last stop was a clean drain."""
    started = time.monotonic()
    if not any(True for _ in table_dbs(data_dir, "seen")) or was_clean(data_dir):
        return None
    # imported here: a first run (most of them) needs no HTML parser in this process
    from streams.core.parsing import charset_from_headers, parse_html
    from streams.core.urls import resolve, resolve_and_canonicalize
    from streams.store.storeset import open_stores, store_paths

    state = read_tables(data_dir)
    plan = ResumePlan(seen=sum(len(v) for v in state.seen.values()))
    links: dict[int, list[dict[str, Any]]] = defaultdict(list)
    stored: set[str] = set()
    if store_paths(data_dir):
        with open_stores(data_dir) as store:
            for url in store.urls():
                stored.add(url)
                capture = store.get(url)
                if capture is None or capture.revisit_of is not None or not capture.body:
                    continue  # a duplicate: link-extract never follows its links
                doc = parse_html(capture.body, charset_from_headers(capture.headers))
                if doc.nofollow:
                    continue
                base = resolve(url, doc.base) if doc.base else url
                for link in resolve_and_canonicalize(base or url, doc.links):
                    partition = topology.url_partition(link, partitions)
                    links[partition].append({"url": link, "depth": 1, "priority": 0, "via": url})
    plan.stored_pages = len(stored)
    plan.lost = lost_urls(state, stored)
    plan.links = dict(links)
    plan.seconds = round(time.monotonic() - started, 3)
    return plan


def push_resume(
    bootstrap: str, app_id: str, plan: ResumePlan, compression: str = KafkaSettings.compression
) -> None:
    """Send the plan to the (new, empty) broker's topics, before any worker starts,
    compressed with the crawl's codec (`Settings.kafka.compression`)."""
    from confluent_kafka import Producer

    import topology
    from streams import codec
    from streams.stages.context import _chunks

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.max.bytes": 16 * 1024 * 1024,
            "linger.ms": 5,
            "compression.type": compression,
        }
    )
    frontier = topology.topic_name(app_id, topology.FRONTIER)
    for partition, urls in plan.lost.items():
        candidates = [{"url": u, "depth": 0, "priority": 0, "via": Via.RESUME} for u in urls]
        for chunk in _chunks(candidates):
            value = codec.encode(
                "frontier_event", {"new_urls": chunk, "completions": [], "tick": False}
            )
            producer.produce(frontier, value, partition=partition)
    url_filter = topology.topic_name(app_id, topology.URL_FILTER)
    for partition, candidates in plan.links.items():
        for chunk in _chunks(candidates):
            producer.produce(
                url_filter, codec.encode("url_batch", {"urls": chunk}), partition=partition
            )
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"resume: {left} messages not delivered to {bootstrap}")
