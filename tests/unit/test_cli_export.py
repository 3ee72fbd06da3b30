"""`seine export --cdxj`: a sorted CDXJ index of the page store that pywb can use.

The line shape is the one ../shared/conformance/warc11_record_checklist.json gives for
CDXJ (webrecorder/cdxj-indexer): ``SURT-key SP 14-digit-timestamp SP {json}`` with url,
mime, status, digest (base32 SHA-1 without ``sha1:``), length and offset of the gzip
member, and filename; the file sorted lexicographically.  When pywb is installed, the
last test has pywb itself look every URL up in the exported file and load the record
(following revisits to their original) from our WARC segments.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from streams.cli import main
from streams.store.pagestore import PageStore
from streams.store.surt import surt

CHECKLIST = Path(__file__).resolve().parents[2] / ".." / "shared" / "conformance"
CHECKLIST /= "warc11_record_checklist.json"
HTML = [("Content-Type", "text/html; charset=utf-8")]
FIELDS = {"url", "mime", "status", "digest", "length", "offset", "filename"}
T0 = 1_700_000_000.0

URLS = [
    "http://www.zeta.example/Index.html",
    "https://alpha.example/path/to/page?b=2&a=1",
    "http://alpha.example:8080/",
    "http://beta.example/%7Euser/",
    "https://www2.beta.example/q?x=%41",
    "http://gamma.example/a/../b/./c",
]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir whose page store has six pages, a second capture and a revisit.

    Small segments (rotation) so lines point into several files.
    """
    root = tmp_path / "data"
    with PageStore(root / "pages", segment_max_bytes=1500) as store:
        caps = [
            store.put(
                url,
                status=200,
                headers=HTML,
                body=f"<html><body>page {i} at {url}</body></html>".encode(),
                fetched_at=T0 + i,
                ip="192.0.2.1",
            )
            for i, url in enumerate(URLS)
        ]
        store.put(URLS[0], status=404, headers=[], body=b"gone", fetched_at=T0 + 100)
        orig = caps[1]
        store.put_revisit(
            "http://copy.example/dup",
            original_url=orig.url,
            original_digest=orig.digest,
            original_date=orig.fetched_at,
            status=200,
            headers=HTML,
            fetched_at=T0 + 200,
        )
    return root


def export(data_dir: Path, tmp_path: Path) -> list[str]:
    out = tmp_path / "index.cdxj"
    assert main(["export", "--cdxj", "--out", str(out), "--data-dir", str(data_dir)]) == 0
    text = out.read_text("utf-8")
    assert text.endswith("\n")
    return text.splitlines()


def test_lines_are_sorted_surt_keys_with_json_blocks(data_dir: Path, tmp_path: Path) -> None:
    lines = export(data_dir, tmp_path)
    assert len(lines) == len(URLS) + 2
    assert lines == sorted(lines)
    checklist = json.loads(CHECKLIST.read_text("utf-8"))["cdxj_line"]
    for name in FIELDS:  # the checklist names every field we write
        assert name in checklist
    seen: dict[str, list[str]] = {}
    for line in lines:
        key, ts, js = line.split(" ", 2)
        block = json.loads(js)
        assert set(block) == FIELDS
        assert key == surt(block["url"])
        assert re.fullmatch(r"[a-z0-9,.\-]+(:\d+)?\)/\S*", key), key
        assert re.fullmatch(r"\d{14}", ts)
        assert re.fullmatch(r"[A-Z2-7]{32}", block["digest"])
        assert block["status"] in {"200", "404"}
        seen.setdefault(block["url"], []).append(ts)
    assert set(seen) == {*URLS, "http://copy.example/dup"}
    assert seen[URLS[0]] == ["20231114221320", "20231114221500"]  # both captures, in order
    keys = [ln.split(" ", 1)[0] for ln in lines]
    assert "com" not in keys[0] and keys[0].startswith("example,alpha")
    assert "example,zeta)/index.html" in keys  # www. stripped, path lower-cased


def test_offset_and_length_address_the_record(data_dir: Path, tmp_path: Path) -> None:
    segments = data_dir / "pages" / "segments"
    files = set()
    for line in export(data_dir, tmp_path):
        block = json.loads(line.split(" ", 2)[2])
        files.add(block["filename"])
        raw = (segments / block["filename"]).read_bytes()
        offset, length = int(block["offset"]), int(block["length"])
        rec = next(iter(ArchiveIterator(io.BytesIO(raw[offset : offset + length]))))
        assert rec.rec_headers.get_header("WARC-Target-URI") == block["url"]
        assert rec.rec_headers.get_header("WARC-Payload-Digest") == "sha1:" + block["digest"]
        expected = "revisit" if block["mime"] == "warc/revisit" else "response"
        assert rec.rec_type == expected
    assert len(files) > 1  # rotation happened: lines name several segments


def test_stdout_matches_file(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = export(data_dir, tmp_path)
    capsys.readouterr()
    assert main(["export", "--cdxj", "--data-dir", str(data_dir)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == lines
    assert f"{len(lines)} captures" in captured.err


def test_missing_store_and_missing_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.cdxj"
    code = main(["export", "--cdxj", "--out", str(out), "--data-dir", str(tmp_path / "none")])
    assert code == 1
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no temp file left
    assert "no page store" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["export", "--data-dir", str(tmp_path)])  # --cdxj is required
    assert exc.value.code == 2


def test_pywb_reads_the_index_and_replays_the_records(data_dir: Path, tmp_path: Path) -> None:
    """pywb's own CDXJ reader finds every URL; its loader returns our bodies."""
    pytest.importorskip("pywb")
    from pywb.warcserver.index.aggregator import SimpleAggregator
    from pywb.warcserver.index.indexsource import FileIndexSource
    from pywb.warcserver.resource.pathresolvers import DefaultResolverMixin
    from pywb.warcserver.resource.resolvingloader import ResolvingLoader

    export(data_dir, tmp_path)
    source = SimpleAggregator({"seine": FileIndexSource(str(tmp_path / "index.cdxj"))})

    def lookup(params: dict[str, Any]) -> list[Any]:
        cdx_iter, errors = source(params)
        assert not errors
        return list(cdx_iter)

    loader = ResolvingLoader(
        DefaultResolverMixin.make_resolvers(str(data_dir / "pages" / "segments") + "/")
    )
    with PageStore(data_dir / "pages", read_only=True) as store:
        for url in [*URLS, "http://copy.example/dup"]:
            found = lookup({"url": url})  # pywb canonicalises with the surt package
            assert found, f"pywb did not find {url}"
            latest = max(found, key=lambda cdx: cdx["timestamp"])
            assert latest["url"] == url
            headers, stream = loader(latest, [], lookup)  # revisits: pywb finds the original
            capture = store.get(url)
            assert capture is not None
            assert headers.get_statuscode() == str(capture.status)
            assert stream.read() == capture.body
