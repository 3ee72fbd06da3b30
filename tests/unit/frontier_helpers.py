"""Shared helpers of the frontier's unit tests: a fake clock, and a frontier over
plain dicts with helpers that play the fetch stage's part (`Harness`)."""

from __future__ import annotations

from collections.abc import Callable

from streams.core.frontier import Decision, Dispatch, Frontier, Politeness, pending

T0 = 1_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """A frontier over plain dicts, with helpers that play the fetch stage's part."""

    def __init__(
        self,
        policy: Politeness | None = None,
        partition_of: Callable[[str], int] = lambda _authority: 0,
        hosts: dict | None = None,
        queue: dict | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock = clock or Clock()
        self.hosts: dict = {} if hosts is None else hosts
        self.queue: dict = {} if queue is None else queue
        self.frontier = Frontier(
            self.hosts, self.queue, policy or Politeness(), partition_of, self.clock
        )

    def due(self, partition: int = 0) -> tuple[list[Dispatch], list[Decision]]:
        return self.frontier.due(partition)

    def dispatched(self, partition: int = 0) -> list[Dispatch]:
        dispatches, decisions = self.due(partition)
        assert decisions == []
        return dispatches

    def finish(
        self,
        d: Dispatch,
        status: int = 200,
        *,
        after: float = 0.0,
        elapsed_ms: float = 10.0,
        retry_after: float | None = None,
        body: bytes | None = None,
    ) -> list[Decision]:
        """Complete `d` `after` seconds from now (the clock moves there)."""
        self.clock.advance(after)
        return self.frontier.complete(
            d.host, d.kind, status, "ok", elapsed_ms, self.clock(), retry_after, body
        )

    def open_host(self, host: str = "a.example", robots: bytes = b"", *pages: str) -> None:
        """Enqueue pages of `host` and serve its robots.txt with `robots`."""
        for page in pages or ("/",):
            self.frontier.enqueue(f"http://{host}{page}")
        (robots_fetch,) = [d for d in self.dispatched() if d.host == host]
        assert robots_fetch.kind == "robots"
        assert self.finish(robots_fetch, 200, body=robots) == []

    def check_counters(self) -> None:
        """queued/in_flight agree with what the tables hold (the queue also holds the
        item of each page in flight until its fetch is over: `Frontier._mark_busy`)."""
        queued = sum(pending(s) for s in self.hosts.values())
        in_flight = [s["inflight_key"] for s in self.hosts.values() if s.get("inflight_key")]
        assert all(key in self.queue for key in in_flight)
        assert self.frontier.queued == queued == len(self.queue) - len(in_flight)
        busy = sum(1 for s in self.hosts.values() if s["busy"])
        assert self.frontier.in_flight == busy


def urls(dispatches: list[Dispatch]) -> list[str]:
    return [d.url for d in dispatches]
