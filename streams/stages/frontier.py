"""frontier: enqueue new URLs, apply completions, and dispatch what is due.

Every state change of a host happens while handling a message of that host's
partition (Faust writes a table change to the changelog partition of the event
being handled), which is why timed wake-ups are *tick messages* to the partition
rather than timers that touch tables directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

import topology
from streams.core.freshness import Record, RevisitSchedule
from streams.core.frontier import Decision, Dispatch, Frontier, HostState, tier_for
from streams.core.provenance import Via
from streams.core.records import FetchCompletion, FetchRequest, FrontierEvent, UrlCandidate
from streams.core.sites import url_id_long
from streams.core.urlstate import StateUpdates, is_retier
from streams.stages import recrawl
from streams.stages.context import Outbox, crawl_log_record


class StateRegistry(Protocol):
    """Where the frontier records each URL's crawl state: url-seen's
    :class:`~streams.tables.registry.RegistryTable` in the crawl (the current event's
    partition), a :class:`~streams.store.url_registry.UrlRegistry` in unit tests."""

    def set_states(self, states: Mapping[str, Mapping[str, Any]]) -> list[str]: ...

    def states(self, urls: Sequence[str]) -> dict[str, dict[str, Any] | None]: ...


log = logging.getLogger("seine.frontier")


def handle(
    partition: int,
    event: FrontierEvent,
    frontier: Frontier,
    host_states: Iterable[tuple[str, HostState]],
    out: Outbox,
    done: MutableMapping[str, str] | None = None,
    revisits: RevisitSchedule | None = None,
    revisit_records: Iterable[tuple[str, Record]] = (),
    *,
    dispatch: bool = True,
    registry: StateRegistry | None = None,
    stored_since: Callable[[str, float], bool] | None = None,
    dispatched: list[FetchRequest] | None = None,
) -> None:
    """Handle one frontier event of `partition`.

    `done` records the URLs whose crawl ended without a stored page (an error, a
    redirect, robots-disallowed, a parked host): with the page store it is what
    lets a resume over a data dir whose topics were lost (streams/ops/resume.py)
    tell a finished URL from one lost in transit.

    `registry` is the URL registry: each URL's crawl state (queued, fetching,
    fetched with its status, failed with the reason, refused or parked with the
    decision) is written there, all of this message's states in one WriteBatch,
    after the last of them is known.

    `stored_since` (the page store's `fetched_since`) lets an adoption skip a fetch
    in flight at a crash whose page is stored already (`Frontier.adopt`); a worker
    sets it on the frontier once instead (`Frontier.stored_since`).

    `dispatched` collects the fetch requests this event makes, for the caller to
    start at once in this worker (`FetchStage.start_dispatched`) and to send to the
    fetch topic those it could not start; without it they are all sent.

    A page url-seen sends (new, or again as `Via.RESEND`: registered but, as far as
    url-seen could tell, never queued) is queued only if the registry holds no state
    of the frontier's for it: a re-send that crossed the original, or a frontier
    message read twice (at-least-once: its offset was not committed when a worker
    died, and Apache Kafka delivers it again after the restart), changes nothing.
    URLs a resume re-queues (`Via.RESUME`) and sitemaps due again are queued as sent.
    A ``queued`` state the frontier's own tables no longer account for
    (`Frontier.accounts_for`: the host state came back from its changelog older than
    the registry and the queue, after the whole cluster went away) is not trusted:
    that URL is queued again, or it would never be fetched. So is a ``fetching``
    state whose slot the host state's head never passed (the dispatch's record was
    lost at a kill, before its request started).
    """
    if not frontier.knows_partition(partition):
        frontier.adopt(partition, host_states, stored_since)
    new_urls = event["new_urls"]
    if revisits is not None:  # hook (freshness): 304s, re-fed URLs, due revisits
        new_urls = recrawl.handle(partition, event, frontier, revisits, revisit_records)
    decisions: list[Decision] = []
    states = StateUpdates()
    now = frontier.clock()
    retier = [c for c in new_urls if is_retier(c.get("via"))]
    if retier:
        new_urls = [c for c in new_urls if not is_retier(c.get("via"))]
    if new_urls:
        new_urls = _without_known(new_urls, registry, frontier)
    _enqueue_new(frontier, new_urls, states, decisions, now)
    if retier and registry is not None:
        _retier(frontier, registry, retier, states, now)
    _apply_completions(frontier, event["completions"], states, decisions, done, now)
    dispatches: list[Dispatch] = []
    if dispatch:  # not while draining before a stop
        dispatches = _dispatch_due(frontier, partition, states, decisions, now)
    frontier.flush()
    if registry is not None and len(states):
        try:
            registry.set_states(states.states)
        except Exception:  # the fetches are due whatever the record says: send them
            log.exception("frontier: recording %d URL states failed", len(states))
    _send(partition, dispatches, decisions, out, done, dispatched)


def _enqueue_new(
    frontier: Frontier,
    candidates: list[UrlCandidate],
    states: StateUpdates,
    decisions: list[Decision],
    now: float,
) -> None:
    """Queue the new URLs of a message, recording each one's state: queued in its
    slot, or the decision not to (a trap budget of its host)."""
    for candidate in candidates:
        inlinks = candidate.get("inlinks", 1)
        refused = frontier.enqueue(
            candidate["url"],
            candidate["depth"],
            candidate["priority"],
            inlinks=inlinks,
            kind=candidate.get("kind", "page"),
            # a resume re-queues what was lost in transit, fetched or not
            again=candidate.get("via") == Via.RESUME,
        )
        if refused is not None:
            decisions.append(refused)
            states.decided(refused, now)
        else:
            states.queued(
                candidate["url"],
                frontier.last_slot,
                candidate["depth"],
                now,
                inlinks,
                candidate["priority"],
            )


def _apply_completions(
    frontier: Frontier,
    completions: Iterable[FetchCompletion],
    states: StateUpdates,
    decisions: list[Decision],
    done: MutableMapping[str, str] | None,
    now: float,
) -> None:
    """Release the hosts whose fetches finished, recording each URL's state and the
    decisions a completion brings (a backoff, a drained queue); `done` gets each page
    whose crawl ended without a stored page."""
    for completion in completions:
        states.completed(completion)
        settled = frontier.complete(
            completion["host"],
            completion["kind"],
            completion["status"],
            completion["outcome"],
            completion["elapsed_ms"],
            completion["finished_at"],
            completion["retry_after"],
            completion["body"],
            completion.get("dispatched_at", 0.0),
            completion.get("reason", ""),
        )
        for decision in settled:
            states.decided(decision, now)
        decisions.extend(settled)
        if done is not None and completion["kind"] == "page" and completion["outcome"] != "fetched":
            done[completion["url"]] = completion["outcome"]


def _dispatch_due(
    frontier: Frontier,
    partition: int,
    states: StateUpdates,
    decisions: list[Decision],
    now: float,
) -> list[Dispatch]:
    """The fetches due in `partition` now, and those whose lease ran out, each
    recorded as dispatched; the URLs decided on the way go to `decisions`."""
    dispatches, more = frontier.due(partition)
    decisions.extend(more)
    dispatches.extend(frontier.expire_leases(partition))
    for decision in more:
        states.decided(decision, now)
    for due in dispatches:
        states.dispatched(due)
    return dispatches


def _send(
    partition: int,
    dispatches: list[Dispatch],
    decisions: list[Decision],
    out: Outbox,
    done: MutableMapping[str, str] | None,
    dispatched: list[FetchRequest] | None,
) -> None:
    """Hand out the fetch requests (to `dispatched`, else the fetch topic) and log
    every decision to the crawl log (and `done`)."""
    for due in dispatches:
        request = _request(due)
        if dispatched is not None:
            dispatched.append(request)
        else:
            out.add(topology.FETCH, partition, request)
    for decision in decisions:
        if done is not None:
            done[decision.url] = decision.outcome
        out.log(
            crawl_log_record(
                decision.url,
                "frontier",
                decision.outcome,
                host=decision.host,
                reason=decision.reason,
                depth=decision.depth,
                url_id=url_id_long(decision.url),
            )
        )


def _without_known(
    candidates: list[UrlCandidate],
    registry: StateRegistry | None,
    frontier: Frontier | None = None,
) -> list[UrlCandidate]:
    """The candidates, less pages this frontier has acted on (the registry holds a
    state of its own for them) or that come earlier in the same message.

    A ``queued`` state names its slot; when the `frontier` does not account for the
    URL there (`Frontier.accounts_for`), the enqueue it records was lost and the
    candidate is kept: it is queued again, once."""
    checked = [c["url"] for c in candidates if _checked(c)]
    states = registry.states(checked) if registry is not None and checked else {}
    known = {url for url, state in states.items() if state and "s" in state}
    if frontier is not None:
        lost = [url for url in known if _enqueue_lost(frontier, url, states[url])]
        if lost:
            known.difference_update(lost)
            log.info(
                "frontier: %d URLs queued or dispatched in the registry but not in the queue "
                "(their host state came back older): queued again (e.g. %s)",
                len(lost),
                lost[0][:200],
            )
    kept: list[UrlCandidate] = []
    for candidate in candidates:
        url = candidate["url"]
        if _checked(candidate):
            if url in known:
                continue
            known.add(url)  # once per message
        kept.append(candidate)
    dropped = len(candidates) - len(kept)
    if dropped:
        log.debug("frontier: %d URLs already acted on, dropped", dropped)
    return kept


def _enqueue_lost(frontier: Frontier, url: str, state: Mapping[str, Any] | None) -> bool:
    """Whether a URL the registry holds as queued in a slot, or as dispatched from
    it, is not in that slot as far as the frontier's tables go and was not served
    from it (see `Frontier.accounts_for`).

    A lost dispatch had no fetch: a dispatched request starts only once the table
    records naming it are acknowledged (`SeineApp`'s frontier step), so a kill that
    keeps the registry's ``fetching`` and loses the host state's record stopped it
    before its request; queued again, it is fetched once."""
    if not state or state.get("s") not in ("queued", "fetching"):
        return False
    if "q" not in state or "tier" not in state:
        return False
    return not frontier.accounts_for(url, int(state["tier"]), int(state["q"]))


def _checked(candidate: UrlCandidate) -> bool:
    """Whether a candidate is dropped when the frontier has acted on its URL already:
    every page url-seen sends, not what a resume re-queues or a sitemap due again."""
    return candidate.get("kind", "page") == "page" and candidate.get("via") != Via.RESUME


def _retier(
    frontier: Frontier,
    registry: StateRegistry,
    candidates: list[UrlCandidate],
    states: StateUpdates,
    now: float,
) -> None:
    """Move URLs whose in-link count rose (url-seen's re-tier requests) up their host's
    tiers, if they are still queued where url-seen read they were.

    A request names the slot url-seen read from the registry (``slot``); the move
    checks the queue item there (``Frontier.retier``), so a hit needs no registry read.
    A miss (the URL was moved, dispatched or settled since url-seen read it: its
    request crossed another) or a request without a slot asks the registry, in order,
    as every request did before slots: the registry's slot is tried if it is another.

    url-seen handles its messages in batches and asks again in each message that
    brings the URL a link, until the frontier's move reaches the registry, so one
    frontier message can hold several requests for a URL: once one of them moved it,
    the others are skipped (the registry, written after the message, still names the
    slot the move emptied: their moves would find nothing), and the registry is read
    once per URL and message.
    """
    moved: set[str] = set()
    looked_up: dict[str, dict[str, Any] | None] = {}
    for candidate in candidates:
        url = candidate["url"]
        if url in moved:
            continue
        new_tier = tier_for(candidate["priority"], candidate["depth"], candidate["inlinks"])
        carried = candidate.get("slot")
        slot = None
        if carried is not None:
            slot = frontier.retier(url, carried[0], carried[1], new_tier)
        if slot is None:
            if url in looked_up:
                state = looked_up[url]
            else:
                state = looked_up[url] = registry.states([url]).get(url)
            if not state or state.get("s") != "queued" or "q" not in state:
                continue  # dispatched or settled since url-seen asked
            known = (int(state["tier"]), int(state["q"]))
            if known == carried:
                continue  # tried already: not there, or would not move up
            slot = frontier.retier(url, known[0], known[1], new_tier)
        if slot is not None:
            moved.add(url)
            states.queued(
                url, slot, candidate["depth"], now, candidate["inlinks"], candidate["priority"]
            )


def _request(dispatch: Dispatch) -> FetchRequest:
    """A fetch request, carrying the URL's id: a pure hash of the canonical URL, so
    the frontier needs no registry lookup, and the fetch stage's crawl-log record
    can name the URL by the same id url-seen's registry stores."""
    return {
        "url": dispatch.url,
        "host": dispatch.host,
        "kind": dispatch.kind,
        "depth": dispatch.depth,
        "dispatched_at": dispatch.dispatched_at,
        "url_id": url_id_long(dispatch.url) if dispatch.kind == "page" else 0,
    }
