"""robots.txt state of the frontier's hosts, and the politeness wait it sets.

A host state carries its robots.txt status and body (``robots``, ``robots_body``,
``robots_tries``, ``robots_expires``); `RobotsState` applies RFC 9309 to each
robots.txt answer, keeps the parsed rules of each origin in memory (rebuilt from the
host state on demand) and says how long a host waits after a request. Kept apart
from the queues and the leases: it only reads and changes the host state it is given.
"""

from __future__ import annotations

from streams.core.frontier_model import (
    ROBOTS_MAX_TRIES,
    ROBOTS_READY,
    ROBOTS_UNAVAILABLE,
    ROBOTS_UNKNOWN,
    HostState,
    Politeness,
)
from streams.core.robots import RobotsRules


class RobotsState:
    """Parsed robots.txt rules per origin, and the politeness wait of a host."""

    def __init__(self, policy: Politeness) -> None:
        #: The frontier's policy (the same object).
        self.policy = policy
        self._rules: dict[str, RobotsRules] = {}

    def clear(self) -> None:
        """Forget every parsed rule set (rebuilt from host states on demand)."""
        self._rules.clear()

    def rules_for(self, state: HostState) -> RobotsRules | None:
        if state.get("robots") != ROBOTS_READY:
            return None
        origin = state["origin"]
        rules = self._rules.get(origin)
        if rules is None:
            body = state.get("robots_body") or ""
            rules = RobotsRules.parse(body) if body else RobotsRules.allow_all()
            self._rules[origin] = rules
        return rules

    def answered(
        self, state: HostState, status: int, body: bytes | None, finished_at: float
    ) -> float:
        """Apply RFC 9309 to a robots.txt answer; returns extra wait before the next try."""
        self._rules.pop(state["origin"], None)
        if 300 <= status < 400:
            status = 0  # a redirect the fetcher could not resolve: unreachable
        if 200 <= status < 500:
            state["robots"] = ROBOTS_READY
            # 4xx: robots.txt is unavailable, which means allow all
            state["robots_body"] = (body or b"").decode("utf-8", "replace") if status < 300 else ""
            state["robots_tries"] = 0
            state["robots_expires"] = finished_at + self.policy.robots_ttl
            return 0.0
        # 5xx, 3xx left unresolved, or a connection failure: retry later, and until then
        # disallow — unless this was the refresh of rules we have, which stay in force
        # (RFC 9309 2.4: a cached copy may outlive 24 hours while robots.txt is unreachable).
        tries = int(state.get("robots_tries", 0)) + 1
        state["robots_tries"] = tries
        backoff = self.policy.robots_retry * (2 ** (tries - 1))
        if float(state.get("robots_expires") or 0.0) > 0.0:
            state["robots"] = ROBOTS_READY
            state["robots_expires"] = finished_at + min(backoff, self.policy.robots_ttl)
            return 0.0
        if tries >= ROBOTS_MAX_TRIES:
            state["robots"] = ROBOTS_UNAVAILABLE
            return 0.0
        state["robots"] = ROBOTS_UNKNOWN
        return backoff

    def politeness_wait(self, state: HostState, elapsed_ms: float) -> float:
        wait = self.policy.delay
        rules = self.rules_for(state)
        if rules is not None:
            crawl_delay = rules.crawl_delay(self.policy.user_agent)
            if crawl_delay:
                wait = max(wait, min(float(crawl_delay), self.policy.max_crawl_delay))
        if self.policy.response_time_factor:
            wait = max(wait, self.policy.response_time_factor * elapsed_ms / 1000.0)
        return wait
