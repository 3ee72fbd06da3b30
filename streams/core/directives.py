"""What a page says about its own indexing, beyond robots.txt: the ``X-Robots-Tag``
response header and the ``Link`` header's canonical.

``X-Robots-Tag`` (as the major engines read it): each header value is a comma-separated
list of directives, optionally scoped by a leading ``agent:`` to one crawler; values
without a scope apply to every crawler, and several headers add up. ``none`` means
``noindex, nofollow``; ``all`` means nothing. A directive with a value of its own
(``unavailable_after: DATE``, ``max-snippet: N``) is not a scope. Unknown directives
are ignored, so a header nobody here foresaw indexes as if it were absent.

``Link: <URL>; rel="canonical"`` names the page's canonical URL (RFC 8288 syntax; rel
may list several relation types).

Pure: the standard library only. The HTML side (``<meta name="robots">``,
``rel=nofollow``, ``<link rel=canonical>``) is streams.core.parsing's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Directives", "canonical_from_link", "x_robots_tag"]

#: Directives that carry a value after a colon: such a colon is no crawler scope.
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
#: The largest header value read (a hostile server may send megabytes).
MAX_VALUE_CHARS = 4096
_LINK = re.compile(r"<([^>]*)>\s*((?:;\s*[^;,]*)*)")
_PARAM = re.compile(r';\s*([A-Za-z0-9!#$&+.^_`|~-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^";,\s]*)')


@dataclass(frozen=True)
class Directives:
    """The indexing directives that apply to one crawler."""

    noindex: bool = False
    nofollow: bool = False
    noarchive: bool = False

    def __or__(self, other: Directives) -> Directives:
        return Directives(
            self.noindex or other.noindex,
            self.nofollow or other.nofollow,
            self.noarchive or other.noarchive,
        )


def _apply(found: Directives, words: Iterable[str]) -> Directives:
    noindex, nofollow, noarchive = found.noindex, found.nofollow, found.noarchive
    for word in words:
        name = word.split(":", 1)[0].strip().lower()
        if name in ("noindex", "none"):
            noindex = True
        if name in ("nofollow", "none"):
            nofollow = True
        if name == "noarchive":
            noarchive = True
    return Directives(noindex, nofollow, noarchive)


def x_robots_tag(values: Iterable[str], agent: str) -> Directives:
    """The directives of ``X-Robots-Tag`` header `values` for the crawler whose
    robots.txt token is `agent` (e.g. "seinebot"): unscoped values and those scoped to
    `agent`, case-insensitively."""
    agent = agent.lower()
    found = Directives()
    for value in values:
        value = value[:MAX_VALUE_CHARS].strip()
        head, colon, rest = value.partition(":")
        scope = head.strip().lower()
        if colon and scope and "," not in head and scope not in _VALUED:
            if scope != agent:
                continue  # another crawler's
            value = rest
        found = _apply(found, value.split(","))
    return found


def canonical_from_link(values: Iterable[str]) -> str | None:
    """The first URL a ``Link`` header names with rel="canonical" (as written: the
    caller resolves it against the page's URL), or None."""
    for value in values:
        for match in _LINK.finditer(value[:MAX_VALUE_CHARS]):
            for name, raw in _PARAM.findall(match.group(2)):
                if name.lower() != "rel":
                    continue
                rels = raw.strip('"').lower().split()
                if "canonical" in rels and match.group(1).strip():
                    return match.group(1).strip()
    return None
