"""The parent's watch on workers that stopped reporting (`seine crawl --workers N`).

A live worker writes its status file every 0.25 s. One whose status is older than
`hung_limit` is stuck (a blocked event loop, a stopped process) and is killed;
`multiworker.replace_dead` starts it again. Imports streams.settings only.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from streams.settings import Settings


def hung(statuses: Sequence[Mapping[str, Any] | None], now: float, after: float) -> list[int]:
    """The workers whose last status is older than `after` seconds (wall clock). A
    worker without a status yet is starting; one stopping on its own is given till the
    time it named (`stopping_until`)."""
    if after <= 0:
        return []
    return [i for i, s in enumerate(statuses) if s is not None and now - vouched(s) > after]


def vouched(status: Mapping[str, Any]) -> float:
    """Until when a status vouches for its worker: its writing, or the exit it named."""
    return max(float(status.get("at", 0.0)), float(status.get("stopping_until") or 0.0))


def hung_limit(settings: Settings) -> float:
    """Seconds of silence after which the parent kills a worker (0: never). Shared by
    index, its partitions wait for it; in a group, the others get them after the
    session timeout and cannot open their tables while it holds the locks."""
    after = settings.worker.hung_after
    if settings.kafka.members or after <= 0:
        return after
    return min(after, settings.kafka.session_timeout)


def kill_hung(
    procs: list[subprocess.Popen[bytes]], statuses: list[dict[str, Any] | None], after: float
) -> None:
    """SIGKILL each live worker `hung` names."""
    for index in hung(statuses, time.time(), after):
        if procs[index].poll() is None:
            print(
                f"seine: worker-{index} has not reported for {after:.0f}s; killing it",
                file=sys.stderr,
                flush=True,
            )
            procs[index].kill()
