"""A web of traps beside good pages, crawled with the default trap guards: the crawl
ends by itself with every good page fetched once, and each trap is cut off.

- a link farm: one page with 100,000 links to distinct pages of its host (default
  --max-outlinks 1000: its first 1,000 are followed, the rest counted in the log;
  its robots.txt refuses them, so they are followed without 1,000 fetches);
- a calendar whose months link a month and a year either way, forever (default
  window: 50 years back, 2 ahead);
- a server that puts a fresh session id in every link (dropped by default);
- relative-link loops (``a/`` on /a/, ``p/q/`` on /p/q/: the repeated-segment rule);
- a host that only serves new URLs, held by the per-host page budget. The default
  budget (10,000) is the same rule with a number too big for a test; this test
  passes 700, above what the other trap hosts need.

Judged by the server's own log and by the crawl log. Real broker, real worker,
real HTTP server on loopback.
"""

from __future__ import annotations

import datetime
import random
import re
import secrets
from collections import Counter
from pathlib import Path

from streams.kafka.broker import EmbeddedBroker
from tests.integration.conftest import read_crawl_log, run_crawl
from tests.integration.loopback import Response, serve

GOOD, FARM, CAL, SESSION, LOOP, GEN = (
    "good.test",
    "farm.test",
    "cal.test",
    "sess.test",
    "loop.test",
    "gen.test",
)
GOOD_PAGES = 30
FARM_LINKS = 100_000
HOST_BUDGET = 700
YEAR = datetime.datetime.now(datetime.UTC).year


# words of letters only: near-duplicate detection reads words, not numbers
WORDS = ["".join(random.Random(n).choices("abcdefghijklmnopqrstuvwxyz", k=6)) for n in range(1000)]


def html(*links: str, text: str = "") -> Response:
    """A page with its own text (so near-duplicate detection, which stops link
    extraction, does not cut a trap short) and the given links."""
    words = " ".join(random.Random(text).choices(WORDS, k=60))
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    body = f"<!DOCTYPE html><html><body><p>{words}</p>{anchors}</body></html>"
    return 200, {"Content-Type": "text/html; charset=utf-8"}, body.encode()


def trap_entrances() -> list[str]:
    return [
        f"http://{FARM}/",
        f"http://{CAL}/cal/{YEAR}/06/",
        f"http://{SESSION}/",
        f"http://{LOOP}/a/",
        f"http://{LOOP}/p/q/",
        f"http://{GEN}/gen/0",
    ]


def _month(year: int, month: int) -> str:
    return f"/cal/{year}/{month:02d}/"


def _calendar(path: str) -> Response | None:
    m = re.fullmatch(r"/cal/(\d{4})/(\d{2})/", path)
    if not m:
        return None
    year, month = int(m.group(1)), int(m.group(2))
    before = (year, month - 1) if month > 1 else (year - 1, 12)
    after = (year, month + 1) if month < 12 else (year + 1, 1)
    # a calendar widget's four arrows: a month and a year either way
    links = (_month(*before), _month(*after), _month(year - 1, month), _month(year + 1, month))
    return html(*links, text=path)


def _session_page(path: str) -> Response | None:
    # every link carries a fresh id, in the path and in the query
    if not re.fullmatch(r"/(page-\d)?(;jsessionid=\w+)?(\?.*)?", path):
        return None
    return html(
        *(
            f"/page-{i};jsessionid={secrets.token_hex(8)}?PHPSESSID={secrets.token_hex(8)}"
            for i in range(10)
        ),
        text=path.split(";")[0].split("?")[0],
    )


def dynamic(host: str, path: str) -> Response | None:
    if path == "/robots.txt":
        # the farm's items are followed but not fetched: the crawl log shows which
        rules = "Disallow: /item-" if host == FARM else "Allow: /"
        return 200, {"Content-Type": "text/plain"}, f"User-agent: *\n{rules}\n".encode()
    if host == GOOD:
        if path == "/":
            return html(*[f"/good-{i}" for i in range(GOOD_PAGES)], *trap_entrances(), text="/")
        if re.fullmatch(r"/good-\d+", path):
            return html("/", *trap_entrances(), text=path)
    if host == FARM:
        if path == "/":
            return html(*[f"/item-{i}" for i in range(FARM_LINKS)])
        if path.startswith("/item-"):
            return html("/", text=path)
    if host == CAL:
        return _calendar(path)
    if host == SESSION:
        return _session_page(path)
    if host == LOOP and re.fullmatch(r"/(a/)+|/(p/q/)+", path):
        return html("a/" if path.startswith("/a/") else "p/q/", text=path)
    if host == GEN and (m := re.fullmatch(r"/gen/(\d+)", path)):
        n = int(m.group(1))
        return html(*[f"/gen/{3 * n + k}" for k in (1, 2, 3)], text=path)
    return None


def test_default_trap_guards_end_a_trap_web_with_every_good_page(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    hosts = (GOOD, FARM, CAL, SESSION, LOOP, GEN)
    with serve({}, dynamic) as web:
        run = run_crawl(
            broker,
            tmp_path / "data",
            [f"http://{GOOD}/"],
            partitions=2,
            resolve=web.resolve(*hosts),
            extra_args=["--max-host-pages", str(HOST_BUDGET)],
            timeout=240.0,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        why = [ln for ln in run.stdout.splitlines() if ln.startswith("seine: why pages")]
        assert len(why) == 1 and "1000× robots-disallowed" in why[0], run.stdout[-2000:]
        fetched = Counter((r.host, r.path) for r in web.requests() if r.path != "/robots.txt")

    # every good page, once
    good = {p for h, p in fetched if h == GOOD}
    assert good == {"/", *(f"/good-{i}" for i in range(GOOD_PAGES))}
    assert all(n == 1 for n in fetched.values()), fetched.most_common(3)
    per_host = Counter(h for h, _ in fetched)
    assert {p for h, p in fetched if h == FARM} == {"/"}
    # the calendar: exactly the months of the window, 50 years back to 2 ahead
    months = {p for h, p in fetched if h == CAL}
    assert months == {_month(y, m) for y in range(YEAR - 50, YEAR + 3) for m in range(1, 13)}
    # session ids: each page once, no id ever sent
    session_paths = {p for h, p in fetched if h == SESSION}
    assert session_paths == {"/", *(f"/page-{i}" for i in range(10))}
    # loops: cut at the third repeat
    assert {p for h, p in fetched if h == LOOP} == {"/a/", "/a/a/", "/p/q/", "/p/q/p/q/"}
    # the generator: its budget, not one page more
    assert per_host[GEN] == HOST_BUDGET

    records = read_crawl_log(broker.bootstrap, run.app_id)
    # the farm: the first 1,000 of its links followed (to robots.txt's refusal)
    followed = {r["url"] for r in records if r["outcome"] == "robots-disallowed"}
    assert followed == {f"http://{FARM}/item-{i}" for i in range(1000)}
    capped = [r for r in records if r["outcome"] == "outlinks-capped"]
    assert [r["url"] for r in capped] == [f"http://{FARM}/"]
    assert capped[0]["reason"] == "99000 of 100000 links not followed (--max-outlinks 1000)"
    reasons = Counter(r["reason"] for r in records if r["outcome"] == "filtered")
    assert reasons["trap guard: calendar"] >= 2, reasons
    assert reasons["trap guard: repeated-segment"] >= 2, reasons
    budget = [r for r in records if r["outcome"] == "host-budget"]
    assert budget and all(r["host"] == GEN for r in budget)
