"""Near-duplicate detection, measured: what the simhash finds on the demo web and on
pages that differ only by a date or a counter, and what it costs.

Run:  .venv/bin/python bench/neardup.py [--hosts 50 --pages 40] [--variants 3]

Pages go through the crawl's own parser (``parse_html(..., with_simhash=True)``) and
the content-dedup stage's band logic (``NearDupIndex`` at distance 3, 4 bands of 16
bits), in crawl order (host by host). Three measurements:

* **The demo web** (``streams.demo.webgen``): every page a crawl fetches.  Its copies are
  byte-identical (exact dedup finds them); its distinct pages share a template and a
  vocabulary, so any near-duplicate found among them would be a false positive.
* **Date / counter variants**: each distinct page again ``--variants`` times, served
  under another host with only a "Published <date>" line and a "<n> views" counter
  changed, as a re-rendered page would be.  Each should be found; the same run with
  ``mask_numbers=False`` shows why digits are masked.
* **Cost**: CPU per page of the simhash alone and of the whole parse with it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selectolax.lexbor import LexborHTMLParser

from streams.core.parsing import normalize_text, parse_html
from streams.core.simhash import NearDupIndex, hamming, simhash_or_none
from streams.demo.webgen import DemoWeb, WebSpec


def variant(body: bytes, rng: random.Random) -> bytes:
    """The page with a date line and a view counter, as a re-render would change them."""
    date = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    stamp = f"<p>Published {date} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}</p>"
    counter = f"<p>{rng.randint(1, 9)},{rng.randint(100, 999)} views</p>"
    return body.replace(b"<body>\n", f"<body>\n{stamp}".encode(), 1).replace(
        b"</body>", f"{counter}</body>".encode(), 1
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--variants", type=int, default=3)
    args = parser.parse_args()
    web = DemoWeb(WebSpec(hosts=args.hosts, pages_per_host=args.pages)).with_port(80)
    served: list[tuple[str, bytes]] = []
    crawled = web.reachable_allowed()  # what a crawl fetches (not robots-forbidden pages)
    for host, target in web.served_targets():
        got = web.page(host, target)
        url = f"http://{host}{target}"
        if got is not None and got[0] == 200 and url in crawled:
            served.append((url, got[2]))
    print(
        f"near-dup bench: {len(served):,} demo pages ({args.hosts} hosts x {args.pages}); "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )

    # ---- the demo web: exact groups, and near-duplicates among distinct content
    t0 = time.process_time()
    docs = [(url, parse_html(body, with_simhash=True)) for url, body in served]
    parse_cpu = time.process_time() - t0
    exact: dict[str, str] = {}
    index = NearDupIndex(threshold=3)
    exact_dups = near_dups = 0
    for url, doc in docs:
        if doc.fingerprint in exact:
            exact_dups += 1
            continue
        exact[doc.fingerprint] = url
        if doc.simhash is not None and index.add(url, doc.simhash) is not None:
            near_dups += 1
    print(
        f"demo web: {exact_dups} exact duplicates, {near_dups} near-duplicates among "
        f"{len(exact)} distinct pages (any would be a false positive)"
    )
    fps = [d.simhash for _, d in docs if d.simhash is not None]
    rng = random.Random(1)
    pairs = [(rng.choice(fps), rng.choice(fps)) for _ in range(20_000)]
    dist = sorted(hamming(a, b) for a, b in pairs if a != b)
    print(
        f"          distance between random distinct pages: min {dist[0]}, "
        f"1st percentile {dist[len(dist) // 100]}, median {dist[len(dist) // 2]}"
    )

    # ---- pages with only a date or a counter changed, on other hosts
    seen_fp: set[str] = set()
    distinct: list[tuple[str, bytes]] = []
    for (url, body), (_, doc) in zip(served, docs, strict=True):
        if doc.fingerprint not in seen_fp and doc.simhash is not None:
            seen_fp.add(doc.fingerprint)
            distinct.append((url, body))
    for mask in (True, False):
        index = NearDupIndex(threshold=3)
        rng = random.Random(2)
        found = total = exact_same = 0
        dists: list[int] = []
        for url, body in distinct:
            first = simhash_or_none(normalize_text(_visible(variant(body, rng))), mask_numbers=mask)
            assert first is not None
            index.add(url, first)
            for v in range(args.variants):
                other = simhash_or_none(
                    normalize_text(_visible(variant(body, rng))), mask_numbers=mask
                )
                assert other is not None
                total += 1
                dists.append(hamming(first, other))
                exact_same += first == other
                found += index.add(f"http://mirror-{v}.example/{url[7:]}", other) == url
        dists.sort()
        print(
            f"date/counter variants (mask_numbers={mask}): {found:,} of {total:,} found as "
            f"near-duplicates of their page ({100 * found / total:.1f}%), "
            f"{exact_same:,} with an identical simhash; distance p50 "
            f"{dists[len(dists) // 2]}, p99 {dists[int(len(dists) * 0.99)]}, max {dists[-1]}"
        )

    # ---- cost
    texts = [normalize_text(_visible(body)) for _, body in served[:2000]]
    t0 = time.process_time()
    for text in texts:
        simhash_or_none(text)
    sim_cpu = (time.process_time() - t0) / len(texts)
    print(
        f"cost: simhash {sim_cpu * 1e6:.0f} us a page; parse with simhash "
        f"{parse_cpu / len(docs) * 1e6:.0f} us a page (CPU)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


def _visible(body: bytes) -> str:
    """Title and visible text, as ``parse_html`` fingerprints them."""
    tree = LexborHTMLParser(body.decode("utf-8", "replace"))
    title = tree.css_first("title")
    visible = tree.body.text(separator=" ") if tree.body is not None else ""
    return ((title.text() if title is not None else "") or "") + "\n" + visible


if __name__ == "__main__":
    main()
