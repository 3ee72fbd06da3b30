"""The frontier's revisit hook (streams/stages/recrawl.py) on plain dicts, and re-feed messages."""

from __future__ import annotations

from typing import Any

from streams import codec
from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.core.frontier import Frontier, Politeness
from streams.core.partitioning import partition_for
from streams.core.provenance import Via
from streams.core.records import FrontierEvent, UrlCandidate
from streams.core.urls import site_key
from streams.stages.recrawl import handle, refeed_messages

POLICY = RevisitPolicy(min_interval=10.0, max_interval=100.0, initial_interval=20.0)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def setup(track_all: bool) -> tuple[Frontier, RevisitSchedule, dict[str, Any], Clock]:
    clock = Clock()
    frontier = Frontier({}, {}, Politeness(), lambda host: 0, clock)
    records: dict[str, Any] = {}
    revisits = RevisitSchedule(records, POLICY, lambda url: 0, track_all=track_all, clock=clock)
    return frontier, revisits, records, clock


def event(new_urls=(), completions=()) -> FrontierEvent:
    return {"new_urls": list(new_urls), "completions": list(completions), "tick": False}


def candidate(url: str, via: str | None = None) -> UrlCandidate:
    return {"url": url, "depth": 1, "priority": 0, "via": via, "kind": "page"}


def test_refed_urls_skip_the_new_url_path_and_are_queued() -> None:
    frontier, revisits, _records, _clock = setup(track_all=False)
    revisits.fetched("http://a.test/x", fingerprint="f", headers=[], depth=1)
    rest = handle(
        0,
        event([candidate("http://a.test/new"), candidate("http://a.test/x", Via.RECRAWL)]),
        frontier,
        revisits,
        [],
    )
    assert [c["url"] for c in rest] == ["http://a.test/new"]  # left for the usual enqueue
    assert frontier.queued == 1  # the re-fed URL, although it was fetched before


def test_refeed_when_due_waits_for_the_revisit_time() -> None:
    frontier, revisits, _records, clock = setup(track_all=False)
    revisits.fetched("http://a.test/x", fingerprint="f", headers=[], depth=1)
    handle(0, event([candidate("http://a.test/x", Via.RECRAWL_WHEN_DUE)]), frontier, revisits, [])
    assert frontier.queued == 0
    clock.now += 20.0
    handle(0, event(), frontier, revisits, [])  # a tick
    assert frontier.queued == 1


def test_a_304_completion_grows_the_interval_and_due_revisits_are_queued() -> None:
    frontier, revisits, records, clock = setup(track_all=True)
    handle(0, event(), frontier, revisits, [])  # adopt
    revisits.fetched("http://a.test/x", fingerprint="f", headers=[("ETag", '"1"')], depth=2)
    clock.now += 20.0
    handle(0, event(), frontier, revisits, [])
    assert frontier.queued == 1
    done = {"url": "http://a.test/x", "kind": "page", "status": 304}
    handle(0, event(completions=[done]), frontier, revisits, [])
    assert records["http://a.test/x"]["interval"] == 40.0
    assert records["http://a.test/x"]["next"] == clock.now + 40.0


def test_adopt_after_restart_loads_the_records() -> None:
    frontier, revisits, records, _clock = setup(track_all=True)
    records["http://a.test/old"] = {"next": 900.0, "interval": 10.0, "depth": 3}
    handle(0, event(), frontier, revisits, records.items())
    assert frontier.queued == 1


def test_refeed_messages_go_to_the_hosts_partition() -> None:
    urls = [f"http://h{i}.test/" for i in range(20)]
    messages = refeed_messages(urls, 4, when_due=True)
    seen = []
    for partition, value in messages.items():
        decoded = codec.decode("frontier_event", value)
        for item in decoded["new_urls"]:
            host = item["url"].split("/")[2]
            assert partition_for(site_key(host), 4) == partition
            assert item["via"] == Via.RECRAWL_WHEN_DUE
            seen.append(item["url"])
    assert sorted(seen) == sorted(urls)
    assert refeed_messages([("http://a.test/", 5)], 1) == {
        0: codec.encode(
            "frontier_event",
            {
                "new_urls": [
                    {"url": "http://a.test/", "depth": 5, "priority": 0, "via": Via.RECRAWL}
                ],
                "completions": [],
                "tick": False,
            },
        )
    }
