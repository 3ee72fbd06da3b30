"""A crawl that stopped moving with messages sent and never handled.

`seine crawl --workers N` judges idleness from the workers' summed counters: every
message sent to a consumed topic handled. A message that never reaches its agent
(seen with two workers on the embedded broker: one content-dedup message of 2,069)
left the supervisor waiting for ever with every figure still, and nothing said
why. `StallWatch` notices that state — counters unchanged for a while, some topic
short of handled messages — so the supervisor can say which topic and how many,
once, instead of hanging silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def unhandled(
    sent: Mapping[str, int], done: Mapping[str, int], unconsumed: Iterable[str] = ()
) -> dict[str, int]:
    """Per consumed topic, messages sent and not (yet) handled; topics that balance
    are left out."""
    skip = set(unconsumed)
    return {
        name: count - done.get(name, 0)
        for name, count in sorted(sent.items())
        if name not in skip and count > done.get(name, 0)
    }


class StallWatch:
    """Reports, once per stall, counters that stopped moving while unbalanced.

    `observe` is fed the summed counters at each poll; a change of any counter is
    progress and restarts the clock (so a slow crawl under load never counts as
    stalled). After `after` seconds without progress and with messages unhandled,
    it returns the unhandled messages per topic, once; progress re-arms it.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self._signature: Any = None
        self._since = 0.0
        self._reported = False

    def observe(
        self,
        now: float,
        sent: Mapping[str, int],
        done: Mapping[str, int],
        unconsumed: Iterable[str] = (),
    ) -> dict[str, int] | None:
        signature = (tuple(sorted(sent.items())), tuple(sorted(done.items())))
        if signature != self._signature:
            self._signature = signature
            self._since = now
            self._reported = False
            return None
        missing = unhandled(sent, done, unconsumed)
        if not missing or self._reported or now - self._since < self.after:
            return None
        self._reported = True
        return missing


def describe(missing: Mapping[str, int], seconds: float) -> str:
    """One line naming each topic short of handled messages."""
    parts = ", ".join(
        f"{count} {name} message{'s' if count != 1 else ''}" for name, count in missing.items()
    )
    return (
        f"no progress for {seconds:.0f}s with {parts} sent and not handled: "
        "the crawl cannot go idle while they are missing"
    )
