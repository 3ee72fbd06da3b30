"""`seine crawl` progress: rich on a terminal, plain periodic lines elsewhere."""

from __future__ import annotations

import io

import pytest

from streams.ops.progress import Progress, ProgressFigures


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal_at_most_one_per_interval() -> None:
    out = io.StringIO()
    progress = Progress(stream=out, interval=3600)
    assert not progress.interactive
    progress.update(ProgressFigures(fetched=5, stored=4, queued=9, errors=1))
    progress.update(ProgressFigures(fetched=6))
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("pages stored 4  fetched 5  ") and "frontier size 9" in lines[0]
    assert "errors 1" in lines[0] and "\x1b" not in out.getvalue()


def test_rich_bar_on_a_terminal_against_the_page_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    out = Tty()
    progress = Progress(stream=out, total=50)
    assert progress.interactive
    progress.update(ProgressFigures(fetched=20, stored=18, queued=7, dead_letters=2))
    progress.close()
    text = out.getvalue()
    assert "\x1b[" in text  # drawn with terminal escapes, in place
    assert "crawling" in text and "20/50" in text and "dead letters 2" in text


def test_figures_sum_over_worker_status_files() -> None:
    statuses = [
        {
            "outcomes": {"fetched": 3, "error": 1},
            "pages_stored": 2,
            "queued": 5,
            "in_flight": 1,
            "dead_letters": 0,
        },
        {
            "outcomes": {"fetched": 4, "dns-error": 2},
            "pages_stored": 4,
            "queued": 0,
            "dead_letters": 1,
        },
    ]
    f = ProgressFigures.of_statuses(statuses)
    assert (f.fetched, f.stored, f.queued, f.in_flight, f.errors, f.dead_letters, f.workers) == (
        7,
        6,
        5,
        1,
        3,
        1,
        2,
    )


def test_the_rate_waits_for_a_second_of_crawling() -> None:
    """A few pages over the first milliseconds are not thousands a second."""
    out = io.StringIO()
    progress = Progress(stream=out, interval=0)
    progress.update(ProgressFigures(fetched=11))
    assert "fetched 11  – pages/s" in out.getvalue()
    progress.started -= 2.2  # as if two seconds had passed
    progress.update(ProgressFigures(fetched=11))
    assert "fetched 11  5 pages/s" in out.getvalue().splitlines()[1]
