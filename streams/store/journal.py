"""The crawl log and the dead letters kept beside the pages, as JSON lines.

The crawl-log and dead-letters topics of an embedded broker die with it: a crawl
that ended (or failed) could not say afterwards why pages were missing. Each worker
appends every crawl-log record to ``DATA_DIR/crawl-log.jsonl`` and every dead
letter (without its value, which stays on the topic) to
``DATA_DIR/dead-letters.jsonl``; ``seine status --data-dir DIR`` reads them back,
a worker's dir or a ``--workers N`` crawl's ``worker-*`` dirs alike.

Plain files: no Kafka. A record is written when its stage's output is flushed; the
file is flushed then too, so a killed worker loses at most the batch in hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

CRAWL_LOG_FILE = "crawl-log.jsonl"
DEAD_LETTERS_FILE = "dead-letters.jsonl"


class Journal:
    """Appends records to one JSON-lines file, opened on the first write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(record, separators=(",", ":"), default=_plain) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON")


def journal_files(data_dir: Path, name: str) -> list[Path]:
    """`name` in a data dir and in its workers' dirs (`seine crawl --workers N`)."""
    return [p for p in [data_dir / name, *sorted(data_dir.glob(f"worker-*/{name}"))] if p.exists()]


def read_journal(data_dir: Path, name: str = CRAWL_LOG_FILE) -> Iterator[dict[str, Any]]:
    """Every record of the data dir's journals `name`; a torn last line (a killed
    worker) is skipped."""
    for path in journal_files(data_dir, name):
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield record
