"""Shared helpers of the frontier stage's registry tests: a fake clock, an outbox
that keeps what would be sent, and a crawl (`Crawl`): the stage's own handler over
a frontier of plain dicts and a real RocksDB URL registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.core.frontier import Frontier, Politeness
from streams.stages import frontier as frontier_stage
from streams.store.url_registry import UrlRegistry

T0 = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class FakeOutbox:
    def __init__(self) -> None:
        self.fetches: list[dict[str, Any]] = []
        self.logs: list[dict[str, Any]] = []

    def add(self, spec: Any, partition: int, item: dict[str, Any]) -> None:
        self.fetches.append(item)

    def log(self, record: dict[str, Any]) -> None:
        self.logs.append(record)


class CountingRegistry:
    """The registry, counting the calls (one per handled message)."""

    def __init__(self, registry: UrlRegistry) -> None:
        self.registry = registry
        self.calls: list[int] = []
        self.reads = 0

    def set_states(self, states: Any) -> list[str]:
        self.calls.append(len(states))
        return self.registry.set_states(states)

    def states(self, urls: Any) -> dict[str, Any]:
        self.reads += 1
        return self.registry.states(urls)


class Crawl:
    def __init__(self, path: Path, policy: Politeness | None = None) -> None:
        self.clock = Clock()
        self.frontier = Frontier({}, {}, policy or Politeness(), lambda _: 0, self.clock)
        self.registry = UrlRegistry(path)
        self.counting = CountingRegistry(self.registry)
        self.out = FakeOutbox()

    def handle(
        self,
        new_urls: list[str] = (),  # type: ignore[assignment]
        completions: list[dict] = (),  # type: ignore[assignment]
        candidates: list[dict] = (),  # type: ignore[assignment]
    ) -> list[dict]:
        """One frontier message; returns the fetch requests it made due."""
        sent = len(self.out.fetches)
        event = {
            "new_urls": [
                {"url": u, "depth": 1, "priority": 0, "via": None, "inlinks": 1, "kind": "page"}
                for u in new_urls
            ]
            + list(candidates),
            "completions": list(completions),
            "tick": False,
        }
        hosts = list(self.frontier.hosts.items())  # adopted when the frontier is new
        frontier_stage.handle(0, event, self.frontier, hosts, self.out, registry=self.counting)  # type: ignore[arg-type]
        return self.out.fetches[sent:]

    def register(self, *urls: str) -> None:
        assert all(self.registry.add_many(urls))  # what url-seen does first

    def state(self, url: str) -> dict[str, Any]:
        state = self.registry.state(url)
        assert state is not None, url
        return state


def done(request: dict[str, Any], status: int = 200, **extra: Any) -> dict[str, Any]:
    return {
        "url": request["url"],
        "host": request["host"],
        "kind": request["kind"],
        "status": status,
        "outcome": extra.pop("outcome", "fetched" if status else "error"),
        "elapsed_ms": 5.0,
        "finished_at": T0,
        "retry_after": None,
        "body": extra.pop("body", None),
        "reason": extra.pop("reason", ""),
    }


class SeenOutbox:
    """url-seen's outbox: what it sends on to the frontier."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def add_frontier(self, partition: int, kind: str, item: dict[str, Any]) -> None:
        self.sent.append(item)

    def log(self, record: dict[str, Any]) -> None:
        raise AssertionError(record)
