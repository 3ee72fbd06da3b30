"""Revisits inside the frontier stage, and the entry point for re-feeding URLs.

Runs in the frontier's partition (the host's), while a frontier event is current,
so every write to the ``revisits`` table lands in the host's changelog partition:

* a page completion with status 304 marks the URL unchanged (its interval grows);
* a re-fed URL (``via`` starting with "recrawl": `Via.RECRAWL`, ``seine replay``'s
  "recrawl:replay", or `Via.RECRAWL_WHEN_DUE`) is queued again
  *without* going through url-seen, which would drop it as already seen;
* revisits that are due are queued like new URLs, so they stay polite.

**Re-feeding, for tools** (e.g. ``seine replay``): send a ``frontier_event`` whose
``new_urls`` carry ``via`` = `Via.RECRAWL` (fetch again now, politely, with a
conditional GET) or `Via.RECRAWL_WHEN_DUE` (fetch when the URL's revisit time comes;
now if it never was fetched) to the frontier topic, on the partition of the URL's
host. `refeed_messages` builds those messages; `send_refeed` sends them to a
running crawl.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import topology
from streams import codec
from streams.core.freshness import Record, RevisitSchedule
from streams.core.frontier import Frontier
from streams.core.provenance import Via, handoff_refeed_since
from streams.core.records import FrontierEvent, UrlCandidate


def is_refeed(via: str | None) -> bool:
    return bool(via) and str(via).startswith(Via.RECRAWL)


#: Most due revisits queued per frontier event (the rest wait for the next tick).
MAX_DUE_PER_EVENT = 1000


def handle(
    partition: int,
    event: FrontierEvent,
    frontier: Frontier,
    revisits: RevisitSchedule,
    records: Iterable[tuple[str, Record]],
) -> list[UrlCandidate]:
    """Apply an event's revisit parts; returns the new URLs left for the frontier."""
    if not revisits.knows_partition(partition):
        revisits.adopt(partition, records)
    for done in event["completions"]:
        if done["kind"] == "page" and done["status"] == 304:
            revisits.unmodified(done["url"])
    rest: list[UrlCandidate] = []
    for candidate in event["new_urls"]:
        via = candidate.get("via")
        if not is_refeed(via):
            rest.append(candidate)
        elif (since := handoff_refeed_since(via)) is not None:
            # not fetched if the capture gets stored meanwhile: the message that
            # carried its body, read again by this worker after a rebalance
            frontier.enqueue(
                candidate["url"],
                candidate["depth"],
                candidate["priority"],
                within_budget=False,
                unless_stored_since=since or None,
                again=True,
            )
        elif revisits.refeed(candidate["url"], when_due=via == Via.RECRAWL_WHEN_DUE):
            frontier.enqueue(
                candidate["url"], candidate["depth"], candidate["priority"], again=True
            )
    for url, depth in revisits.due(partition, MAX_DUE_PER_EVENT):
        frontier.enqueue(url, depth, again=True)
    return rest


def refeed_messages(
    urls: Iterable[str | tuple[str, int]], partitions: int, *, when_due: bool = False
) -> dict[int, bytes]:
    """Frontier-topic messages (partition → encoded frontier_event) that re-feed `urls`
    (canonical URLs, or (URL, depth) pairs) for a recrawl."""
    via = Via.RECRAWL_WHEN_DUE if when_due else Via.RECRAWL
    grouped: dict[int, list[dict[str, Any]]] = {}
    for item in urls:
        url, depth = (item, 0) if isinstance(item, str) else item
        partition = topology.url_partition(url, partitions)
        grouped.setdefault(partition, []).append(
            {"url": url, "depth": depth, "priority": 0, "via": via, "kind": "page"}
        )
    return {
        partition: codec.encode(
            "frontier_event", {"new_urls": items, "completions": [], "tick": False}
        )
        for partition, items in grouped.items()
    }


def send_refeed(
    bootstrap: str,
    app_id: str,
    urls: Iterable[str | tuple[str, int]],
    *,
    when_due: bool = False,
    timeout: float = 10.0,
) -> int:
    """Re-feed URLs to a running crawl's frontier topic; returns how many messages."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    import topology

    topic = topology.topic_name(app_id, topology.FRONTIER)
    # list all topics: asking for one by name lets a broker auto-create it
    info = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout).topics
    meta = info.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise ValueError(f"topic {topic} not found on {bootstrap}: is a crawl running?")
    messages = refeed_messages(urls, len(meta.partitions), when_due=when_due)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, value in messages.items():
        producer.produce(topic, value, partition=partition)
    if producer.flush(timeout):
        raise OSError(f"re-feed: messages to {topic} not delivered within {timeout:g} s")
    return len(messages)
