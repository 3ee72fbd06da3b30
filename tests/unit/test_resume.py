"""streams.ops.resume: which URLs a stop lost in transit, from what the data dir keeps."""

from __future__ import annotations

from pathlib import Path

import orjson
from rocksdict import Options, Rdict

from streams.ops.resume import (
    CLEAN_MARK,
    TableState,
    lost_urls,
    read_tables,
    seen_url,
    was_clean,
)


def test_seen_url_reads_both_layouts() -> None:
    assert seen_url(b'"http://a.test/x"', b"1") == "http://a.test/x"
    assert seen_url(b"\x00" * 16, b"\x01" * 8 + b"http://a.test/y") == "http://a.test/y"
    assert seen_url(b"\x00" * 16, b"\x01" * 8) is None


def test_lost_is_seen_minus_queued_in_flight_stored_and_done() -> None:
    state = TableState()
    state.seen[0] = {"http://a/1", "http://a/2", "http://a/3", "http://a/4", "http://a/5"}
    state.seen[1] = {"http://b/1"}
    state.queued = {"http://a/1"}
    state.in_flight = {"http://a/2"}
    state.done = {"http://a/3"}
    assert lost_urls(state, ["http://a/4", "http://b/1"]) == {0: ["http://a/5"]}


def _table(root: Path, name: str, partition: int, items: dict[bytes, bytes]) -> None:
    path = root / "faust" / "v1" / "tables"
    path.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(path / f"{name}-{partition}.db"), Options(raw_mode=True))
    for key, value in items.items():
        db[key] = value
    db.close()


def test_read_tables_from_faust_rocksdb_files(tmp_path: Path) -> None:
    worker = tmp_path / "worker-0"
    _table(tmp_path, "seen", 0, {b'"http://a/1"': b"1", b"__faust\x00offset__": b"9"})
    _table(worker, "seen", 1, {b'"http://b/1"': b"1"})
    _table(tmp_path, "queue", 0, {b'"a\\u0000000000000001"': b'{"url": "http://a/1"}'})
    _table(
        worker,
        "hosts",
        1,
        {b'"b"': b'{"busy": 5.0, "inflight": {"url": "http://b/1", "depth": 0}}'},
    )
    _table(tmp_path, "done", 0, {b'"http://a/2"': b'"http-error"'})
    state = read_tables(tmp_path)
    assert dict(state.seen) == {0: {"http://a/1"}, 1: {"http://b/1"}}
    assert state.queued == {"http://a/1"}
    assert state.in_flight == {"http://b/1"}
    assert state.done == {"http://a/2"}
    assert not was_clean(tmp_path)
    (tmp_path / CLEAN_MARK).touch()
    assert not was_clean(tmp_path), "every worker dir with tables must be marked"
    (worker / CLEAN_MARK).touch()
    assert was_clean(tmp_path)


def _queue_key(authority: str, tier: int, seq: int) -> bytes:
    return orjson.dumps(f"{authority}\x00{tier}\x00{seq:012d}")


def test_a_queue_item_its_host_state_never_heard_of_is_not_queued(tmp_path: Path) -> None:
    """A SIGKILL between a queue item's write and its host state's leaves the item past
    the tail, where the frontier never serves it: the resume must send it again."""
    host = {"heads": [0, 2, 0, 0], "tails": [0, 4, 0, 0], "busy": 0.0, "inflight": None}
    _table(tmp_path, "hosts", 0, {b'"a"': orjson.dumps(host)})
    urls = {seq: f"http://a/{seq}" for seq in range(1, 6)}
    _table(
        tmp_path,
        "queue",
        0,
        {
            **{_queue_key("a", 1, seq): orjson.dumps({"url": url}) for seq, url in urls.items()},
            # a new host whose first host state the kill lost
            _queue_key("b", 1, 0): orjson.dumps({"url": "http://b/0"}),
        },
    )
    _table(tmp_path, "seen", 0, {orjson.dumps(u): b"1" for u in [*urls.values(), "http://b/0"]})
    state = read_tables(tmp_path)
    assert state.queued == {"http://a/2", "http://a/3"}
    # slot 1 was served (below the head), 4 and 5 lie past the tail, b has no state
    assert lost_urls(state, ["http://a/1"]) == {0: ["http://a/4", "http://a/5", "http://b/0"]}
