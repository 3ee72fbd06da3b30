"""The rule that turns a finished crawl's counts into its exit status."""

from __future__ import annotations

from streams.cli.crawl import peak_rss_mb
from streams.ops.exits import nothing_fetched_failure


def test_pages_fetched_is_success_even_with_errors() -> None:
    assert nothing_fetched_failure(fetched=1, errors=50, dead_letters=3) is None


def test_nothing_fetched_without_trouble_is_a_finished_resume() -> None:
    assert nothing_fetched_failure(fetched=0, errors=0, dead_letters=0) is None


def test_nothing_fetched_with_dead_letters_fails_with_reason() -> None:
    reason = nothing_fetched_failure(fetched=0, errors=0, dead_letters=2)
    assert reason is not None and "2 dead letters" in reason


def test_nothing_fetched_with_errors_fails_with_reason() -> None:
    reason = nothing_fetched_failure(fetched=0, errors=4, dead_letters=0)
    assert reason is not None and "4 fetch errors" in reason


def test_peak_rss_is_this_process() -> None:
    assert 5 < peak_rss_mb() < 100_000
