"""A second `seine demo` on the same data dir starts afresh and says so; a data dir
that is not a demo's is refused, never cleared."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.cli.commands import DEMO_MARK, _fresh_demo_dir


def test_a_previous_demo_is_cleared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    assert _fresh_demo_dir(demo) is None
    (demo / "pages").mkdir()
    (demo / "pages" / "seg.warc.gz").write_bytes(b"old")
    assert _fresh_demo_dir(demo) is None
    assert sorted(p.name for p in demo.iterdir()) == [DEMO_MARK]
    assert "starting afresh" in capsys.readouterr().out


def test_another_crawls_data_is_refused_and_kept(tmp_path: Path) -> None:
    crawl = tmp_path / "crawl"
    (crawl / "pages").mkdir(parents=True)
    why = _fresh_demo_dir(crawl)
    assert why is not None and str(crawl) in why
    assert (crawl / "pages").exists()
