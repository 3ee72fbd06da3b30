"""The documents topic and the index of a real crawl: a page is a document under its
id, a noindex page (meta or X-Robots-Tag), an exact copy, a 404 and a redirect are
deletions (null values), a same-site canonical is the id and is fetched, a
cross-site one is not obeyed; any Avro reader decodes the values with
schemas/document.avsc alone; `seine search` finds the pages and not the deleted.
Real broker, real worker, real HTTP server on loopback, real Tantivy index."""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro

import topology
from streams.kafka.broker import EmbeddedBroker
from tests.integration.conftest import crawl_env, read_to_end, run_crawl, run_seine
from tests.integration.loopback import Route, page, serve

SITE = "docs.test"


def html(title: str, text: str, links: list[str] = (), head: str = "") -> str:  # type: ignore[assignment]
    anchors = " ".join(f'<a href="{href}">{href.strip("/") or "home"} link</a>' for href in links)
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title>{head}</head>"
        f"<body><h1>{title}</h1><p>{text}</p><p>{anchors}</p></body></html>"
    )


ARTICLE = html("Zebras", "The zebrafinch paragraph tells of striped equines on the savanna.")


def routes() -> dict[tuple[str, str], Route]:
    links = ["/article", "/hidden", "/xhidden", "/copy", "/gone", "/moved", "/variant", "/cross"]
    return {
        (SITE, "/"): page(html("Home", "The start page of the documents test.", links)),
        (SITE, "/article"): page(ARTICLE),
        (SITE, "/copy"): page(ARTICLE),
        (SITE, "/hidden"): page(
            html(
                "Hidden", "The okapiword is noindex.", head='<meta name="robots" content="noindex">'
            )
        ),
        (SITE, "/xhidden"): page(
            html("X hidden", "The quaggaword is noindex by header."), **{"X-Robots-Tag": "noindex"}
        ),
        (SITE, "/moved"): lambda _h: (301, {"Location": "/article2"}, b""),
        (SITE, "/article2"): page(html("Second", "The second article about gazelles.")),
        (SITE, "/variant"): page(
            html(
                "Variant",
                "A session variant of the main page about wildebeest.",
                head='<link rel="canonical" href="/main">',
            )
        ),
        (SITE, "/main"): page(html("Main", "The main page about wildebeest migrations.")),
        (SITE, "/cross"): page(
            html(
                "Cross",
                "A page that claims another site's URL as canonical.",
                head='<link rel="canonical" href="http://elsewhere.test/x">',
            )
        ),
    }


def documents(broker: EmbeddedBroker, app_id: str) -> dict[str, list[dict[str, Any] | None]]:
    """Every documents record by key, decoded by fastavro from the schema file alone."""
    schema = fastavro.parse_schema(
        json.loads(resources.files("schemas").joinpath("document.avsc").read_text())
    )
    topic = topology.topic_name(app_id, topology.DOCUMENTS)
    by_key: dict[str, list[dict[str, Any] | None]] = {}
    for message in read_to_end(broker.bootstrap, topic):
        value = message.value()
        decoded = (
            None if value is None else fastavro.schemaless_reader(io.BytesIO(value), schema, None)
        )
        by_key.setdefault(message.key().decode(), []).append(decoded)  # type: ignore[arg-type]
    return by_key


def test_documents_deletions_and_search(broker: EmbeddedBroker, tmp_path: Path) -> None:
    with serve(routes()) as web:
        run = run_crawl(
            broker, tmp_path / "data", [f"http://{SITE}/"], partitions=2, resolve=web.resolve(SITE)
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert web.requests(SITE, "/main"), "the canonical named by /variant was not fetched"
        assert not web.requests("elsewhere.test")
    base = f"http://{SITE}"
    by_key = documents(broker, run.app_id)
    latest = {key: values[-1] for key, values in by_key.items()}
    kept = {key for key, value in latest.items() if value is not None}
    deleted = {key for key, value in latest.items() if value is None}
    assert kept == {
        f"{base}/",
        f"{base}/article",
        f"{base}/article2",
        f"{base}/main",
        f"{base}/cross",
    }
    assert {f"{base}/hidden", f"{base}/xhidden", f"{base}/gone", f"{base}/moved"} <= deleted
    # the exact copy: one of the two URLs is the document, the other a deletion
    assert len({f"{base}/copy", f"{base}/article"} & deleted) == 1
    article = latest[f"{base}/article"] or latest.get(f"{base}/copy")
    assert article is not None and "zebrafinch" in article["text"]
    assert article["language"] == "en" and article["title"] == "Zebras"
    variants = [doc for doc in by_key[f"{base}/main"] if doc is not None]
    assert {doc["url"] for doc in variants} == {f"{base}/variant", f"{base}/main"}
    cross = latest[f"{base}/cross"]
    assert cross is not None and cross["canonical"] == f"{base}/cross"
    # anchors of inlinks: the home page links each page with "<path> link"
    survivor = f"{base}/article" if latest[f"{base}/article"] is not None else f"{base}/copy"
    survivor_doc = latest[survivor]
    assert survivor_doc is not None
    assert f"{survivor.rsplit('/', 1)[1]} link" in survivor_doc["anchors"], survivor_doc["anchors"]
    home = latest[f"{base}/"]
    assert home is not None
    assert {link["url"] for link in home["outlinks"]} >= {f"{base}/article", f"{base}/gone"}

    env = crawl_env(run.app_id)
    found = run_seine(["search", "zebrafinch", "--json", "--data-dir", str(run.data_dir)], env=env)
    assert found.returncode == 0, found.stderr
    hits = [json.loads(line) for line in found.stdout.splitlines()]
    assert hits and hits[0]["url"] in (f"{base}/article", f"{base}/copy")
    assert set(hits[0]) >= {"query", "rank", "url", "title", "score", "snippet"}
    for word in ("okapiword", "quaggaword"):
        missing = run_seine(["search", word, "--data-dir", str(run.data_dir)], env=env)
        assert missing.returncode == 1 and "no hits" in missing.stdout, missing.stdout
