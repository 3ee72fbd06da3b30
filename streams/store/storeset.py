"""Several page stores read as one: a crawl with N workers has one store per worker.

After a rebalance a host's captures may sit in two workers' stores, so a lookup
asks every store and keeps the newest capture (or the newest at or before `at`), and
the exported index lists a capture both stores wrote once.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TextIO

from streams.store.pagestore import Capture, PageStore

log = logging.getLogger("seine.store")


def store_paths(data_dir: str | Path) -> list[Path]:
    """The page stores under a data dir: its own, and one per worker of `--workers N`."""
    data = Path(data_dir)
    paths = [data / "pages", *sorted(data.glob("worker-*/pages"))]
    return [path for path in paths if (path / "index").is_dir()]


def open_stores(data_dir: str | Path) -> StoreSet:
    """Every page store under `data_dir`, read-only; FileNotFoundError when there is none."""
    paths = store_paths(data_dir)
    if not paths:
        raise FileNotFoundError(f"no page store under {data_dir}")
    return StoreSet([PageStore(path, read_only=True) for path in paths])


def capture_identity(cdxj_line: str) -> tuple[str, ...]:
    """What makes a CDXJ line one capture: its key and timestamp, and its URL, digest
    and record type (not the file and offset it was written at)."""
    key, timestamp, fields = cdxj_line.split(" ", 2)
    record = json.loads(fields)
    return key, timestamp, *(str(record.get(f, "")) for f in ("url", "digest", "mime"))


class StoreSet:
    def __init__(self, stores: list[PageStore]) -> None:
        if not stores:
            raise ValueError("a StoreSet needs at least one page store")
        self.stores = stores

    @property
    def path(self) -> Path:
        return self.stores[0].path if len(self.stores) == 1 else self.stores[0].path.parent

    def get(self, url: str, at: float | None = None) -> Capture | None:
        """The newest capture of `url` in any store; a revisit whose original lives in
        another worker's store gets the original's body from there."""
        captures = [c for c in (store.get(url, at=at) for store in self.stores) if c is not None]
        if not captures:
            return None
        capture = max(captures, key=lambda c: c.fetched_at)
        if capture.revisit_of and not capture.body and capture.revisit_of != url:
            original = self.get(capture.revisit_of)
            if original is not None:
                capture = dataclasses.replace(capture, body=original.body)
        return capture

    def __contains__(self, url: str) -> bool:
        return any(url in store for store in self.stores)

    def urls(self) -> list[str]:
        return sorted({url for store in self.stores for url in store.urls()})

    def url_kinds(self) -> list[tuple[str, str | None]]:
        """Every stored URL once, with the URL it is an exact copy of (None: a page of
        its own in some store, which wins over a copy in another)."""
        kinds: dict[str, str | None] = {}
        for store in self.stores:
            for url, original in store.url_kinds():
                if original is None or url not in kinds:
                    kinds[url] = original
        return sorted(kinds.items())

    def export_cdxj(self, out: TextIO) -> int:
        """One sorted CDXJ index of every store. A capture two workers both wrote (the
        same URL, fetch time, digest and record type: its message read again by the
        partition's next owner after a kill, before the first one's revisit record
        reached the changelog) is one capture: the line of the first store is kept."""
        if len(self.stores) == 1:
            return self.stores[0].export_cdxj(out)
        lines: list[str] = []
        for store in self.stores:
            buffer = io.StringIO()
            store.export_cdxj(buffer)
            lines.extend(buffer.getvalue().splitlines())
        seen: set[tuple[str, ...]] = set()
        kept: list[str] = []
        for line in lines:
            identity = capture_identity(line)
            if identity not in seen:
                seen.add(identity)
                kept.append(line)
        kept.sort()
        for line in kept:
            out.write(line + "\n")
        return len(kept)

    def close(self) -> None:
        for store in self.stores:
            store.close()

    def __enter__(self) -> StoreSet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class SiblingStores:
    """The page stores of the other workers of a `--workers N` data dir, read-only.

    A partition's previous owner (killed, or handing it over at a rebalance) stores a
    page in *its* store before its completion reaches the frontier's changelog and
    before the offsets of the messages that carried it are committed. The new owner,
    asking only its own store, fetched such a page again: the frontier adopting a
    fetch that was in flight, and link-extract reading a parse message again whose body
    its hand-off cache never held. Both ask these stores when their own has no capture.

    A read-only open sees its store as of the open, so the stores are opened again
    once the last open is `max_age` seconds old: a partition moves only after a
    rebalance of seconds, during which its previous owner has stopped writing. Only a
    worker that misses opens them. Workers on other machines (a cluster) have no store
    here: only the own store is asked then.
    """

    def __init__(
        self,
        own: Path,
        max_age: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.own = own.resolve()
        self.max_age = max_age
        self.clock = clock
        self._stores: list[PageStore] = []
        self._opened_at: float | None = None

    def paths(self) -> list[Path]:
        """The other stores under this worker's data dir's parent (none when this
        store is not a worker's: a one-worker crawl)."""
        worker_dir = self.own.parent
        if not worker_dir.name.startswith("worker-"):
            return []
        return [path for path in store_paths(worker_dir.parent) if path.resolve() != self.own]

    def fetched_since(self, url: str, since: float) -> bool:
        """Does another worker's store hold a capture of `url` fetched at or after `since`?"""
        return self._holding(url, since) is not None

    def capture_since(self, url: str, since: float) -> Capture | None:
        """The latest capture of `url` in the store of another worker that holds one
        fetched at or after `since` (None: none does)."""
        store = self._holding(url, since)
        return store.get(url) if store is not None else None

    def __contains__(self, url: str) -> bool:
        """Does another worker's store hold any capture of `url`, as of the last open
        after the last `expire` (a rebalance: what a partition's previous owner wrote
        is written before this worker holds it)? Asked of each page the frontier
        dispatches, so the stores are not opened again on age."""
        if self._opened_at is None:
            self._refresh()
        return any(url in store for store in self._stores)

    def expire(self) -> None:
        """Open the stores again at the next question (partitions were assigned)."""
        self._opened_at = None

    def _holding(self, url: str, since: float) -> PageStore | None:
        self._refresh()
        return next((store for store in self._stores if store.fetched_since(url, since)), None)

    def _refresh(self) -> None:
        now = self.clock()
        if self._opened_at is not None and now - self._opened_at < self.max_age:
            return
        self.close()
        for path in self.paths():
            try:
                self._stores.append(PageStore(path, read_only=True))
            except Exception as exc:  # a store being created, or gone: not asked
                log.warning("store: cannot read the page store %s: %s", path, exc)
        self._opened_at = now

    def close(self) -> None:
        for store in self._stores:
            store.close()
        self._stores = []
        self._opened_at = None


def held_anywhere(own: PageStore, siblings: SiblingStores) -> Callable[[str], bool]:
    """Whether this worker's store, or another worker's (`SiblingStores.__contains__`),
    holds any capture of a URL."""

    def held(url: str) -> bool:
        return url in own or url in siblings

    return held


def stored_anywhere(own: PageStore, siblings: SiblingStores) -> Callable[[str, float], bool]:
    """`fetched_since` over this worker's store, then the other workers' stores."""

    def stored_since(url: str, since: float) -> bool:
        return own.fetched_since(url, since) or siblings.fetched_since(url, since)

    return stored_since
