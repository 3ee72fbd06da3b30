"""Crawler-trap guards on a URL's shape: what a URL alone says about being a trap.

Calendars, session ids in links, relative-link loops and generated paths give a
crawler endless URLs for a finite site. The rules here look at one canonical URL
and need no state, so url-filter applies them to every candidate before url-seen
and the frontier spend anything on it. What a URL's shape cannot tell (a host that
only ever serves new URLs, a page with 100,000 links) is bounded elsewhere: the
per-host page budget and queue cap (frontier) and the outlinks followed per page
(link-extract).

Each limit is a field of :class:`TrapRules`, set from the crawl's settings; the
defaults and their reasons are in the field comments.

Pure logic: no Kafka, Faust or network imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TrapRules", "path_segments", "strip_session_ids", "trap_reason"]


@dataclass(frozen=True)
class TrapRules:
    """The URL-shape limits; 0 (or a negative number) turns a limit off."""

    #: Characters in the whole URL: 2,048 is the practical limit of many servers and
    #: browsers; longer links are nearly always generated (state in the URL).
    max_url_length: int = 2048
    #: Path segments: real sites nest far less than 20 (Heritrix's default too);
    #: deeper is a relative-link loop or a generator.
    max_path_depth: int = 20
    #: Times one segment, or one group of 2 or 3 segments, may come in a row
    #: (``/a/a``, ``/a/b/a/b``); a third is the signature of a relative-link loop.
    max_segment_repeats: int = 2
    #: A date in the path (``/2031/05/``, ``2031-05-17``) or a ``year=`` query more
    #: than this many years after ``this_year`` is a calendar's "next" link run away.
    calendar_years_ahead: int = 2
    #: ... or more than this many years before it (a calendar's "previous" link);
    #: archives older than 50 years need a larger value.
    calendar_years_back: int = 50
    #: The year the calendar window is centred on (0: no calendar rule). Set from the
    #: clock when the crawl's settings are read, so the rule stays a pure function.
    this_year: int = 0
    #: Drop session ids from URLs (``;jsessionid=…``, ``?PHPSESSID=…``, ``sid=``,
    #: ``sessionid=``...), as Nutch's default normalizer does: a server that puts a
    #: fresh id in every link otherwise makes each page a new URL on every visit.
    strip_session_ids: bool = True


DEFAULT_RULES = TrapRules()

# Query keys and path parameters that carry a session id (compared lower-cased).
_SESSION_KEYS = frozenset(
    {
        "jsessionid",
        "phpsessid",
        "aspsessionid",
        "sessionid",
        "session_id",
        "sessid",
        "sid",
        "cfid",
        "cftoken",
        "zenid",
        "oscsid",
    }
)
_PATH_PARAM = re.compile(r";(?:jsessionid|phpsessid|sessionid|sid)=[^/?#;]*", re.IGNORECASE)
# A date in a path: YYYY/MM, YYYY-MM, YYYY_MM (a day may follow); not inside a number.
_PATH_DATE = re.compile(r"(?<![0-9])([12][0-9]{3})[-/_.](0[1-9]|1[0-2])(?![0-9])")
# A year, date or month in a query value: year=2031, date=2031-05-17, month=2031-05.
_QUERY_DATE = re.compile(
    r"(?:^|[&;])(?:[a-z_]*year|yr|y|[a-z_]*date|[a-z_]*month|[a-z_]*day)=([12][0-9]{3})(?![0-9])",
    re.IGNORECASE,
)


def path_segments(url: str) -> list[str]:
    """Path segments of an absolute (or path-only) URL, ignoring a trailing "/"."""
    start = url.find("://")
    if start >= 0:
        p = url.find("/", start + 3)
        if p < 0:
            return []
        rest = url[p:]
    else:
        rest = url
    for sep in "?#":
        cut = rest.find(sep)
        if cut >= 0:
            rest = rest[:cut]
    segs = rest.split("/")[1:] if rest.startswith("/") else rest.split("/")
    if segs and segs[-1] == "":
        segs.pop()
    return segs


def _repeats(segs: list[str], limit: int) -> bool:
    """Whether a group of 1 to 3 segments comes more than `limit` times in a row."""
    for width in (1, 2, 3):
        need = width * (limit + 1)
        for start in range(len(segs) - need + 1):
            group = segs[start : start + width]
            if all(
                segs[start + k * width : start + (k + 1) * width] == group
                for k in range(1, limit + 1)
            ):
                return True
    return False


def _years(url: str) -> list[int]:
    """The years of the dates a URL's path and query hold."""
    split = url.find("://")
    slash = url.find("/", split + 3 if split >= 0 else 0)
    if slash < 0:
        return []
    rest = url[slash:]
    cut = rest.find("#")
    if cut >= 0:
        rest = rest[:cut]
    path, _, query = rest.partition("?")
    years = [int(m.group(1)) for m in _PATH_DATE.finditer(path)]
    if query:
        years += [int(m.group(1)) for m in _QUERY_DATE.finditer(query)]
    return years


def trap_reason(url: str, rules: TrapRules = DEFAULT_RULES) -> str | None:
    """Why ``url`` looks like a crawler trap, or None when it looks fine.

    * ``"too-long"``: more than ``max_url_length`` characters;
    * ``"repeated-segment"``: a segment, or a group of 2 or 3, more than
      ``max_segment_repeats`` times in a row (``/a/a/a``, ``/a/b/a/b/a/b``);
    * ``"too-deep"``: more than ``max_path_depth`` path segments;
    * ``"calendar"``: a date outside the calendar window around ``this_year``.
    """
    if rules.max_url_length > 0 and len(url) > rules.max_url_length:
        return "too-long"
    segs = path_segments(url)
    repeats = rules.max_segment_repeats
    if 0 < repeats < len(segs) and _repeats(segs, repeats):
        return "repeated-segment"
    if rules.max_path_depth > 0 and len(segs) > rules.max_path_depth:
        return "too-deep"
    if rules.this_year > 0:
        last = rules.this_year + rules.calendar_years_ahead
        first = rules.this_year - rules.calendar_years_back
        for year in _years(url):
            if (rules.calendar_years_ahead >= 0 and year > last) or (
                rules.calendar_years_back >= 0 and year < first
            ):
                return "calendar"
    return None


def _keeps(pair: str) -> bool:
    key = pair.split("=", 1)[0].lower()
    return key not in _SESSION_KEYS and not key.startswith("aspsessionid")


def strip_session_ids(url: str) -> str:
    """`url` without its session ids: ``;jsessionid=…`` path parameters and query
    pairs whose key names a session (the rest of the query kept in order)."""
    if ";" in url:
        url = _PATH_PARAM.sub("", url)
    q = url.find("?")
    if q < 0:
        return url
    end = url.find("#", q)
    query = url[q + 1 :] if end < 0 else url[q + 1 : end]
    pairs = query.split("&")
    kept = [p for p in pairs if _keeps(p)]
    if len(kept) == len(pairs):
        return url
    tail = "" if end < 0 else url[end:]
    return url[:q] + ("?" + "&".join(kept) if kept else "") + tail
