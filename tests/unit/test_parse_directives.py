"""parse obeys the X-Robots-Tag header beside <meta name="robots">: a noindex or
nofollow header marks the parsed page (link-extract then follows none of its links),
scoped values count for Seine's own token only."""

from __future__ import annotations

import pytest

from streams.core.handoff import HandoffCache
from streams.settings import Settings
from streams.stages import parse
from tests.unit.test_handoff import FakeCtx, FakeOutbox, fetched


def parsed(header: str | None, meta: str = "") -> dict[str, bool]:
    page = fetched("http://a.example/p", 1)
    if header is not None:
        page["headers"].append({"name": "X-Robots-Tag", "value": header})
    if meta:
        page["body"] = page["body"].replace(
            b"<head>", f'<head><meta name="robots" content="{meta}">'.encode()
        )
    ctx = FakeCtx(Settings.of(partitions=1), HandoffCache(0))
    out = FakeOutbox()
    parse.handle(ctx, {"pages": [page]}, out)  # type: ignore[arg-type]
    [(_, _, item)] = out.items
    return {"noindex": item["noindex"], "nofollow": item["nofollow"]}


@pytest.mark.parametrize(
    ("header", "meta", "noindex", "nofollow"),
    [
        (None, "", False, False),
        ("noindex", "", True, False),
        ("nofollow", "", False, True),
        ("none", "", True, True),
        ("SeineBot: noindex", "", True, False),
        ("googlebot: noindex, nofollow", "", False, False),
        ("all", "nofollow", False, True),  # the meta still counts
        ("noarchive", "noindex", True, False),
    ],
)
def test_x_robots_tag_marks_the_parsed_page(
    header: str | None, meta: str, noindex: bool, nofollow: bool
) -> None:
    assert parsed(header, meta) == {"noindex": noindex, "nofollow": nofollow}
