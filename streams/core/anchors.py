"""Anchor text from inlinks: what other pages call a page, kept per target URL.

An entry (a JSON-shaped list, as a table value) holds distinct (text, source site)
pairs, at most MAX_ANCHORS in all and MAX_PER_SITE from one site, so one site (or a
link farm of one site) cannot fill a page's anchors, and an anchor flood of 100,000
pages linking one URL costs one read each and no write once the entry is full.

Pure: the standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_ANCHORS", "MAX_PER_SITE", "add_anchor", "anchor_texts", "other_sites"]

#: Anchors kept per target, and from one source site.
MAX_ANCHORS, MAX_PER_SITE = 64, 8
#: Characters of one anchor text kept.
MAX_TEXT_CHARS = 200


def add_anchor(entry: Sequence[Any] | None, text: str, site: str) -> list[Any] | None:
    """The entry with (text, site) added, or None when nothing changes (empty text,
    already there, the entry or the site's share full)."""
    text = " ".join(text.split())[:MAX_TEXT_CHARS]
    if not text:
        return None
    pairs = list(entry or ())
    if len(pairs) >= MAX_ANCHORS:
        return None
    from_site = 0
    for pair in pairs:
        if pair[1] == site:
            if pair[0] == text:
                return None
            from_site += 1
    if from_site >= MAX_PER_SITE:
        return None
    pairs.append([text, site])
    return pairs


def anchor_texts(entry: Sequence[Any] | None) -> list[str]:
    """The distinct texts of an entry, in the order they came."""
    seen: dict[str, None] = {}
    for pair in entry or ():
        seen.setdefault(str(pair[0]))
    return list(seen)


def other_sites(entry: Sequence[Any] | None, home: str) -> int:
    """How many distinct sites other than `home` an entry's anchors come from."""
    return len({pair[1] for pair in entry or () if pair[1] != home})
