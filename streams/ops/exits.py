"""How a Seine command ends: its exit statuses, and when a finished crawl counts as
failed. Imported by the CLI, the multi-worker supervisor and the worker app alike,
so none of them imports another for a number. Stdlib only.
"""

from __future__ import annotations

#: Exit status of a crawl that ran to idle without fetching a single page while
#: something went wrong (every seed rejected, every host unreachable): a script
#: running `seine crawl --until-idle` must not mistake that for success.
EXIT_NOTHING_FETCHED = 3
#: Exit status of a worker that lost its cluster (`streams.runtime.supervision.lost_broker`).
EXIT_BROKER_LOST = 4


def nothing_fetched_failure(fetched: int, errors: int, dead_letters: int) -> str | None:
    """Why a finished crawl counts as failed, or None.

    Zero pages fetched is a failure only when errors or dead letters explain it: a
    crawl resumed after it had already finished also fetches nothing, correctly.
    """
    if fetched > 0 or (errors == 0 and dead_letters == 0):
        return None
    return (
        f"no page was fetched ({errors} fetch errors, {dead_letters} dead letters): "
        "see the crawl-log and dead-letters topics for the reasons"
    )
