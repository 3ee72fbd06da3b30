"""The embedded broker's object store (streams/objectstore.py): the S3 subset Tansu uses.

Called through `ObjectStore.handle` (the HTTP layer is one test at the end, on a real
loopback socket). What matters to Tansu: create-only and compare-and-swap writes
answer 412 when they must (its offsets depend on it), listings are sorted and page
correctly, and batches consumed by every committing group go away.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import threading
from pathlib import Path

import pytest

from streams.broker import free_port
from streams.objectstore import ObjectStore, Request, serve

RECORDS = "clusters/c/topics/app.fetch/partitions/0000000000/records/"


def req(method: str, path: str, body: bytes = b"", **headers: str) -> Request:
    query: dict[str, str] = {}
    if "?" in path:
        path, _, qs = path.partition("?")
        for part in qs.split("&"):
            name, _, value = part.partition("=")
            query[name] = value
    return Request(
        method, path, query, {k.lower().replace("_", "-"): v for k, v in headers.items()}, body
    )


def batch(offset: int) -> str:
    return f"/tansu/{RECORDS}{offset:020d}.batch"


def keys(text: bytes) -> list[str]:
    return re.findall(r"<Key>([^<]+)</Key>", text.decode())


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore(tmp_path / "segments")


def test_batches_go_to_disk_and_small_objects_stay_in_memory(
    store: ObjectStore, tmp_path: Path
) -> None:
    assert store.handle(req("PUT", batch(0), b"B" * 100, if_none_match="*")).status == 200
    meta = "/tansu/clusters/c/topics/app.fetch/partitions/0000000000/watermark.json"
    assert store.handle(req("PUT", meta, b'{"high":1}')).status == 200
    files = [p for p in (tmp_path / "segments").rglob("*") if p.is_file()]
    assert [p.name for p in files] == [f"{0:020d}.batch"]
    got = store.handle(req("GET", batch(0)))
    assert (got.status, got.body) == (200, b"B" * 100)
    assert store.handle(req("GET", meta)).body == b'{"high":1}'
    assert store.handle(req("GET", "/tansu/missing.json")).status == 404


def test_create_only_refuses_an_existing_object(store: ObjectStore) -> None:
    assert store.handle(req("PUT", batch(5), b"one", if_none_match="*")).status == 200
    again = store.handle(req("PUT", batch(5), b"two", if_none_match="*"))
    assert again.status == 412
    assert store.handle(req("GET", batch(5))).body == b"one"
    key = "/tansu/clusters/c/meta.json"
    assert store.handle(req("PUT", key, b"{}", if_none_match="*")).status == 200
    assert store.handle(req("PUT", key, b"{}", if_none_match="*")).status == 412


def test_compare_and_swap_needs_the_current_etag(store: ObjectStore) -> None:
    key = "/tansu/clusters/c/topics/t/partitions/0000000000/watermark.json"
    first = store.handle(req("PUT", key, b"v1"))
    etag = first.headers["ETag"]
    assert store.handle(req("GET", key)).headers["ETag"] == etag
    ok = store.handle(req("PUT", key, b"v2", if_match=etag))
    assert ok.status == 200 and ok.headers["ETag"] != etag
    stale = store.handle(req("PUT", key, b"v3", if_match=etag))
    assert stale.status == 412
    assert store.handle(req("GET", key)).body == b"v2"
    assert store.handle(req("PUT", "/tansu/none.json", b"x", if_match=etag)).status == 404
    assert store.handle(req("GET", key, if_match=etag)).status == 412
    assert store.handle(req("GET", key, if_none_match=ok.headers["ETag"])).status == 304


def test_partition_listing_is_sorted_and_pages(store: ObjectStore) -> None:
    for offset in (30, 0, 10, 20, 2500):  # out of order on purpose
        store.handle(req("PUT", batch(offset), b"x" * offset, if_none_match="*"))
    listed = store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}"))
    names = keys(listed.body)
    assert names == [f"{RECORDS}{o:020d}.batch" for o in (0, 10, 20, 30, 2500)]
    assert "<Size>2500</Size>" in listed.body.decode()
    page = store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}&max-keys=2"))
    assert keys(page.body) == names[:2] and b"<IsTruncated>true" in page.body
    token = re.search(rb"<NextContinuationToken>([^<]+)<", page.body)
    assert token is not None
    rest = store.handle(
        req(
            "GET",
            f"/tansu?list-type=2&prefix={RECORDS}&max-keys=2&continuation-token="
            + token.group(1).decode(),
        )
    )
    assert keys(rest.body) == names[2:4]
    after = store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}&start-after={names[3]}"))
    assert keys(after.body) == names[4:]


def test_general_listing_with_a_delimiter(store: ObjectStore) -> None:
    store.handle(req("PUT", batch(0), b"x", if_none_match="*"))
    store.handle(req("PUT", "/tansu/clusters/c/meta.json", b"{}"))
    store.handle(req("PUT", "/tansu/clusters/c/topics/app.fetch.json", b"{}"))
    top = store.handle(req("GET", "/tansu?list-type=2&prefix=clusters/c/&delimiter=/"))
    assert keys(top.body) == ["clusters/c/meta.json"]
    assert "<Prefix>clusters/c/topics/</Prefix>" in top.body.decode()
    everything = store.handle(req("GET", "/tansu?list-type=2"))
    assert keys(everything.body) == sorted(
        ["clusters/c/meta.json", "clusters/c/topics/app.fetch.json", f"{RECORDS}{0:020d}.batch"]
    )


def test_ranges_head_and_deletes(store: ObjectStore, tmp_path: Path) -> None:
    store.handle(req("PUT", batch(7), b"0123456789", if_none_match="*"))
    part = store.handle(req("GET", batch(7), range="bytes=2-4"))
    assert (part.status, part.body, part.headers["Content-Range"]) == (206, b"234", "bytes 2-4/10")
    assert store.handle(req("GET", batch(7), range="bytes=-3")).body == b"789"
    assert store.handle(req("GET", batch(7), range="bytes=20-")).status == 416
    head = store.handle(req("HEAD", batch(7)))
    assert (head.status, head.body, head.head_length) == (200, b"", 10)
    assert store.handle(req("DELETE", batch(7))).status == 204
    assert store.handle(req("GET", batch(7))).status == 404
    assert not list((tmp_path / "segments").rglob("*.batch"))
    store.handle(req("PUT", "/tansu/a.json", b"{}"))
    body = b"<Delete><Object><Key>a.json</Key></Object></Delete>"
    assert store.handle(req("POST", "/tansu?delete", body)).status == 200
    assert store.handle(req("GET", "/tansu/a.json")).status == 404


def test_path_escapes_are_refused(store: ObjectStore) -> None:
    assert store.handle(req("GET", "/tansu/../etc/passwd")).status == 400
    assert store.handle(req("PUT", "/tansu/a/../../x.batch", b"x")).status == 400


def commit(store: ObjectStore, group: str, offset: int, topic: str = "app.fetch") -> None:
    key = f"/tansu/clusters/c/groups/consumers/{group}/offsets/{topic}/partitions/0000000000.json"
    store.handle(req("PUT", key, json.dumps({"offset": offset, "metadata": ""}).encode()))


def test_batches_every_group_consumed_are_trimmed(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "segments", trim_topics=r"^app\.fetch$")
    for offset in (0, 10, 20, 30):
        store.handle(req("PUT", batch(offset), b"x" * 10, if_none_match="*"))
    commit(store, "g1", 15)  # inside batch 10: batch 0 is fully consumed
    assert keys(store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}")).body)[0].endswith(
        f"{10:020d}.batch"
    )
    assert store.trimmed_batches == 1
    assert store.handle(req("GET", batch(0))).status == 404
    commit(store, "g2", 10)  # a second group holds the line at its own offset
    commit(store, "g1", 40)
    assert store.trimmed_batches == 1
    commit(store, "g2", 40)  # the last batch stays: its end is not known
    remaining = keys(store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}")).body)
    assert remaining == [f"{RECORDS}{30:020d}.batch"]
    assert len(list((tmp_path / "segments").rglob("*.batch"))) == 1


def test_topics_outside_the_pattern_are_kept(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "segments", trim_topics=r"^app\.parse$")
    for offset in (0, 10):
        store.handle(req("PUT", batch(offset), b"x", if_none_match="*"))
    commit(store, "g1", 99)
    assert store.trimmed_batches == 0
    assert len(keys(store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}")).body)) == 2


def test_http_keep_alive_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    loop = asyncio.new_event_loop()
    task = loop.create_task(serve(tmp_path / "segments", "127.0.0.1", port))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        conn = None
        for _ in range(100):  # wait for the listener (bounded)
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.connect()
                break
            except OSError:
                conn = None
                threading.Event().wait(0.02)
        assert conn is not None
        conn.request("PUT", batch(3), body=b"abc", headers={"If-None-Match": "*"})
        put = conn.getresponse()
        assert (put.status, put.read()) == (200, b"")
        conn.request("PUT", batch(3), body=b"abc", headers={"If-None-Match": "*"})
        again = conn.getresponse()
        assert again.status == 412 and b"PreconditionFailed" in again.read()
        conn.request("GET", batch(3).replace("/records/", "/%72ecords/"))  # percent-encoded
        got = conn.getresponse()
        assert (got.status, got.read(), got.getheader("ETag")) == (
            200,
            b"abc",
            put.getheader("ETag"),
        )
        conn.request("HEAD", batch(3))
        head = conn.getresponse()
        assert (head.status, head.getheader("Content-Length"), head.read()) == (200, "3", b"")
        conn.close()
    finally:
        loop.call_soon_threadsafe(task.cancel)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_a_partition_listing_pages_short(store: ObjectStore) -> None:
    """Tansu lists from the first batch and stops at its offset: pages stay short."""
    from streams.objectstore import RECORDS_PAGE

    for offset in range(RECORDS_PAGE + 5):
        store.handle(req("PUT", batch(offset), b"x", if_none_match="*"))
    first = store.handle(req("GET", f"/tansu?list-type=2&prefix={RECORDS}"))
    assert len(keys(first.body)) == RECORDS_PAGE and b"<IsTruncated>true" in first.body
    last = keys(first.body)[-1]
    rest = store.handle(
        req("GET", f"/tansu?list-type=2&prefix={RECORDS}&continuation-token={last}")
    )
    assert len(keys(rest.body)) == 5 and b"<IsTruncated>false" in rest.body
