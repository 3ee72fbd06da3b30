"""link-extract follows at most `max_outlinks` distinct links of a page, the first in
the page, and says in one crawl-log record how many it left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams.core.freshness import RevisitPolicy, RevisitSchedule
from streams.stages import link_extract
from streams.store.pagestore import PageStore
from tests.unit.test_documents_stage import Out, ctx, parsed

FARM = "http://farm.example/"


def crawl(tmp_path: Path, links: list[str], cap: int) -> Out:
    context: Any = ctx()
    context.settings.crawl.max_outlinks = cap
    body = "".join(f"<a href='{h}'>item {i}</a>" for i, h in enumerate(links)).encode()
    page = parsed(FARM, b"<html><body>" + body + b"</body></html>", links=links)
    out = Out()
    store = PageStore(str(tmp_path / "pages"))
    revisits = RevisitSchedule({}, RevisitPolicy(), lambda url: 0, clock=lambda: 1000.0)
    link_extract.handle(context, {"pages": [page]}, store, out, revisits)  # type: ignore[arg-type]
    store.close()
    return out


def followed(out: Out) -> list[str]:
    return [item["url"] for name, item in out.added if name == "url-filter"]


def test_a_link_farm_is_cut_at_the_cap_in_page_order(tmp_path: Path) -> None:
    links = [f"/item-{i}" for i in range(100_000)] + ["/item-0"] * 10  # repeats count once
    out = crawl(tmp_path, links, cap=1000)
    assert followed(out) == [f"{FARM}item-{i}" for i in range(1000)]
    capped = [r for r in out.logs if r["outcome"] == "outlinks-capped"]
    assert len(capped) == 1 and capped[0]["url"] == FARM
    assert capped[0]["reason"] == "99000 of 100000 links not followed (--max-outlinks 1000)"
    anchors = [item for name, item in out.added if name == "anchors"]
    assert 0 < len(anchors) <= 1000


@pytest.mark.parametrize("cap", [0, 50])
def test_a_page_under_the_cap_or_no_cap_follows_every_link(tmp_path: Path, cap: int) -> None:
    links = [f"/p{i}" for i in range(50)]
    out = crawl(tmp_path, links, cap=cap)
    assert followed(out) == [f"{FARM}p{i}" for i in range(50)]
    assert not [r for r in out.logs if r["outcome"] == "outlinks-capped"]
