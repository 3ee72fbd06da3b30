"""robots.txt conformance and speed: Seine's RobotsRules next to protego, in one run.

    .venv/bin/python bench/robots.py

Reads Google's two suites from ../shared/conformance (robots_test.cc checks and
robotstxt-spec-test expectations) and prints each parser's pass count, then the
time to parse a robots.txt and answer 1,000 `allowed` checks.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from protego import Protego

from streams.core.robots import RobotsRules

CONFORMANCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "conformance"


def load(name: str) -> list[dict[str, Any]]:
    data = json.loads((CONFORMANCE / name).read_text(encoding="utf-8"))
    return list(data["cases"])


def seine_allowed(text: bytes, url: str, agent: str) -> bool:
    return RobotsRules.parse(text).allowed(url, agent)


def protego_allowed(text: bytes, url: str, agent: str) -> bool:
    try:
        return bool(Protego.parse(text.decode("utf-8", "replace")).can_fetch(url, agent))
    except Exception:
        return True


def passes(fn: Any, cases: list[tuple[bytes, str, str, bool]]) -> int:
    return sum(1 for text, url, agent, want in cases if fn(text, url, agent) == want)


def main() -> None:
    google = [
        (c["robotstxt"].encode(), c["url"], c["user_agent"], c["expected"] == "ALLOWED")
        for c in load("google_robots_test_cc_cases.json")
        if c["function"] == "IsUserAgentAllowed"
    ]
    spec = [
        (
            base64.b64decode(c["robotstxt_b64"]),
            c["url"],
            c["user_agent"],
            c["expected"] == "ALLOWED",
        )
        for c in load("robotstxt_spec_test_cases.json")
    ]
    print(f"{'parser':10} {'robots_test.cc':>16} {'spec-test':>12}")
    for name, fn in (("seine", seine_allowed), ("protego", protego_allowed)):
        g, s = passes(fn, google), passes(fn, spec)
        print(
            f"{name:10} {g:>9}/{len(google)} {100 * g / len(google):4.1f}%"
            f" {s:>5}/{len(spec)} {100 * s / len(spec):4.1f}%"
        )
    text = "\n".join(
        ["User-agent: *", *[f"Disallow: /private-{i}/" for i in range(50)], "Allow: /private-3/ok"]
    ).encode()
    urls = [f"http://example.com/private-{i % 60}/page-{i}.html" for i in range(1000)]
    for name, parse, check in (
        ("seine", RobotsRules.parse, lambda r, u: r.allowed(u, "SeineBot")),
        ("protego", lambda t: Protego.parse(t.decode()), lambda r, u: r.can_fetch(u, "SeineBot")),
    ):
        started = time.perf_counter()
        rules = parse(text)
        parsed = time.perf_counter()
        for url in urls:
            check(rules, url)
        done = time.perf_counter()
        print(
            f"{name:10} parse {1e6 * (parsed - started):7.0f} µs, "
            f"{1e6 * (done - parsed) / len(urls):5.1f} µs per allowed() check"
        )


if __name__ == "__main__":
    main()
