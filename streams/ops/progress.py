"""Progress of `seine crawl`: a live rich display on a terminal, plain lines otherwise.

On a terminal, a rich progress bar: against `--max-pages` when there is a page
budget, an open-ended pulse otherwise, with the rate and the frontier's state
beside it, redrawn in place. Anywhere else (a pipe, a log file, CI) a plain line
every `interval` seconds, because escape codes and carriage returns make logs
unreadable. A single worker and the `--workers N` supervisor show the same
figures through `ProgressFigures`.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from streams.core.stats import ERROR_OUTCOMES


@dataclass
class ProgressFigures:
    fetched: int = 0
    stored: int = 0
    queued: int = 0
    in_flight: int = 0
    errors: int = 0
    dead_letters: int = 0
    workers: int = 1

    @classmethod
    def of_worker(cls, seine: Any) -> ProgressFigures:
        c = seine.ctx.counters
        return cls(
            fetched=c.outcomes.get("fetched", 0),
            stored=c.pages_stored,
            queued=seine.frontier.queued,
            in_flight=c.fetch_in_flight,
            errors=sum(c.outcomes.get(k, 0) for k in ERROR_OUTCOMES),
            dead_letters=c.dead_letters,
        )

    @classmethod
    def of_statuses(cls, statuses: list[dict[str, Any]]) -> ProgressFigures:
        """Summed over the status files of `seine crawl --workers N`."""
        outcomes: dict[str, int] = {}
        for s in statuses:
            for k, v in s.get("outcomes", {}).items():
                outcomes[k] = outcomes.get(k, 0) + v
        return cls(
            fetched=outcomes.get("fetched", 0),
            stored=sum(s.get("pages_stored", 0) for s in statuses),
            queued=sum(s.get("queued", 0) for s in statuses),
            in_flight=sum(s.get("in_flight", 0) for s in statuses),
            errors=sum(outcomes.get(k, 0) for k in ERROR_OUTCOMES),
            dead_letters=sum(s.get("dead_letters", 0) for s in statuses),
            workers=len(statuses),
        )


class Progress:
    """Call `update(figures)` as often as you like; it redraws or prints as suits."""

    def __init__(
        self,
        interactive: bool | None = None,
        *,
        total: int | None = None,
        interval: float = 5.0,
        stream: IO[str] | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.interval = interval
        self.started = time.time()
        # never printed: the first update prints (monotonic time starts near the
        # machine's boot, so 0.0 is not "long ago" on a machine up under `interval`)
        self._last_line = -math.inf
        self._progress: Any = None
        if self.interactive:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as RichProgress

            console = Console(file=self.stream, force_terminal=True)
            self._progress = RichProgress(
                SpinnerColumn(),
                TextColumn("[bold]crawling"),
                BarColumn(bar_width=24),
                MofNCompleteColumn() if total else TextColumn("{task.completed} pages"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[detail]}"),
                console=console,
                transient=False,
                refresh_per_second=4,
            )
            self._task = self._progress.add_task("crawl", total=total or None, detail="")
            self._progress.start()

    def rate(self, fetched: int) -> str:
        """Pages fetched a second so far; a dash for the first second, where a few
        pages over a few milliseconds would read as thousands a second."""
        elapsed = time.time() - self.started
        return f"{fetched / elapsed:.0f}" if elapsed >= 1.0 else "–"

    def line(self, f: ProgressFigures) -> str:
        workers = f"  workers {f.workers}" if f.workers > 1 else ""
        return (
            # the dashboard's words for the same figures
            f"pages stored {f.stored}  fetched {f.fetched}  {self.rate(f.fetched)} pages/s  "
            f"frontier size {f.queued}  in flight {f.in_flight}  errors {f.errors}  "
            f"dead letters {f.dead_letters}{workers}"
        )

    def update(self, f: ProgressFigures) -> None:
        if self._progress is not None:
            detail = (
                f"{self.rate(f.fetched)}/s · stored {f.stored} · frontier size {f.queued} · "
                f"in flight {f.in_flight} · errors {f.errors} · dead letters {f.dead_letters}"
            )
            self._progress.update(self._task, completed=f.fetched, detail=detail)
        elif time.monotonic() - self._last_line >= self.interval:
            self._last_line = time.monotonic()
            print(self.line(f), file=self.stream, flush=True)

    def __call__(self, seine: Any) -> None:
        """The worker's `on_progress` hook."""
        self.update(ProgressFigures.of_worker(seine))

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def print_idle_from(last_handled_at: float) -> None:
    """When the crawl's work ended (the last message any worker handled, epoch
    seconds): bench/crawl_throughput.py times idle to exit from it."""
    if last_handled_at:
        print(f"seine: idle from {last_handled_at:.3f} (the last message handled)", flush=True)
