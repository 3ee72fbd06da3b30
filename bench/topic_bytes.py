"""Benchmark: what a crawl leaves on the broker, per topic and per fetched page.

Run (from the repo root; the ``bench`` extra provides psutil)::

    .venv/bin/python bench/topic_bytes.py                      # 100 hosts x 30 pages
    .venv/bin/python bench/topic_bytes.py --compression lz4    # the stages' producer codec

One ``seine crawl --until-idle`` runs against an embedded broker (Tansu, memory storage)
that this script starts, so the topics outlive the crawl; then every topic of the app
(stage topics and table changelogs) is read back from the beginning and its messages
counted and summed (key + value, as consumers see them: uncompressed). Also the broker's
RSS before and after the crawl: Tansu keeps every batch as it was produced (compressed),
and the shipped version neither applies retention nor implements DeleteRecords, so this
is what a long crawl accumulates. Loopback only; bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from streams.demo.server import read_request_log, start_server_process  # noqa: E402
from streams.demo.webgen import WebSpec  # noqa: E402
from streams.kafka.broker import EmbeddedBroker  # noqa: E402

try:
    import psutil
except ImportError:  # pragma: no cover
    sys.exit("bench/topic_bytes.py needs psutil: .venv/bin/pip install -e '.[bench]'")


def topic_sizes(bootstrap: str, prefix: str, deadline_s: float = 120.0) -> dict[str, list[int]]:
    """topic → [messages, key+value bytes], read from offset 0 of every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=15)
    sizes: dict[str, list[int]] = {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"topic-bytes-{time.time_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    try:
        for name, topic in sorted(meta.topics.items()):
            if not name.startswith(prefix):
                continue
            count = size = 0
            for p in topic.partitions:
                tp = TopicPartition(name, p, 0)
                _low, high = consumer.get_watermark_offsets(tp, timeout=15)
                consumer.assign([tp])
                until = time.monotonic() + deadline_s
                offset = -1
                # Tansu's listed highwater can lag (streams/kafka/patches/highwaters.py): read
                # until the listed end, then until a poll comes back empty.
                while time.monotonic() < until:
                    msg = consumer.poll(0.5)
                    if msg is None:
                        if offset + 1 >= high:
                            break
                        continue
                    if msg.error():
                        continue
                    offset = msg.offset() or 0
                    count += 1
                    size += len(msg.key() or b"") + len(msg.value() or b"")
            sizes[name[len(prefix) :]] = [count, size]
    finally:
        consumer.close()
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=30)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="", help="SEINE_COMPRESSION for the crawl")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    spec = WebSpec(hosts=args.hosts, pages_per_host=args.pages, seed=7)
    app_id = "bytes"
    with tempfile.TemporaryDirectory(prefix="seine-bytes-") as tmp:
        work = Path(tmp)
        log = work / "requests.jsonl"
        with EmbeddedBroker(log_path=work / "tansu.log") as broker:
            tansu = psutil.Process(broker._proc.pid)  # type: ignore[union-attr]
            rss_before = tansu.memory_info().rss
            server = start_server_process(spec, log, work / "web", prerender=True, timeout=600)
            try:
                seeds = work / "seeds.txt"
                seeds.write_text("\n".join(server.seeds) + "\n")
                cmd = [sys.executable, "-m", "streams.cli", "crawl", "--seeds-file", str(seeds)]
                cmd += ["--bootstrap", broker.bootstrap, "--data-dir", str(work / "data")]
                cmd += ["--partitions", str(args.partitions), "--allow-private", "--until-idle"]
                for host, addr in server.resolve.items():
                    cmd += ["--resolve", f"{host}={addr}"]
                env = {**os.environ, "SEINE_APP_ID": app_id}
                if args.compression:
                    env["SEINE_COMPRESSION"] = args.compression
                started = time.monotonic()
                done = subprocess.run(
                    cmd,
                    cwd=REPO,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                )
                wall = time.monotonic() - started
            finally:
                server.stop()
            rss_after = tansu.memory_info().rss
            sizes = topic_sizes(broker.bootstrap, app_id)
        pages = [r for r in read_request_log(log) if r["path"] != "/robots.txt"]
    fetched = max(1, len(pages))
    total = sum(size for _, size in sizes.values())
    report: dict[str, Any] = {
        "hosts": args.hosts,
        "pages_per_host": args.pages,
        "compression": args.compression or "default (zstd)",
        "crawl_exit_code": done.returncode,
        "fetched": len(pages),
        "wall_s": round(wall, 1),
        "broker_rss_growth_mb": round((rss_after - rss_before) / 2**20, 1),
        "broker_rss_growth_per_page_kb": round((rss_after - rss_before) / fetched / 1024, 1),
        "topics_uncompressed_per_page_kb": round(total / fetched / 1024, 1),
        "per_topic_per_page": {
            name: {"messages": count, "kb_per_page": round(size / fetched / 1024, 2)}
            for name, (count, size) in sorted(sizes.items(), key=lambda kv: -kv[1][1])
        },
        "load_average_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }
    print(json.dumps(report, indent=1))
    if done.returncode != 0:
        print(done.stderr[-2000:])
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
