"""What happened to each URL: the crawl states the frontier writes to the URL registry.

Why here
--------
The URL registry (:mod:`streams.core.registry`) already holds one record per URL
the crawl accepted, in the partition of its host. The frontier acts on every one
of those URLs in that same partition (queues it, dispatches it, hears how its
fetch went, or refuses it), so the registry value is the one place that can say
what became of a URL without a join over the crawl log: ``queued`` →
``fetching`` → ``fetched`` / ``failed`` / ``refused`` / ``parked``. A later
``seine`` command (status, recrawl, replay of failures) reads one key per URL or
one prefix scan per site.

:class:`StateUpdates` collects the states of one handled frontier message in the
order things happened (a later state of a URL replaces an earlier one, so a 429
that sent the page back to its queue leaves it ``queued``), and the stage writes
them in one WriteBatch. Pure logic: no Kafka imports.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from streams.core.frontier import FETCHED_ALREADY, Decision, Dispatch, tier_for
from streams.core.provenance import Via
from streams.core.records import FetchCompletion

__all__ = [
    "FRONTIER_STATE",
    "RESEND",
    "STAMP",
    "StateUpdates",
    "is_retier",
    "registration_stamp",
    "resend_due",
    "retier_candidate",
]


def is_retier(via: str | None) -> bool:
    """Is this candidate's `via` a re-tier request?"""
    return via == Via.RETIER


#: Decision outcomes that park a URL with its host rather than refuse the URL itself.
PARKED_OUTCOMES = frozenset({"host-parked"})


class StateUpdates:
    """The crawl states of one frontier message, latest per URL."""

    def __init__(self) -> None:
        self.states: dict[str, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.states)

    def _set(self, url: str, state: dict[str, Any], *, merge: bool = False) -> None:
        if merge and url in self.states:
            state = {**self.states[url], **state}
        self.states.pop(url, None)  # re-insert: the dict keeps the order of the last change
        self.states[url] = state

    def queued(
        self,
        url: str,
        slot: tuple[int, int],
        depth: int,
        at: float,
        inlinks: int = 1,
        priority: int = 0,
    ) -> None:
        """The frontier put the URL in slot (tier, sequence) of its host's queue: the
        slot lets a later re-tier move the item without a scan."""
        state: dict[str, Any] = {
            "s": "queued",
            "at": round(at, 3),
            "tier": slot[0],
            "q": slot[1],
            "depth": depth,
        }
        if inlinks > 1:
            state["in"] = inlinks
        if priority:
            state["prio"] = priority
        self._set(url, state)

    def dispatched(self, dispatch: Dispatch) -> None:
        """The URL left its queue for the fetcher (robots.txt fetches are not registered),
        from the slot (tier, sequence) it keeps: `Frontier.accounts_for` checks that
        the host state heard of the dispatch when the message is read again."""
        if dispatch.kind == "robots":
            return
        state: dict[str, Any] = {"s": "fetching", "at": round(dispatch.dispatched_at, 3)}
        if dispatch.slot is not None:
            state["tier"], state["q"] = dispatch.slot
        self._set(dispatch.url, state)

    def completed(self, completion: FetchCompletion) -> None:
        """A fetch came back: ``fetched`` with the HTTP status when the server answered
        (whatever the status: a 404 was fetched), ``failed`` with the reason when not."""
        if completion["kind"] == "robots":
            return
        status = int(completion["status"])
        state: dict[str, Any] = {
            "s": "fetched" if status else "failed",
            "at": round(float(completion["finished_at"]), 3),
            "status": status,
            "outcome": completion["outcome"],
        }
        reason = completion.get("reason") or ""
        if reason:
            state["reason"] = reason
        self._set(completion["url"], state)

    def decided(self, decision: Decision, at: float) -> None:
        """A decision of the frontier about a URL (the crawl log has the same record)."""
        if not decision.url:
            return
        if decision.requeued:
            self._set(
                decision.url,
                {"s": "queued", "at": round(at, 3), "retry": decision.reason},
                merge=True,
            )
        elif decision.outcome == FETCHED_ALREADY:
            # a refetch not done: the page is stored (its earlier state stays)
            self._set(decision.url, {"s": "fetched", "at": round(at, 3)}, merge=True)
        elif decision.outcome == "backoff":
            # The page's own fetch failed (its completion said how); the host waits.
            self._set(decision.url, {"s": "failed", "backoff": decision.reason}, merge=True)
        else:
            self._set(
                decision.url,
                {
                    "s": "parked" if decision.outcome in PARKED_OUTCOMES else "refused",
                    "at": round(at, 3),
                    "outcome": decision.outcome,
                    "reason": decision.reason,
                },
            )


def retier_candidate(
    url: str, old: dict[str, Any] | None, new: dict[str, Any]
) -> dict[str, Any] | None:
    """The frontier candidate that moves `url` up a tier, when url-seen's new in-link
    count (`new`) lifts a URL that is still queued (`old`) above its tier; else None.

    Thresholds are those of :func:`~streams.core.frontier.tier_for`: each doubling
    of the count (2, 4, 8 ...) lifts a tier, so a URL is re-tiered at most a few
    times however many links it gets. The candidate's `via` carries the slot `old`
    names (``slot``): the frontier moves the item from there without reading the
    registry again.
    """
    if not old or old.get("s") != "queued" or "q" not in old or "tier" not in old:
        return None
    depth, priority = int(old.get("depth", 0)), int(old.get("prio", 0))
    inlinks = int(new.get("in", 1))
    if tier_for(priority, depth, inlinks) >= int(old["tier"]):
        return None
    return {
        "url": url,
        "depth": depth,
        "priority": priority,
        "via": Via.RETIER,
        "slot": (int(old["tier"]), int(old["q"])),
        "inlinks": inlinks,
        "kind": "page",
    }


# -- registered, never queued ----------------------------------------------------
#
# url-seen registers a URL (a RocksDB write, then a changelog record) and sends it to
# the frontier (a message on the frontier topic) as two separate writes. A worker
# SIGKILLed between them, or whose frontier message was still in its producer's queue,
# leaves the URL registered with nothing queued: the url-seen message is read again
# (its offset was never committed: commits wait for every send to be acknowledged),
# but it then finds the URL registered and, before this, dropped it as seen, and so
# did every later link to it. The registration therefore carries a stamp, and a URL
# met again while its registry record has no frontier state (no ``s``) is sent again:
#
# * at once when the message meeting it is the one that registered it (same offset
#   ``o``: a redelivery, on this worker or, as the stamp is in the changelog record
#   too, on whichever worker recovered the partition);
# * otherwise once its stamp ``r`` is `grace` seconds old (the frontier normally
#   acts within a second: a longer silence means its message was lost), and the
#   stamp is renewed, so a URL is re-sent at most once a grace period.
#
# A registration with no stamp (made before stamps were kept) is stamped when met,
# which starts its grace period.
#
# The frontier drops a re-sent URL it has acted on since (any ``s``), so a re-send
# that crossed the original costs a lookup, not a second fetch.

#: What marks a state the frontier wrote (url-seen's own fields are ``r``, ``o``, ``in``).
FRONTIER_STATE = b'"s":'


def registration_stamp(at: float, offset: int | None = None) -> bytes:
    """url-seen's stamp for the URLs one message registers (encoded once per message)."""
    stamp: dict[str, Any] = {"r": round(at, 3)}
    if offset is not None:
        stamp["o"] = int(offset)
    return json.dumps(stamp, separators=(",", ":")).encode("ascii")


#: :func:`resend_due`'s answers besides None (nothing to do).
RESEND = "resend"
STAMP = "stamp"


def resend_due(value: bytes, now: float, offset: int | None, grace: float) -> str | None:
    """What url-seen does about a URL it meets again, from its registry value:
    `RESEND` it to the frontier (and renew its stamp), `STAMP` it (no stamp yet), or
    nothing (None: the frontier has acted on it, or its stamp is fresh).

    `offset` is the url-seen message being handled (None: unknown), `grace` the
    seconds a registration may wait for the frontier (<= 0: only redeliveries are
    re-sent). See the comment above.
    """
    value = bytes(value)
    sep = value.find(b"\x00", 8)
    if sep < 0:
        return STAMP  # registered before stamps, never queued
    raw = value[sep + 1 :]
    if FRONTIER_STATE in raw:
        return None  # the frontier has acted on it (a canonical URL holds no quote)
    try:
        state = orjson.loads(raw)
    except ValueError:
        state = None
    if not isinstance(state, dict) or "r" not in state:
        return STAMP
    if offset is not None and state.get("o") == offset:
        return RESEND
    return RESEND if grace > 0 and now - float(state["r"]) >= grace else None
