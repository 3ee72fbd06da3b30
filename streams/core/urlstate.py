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

from typing import Any

from streams.core.frontier import Decision, Dispatch

__all__ = ["StateUpdates"]

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

    def queued(self, url: str, tier: int, depth: int, at: float, inlinks: int = 1) -> None:
        """The frontier put the URL in a tier of its host's queue."""
        state: dict[str, Any] = {"s": "queued", "at": round(at, 3), "tier": tier, "depth": depth}
        if inlinks > 1:
            state["in"] = inlinks
        self._set(url, state)

    def dispatched(self, dispatch: Dispatch) -> None:
        """The URL left its queue for the fetcher (robots.txt fetches are not registered)."""
        if dispatch.kind != "robots":
            self._set(dispatch.url, {"s": "fetching", "at": round(dispatch.dispatched_at, 3)})

    def completed(self, completion: dict[str, Any]) -> None:
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
