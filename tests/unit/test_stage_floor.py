"""The per-stage comparison of bench/stage_floor.py: a crawl's CPU per stage, read from
the workers' "CPU per stage" lines, against each stage's floor."""

from __future__ import annotations

from pathlib import Path

from bench.stage_floor import compare, floors, sample_pages, stage_seconds
from streams.demo.webgen import DemoWeb, WebSpec

LINES = [
    "seine worker-0: CPU per stage (share of worker CPU): frontier 40.0% (4.0 s, 500 "
    "items/s in 90 msgs, 800 µs/item); parse 10.0% (1.0 s, 100 items/s in 9 msgs); "
    "other 50.0% (5.0 s)",
    "seine worker-1: CPU per stage (share of worker CPU): frontier 30.0% (2.0 s, 1 "
    "items/s in 1 msgs); link-extract 5.0% (0.5 s, 1 items/s in 1 msgs); other 65.0% (4.0 s)",
    "seine worker-1: host cycle (dispatch to completion): 1.0 s",
]


def test_stage_seconds_sum_over_the_workers_without_other() -> None:
    assert stage_seconds(LINES) == {"frontier": 6.0, "parse": 1.0, "link-extract": 0.5}


def test_a_stage_over_twice_its_floor_is_named() -> None:
    lines, over = compare(
        {"frontier": 6.0, "parse": 1.0, "anchors": 0.1},
        1000,
        {"frontier": 0.0001, "parse": 0.0008},
    )
    assert over == ["frontier"]  # 6 ms a page against 0.1 ms; parse is 1.25x
    assert "over 2x its floor" in lines[0] and "60.0x" in lines[0]
    assert "(no floor)" in lines[2]


def test_the_floors_run_over_the_demo_web(tmp_path: Path) -> None:
    pages = sample_pages(DemoWeb(WebSpec(hosts=2, pages_per_host=20)), 30)
    assert len(pages) == 30
    found = floors(pages, tmp_path)
    stages = {"parse", "content-dedup", "link-extract", "url-filter", "url-seen", "frontier"}
    assert stages | {"indexer"} == set(found)
    assert all(seconds >= 0 for seconds in found.values())
    assert found["parse"] > 0 and found["link-extract"] > 0
