"""One Tantivy index of documents, keyed by document id.

Fields: the id (untokenized: what a tombstone deletes by), the URL (tokenized, so
its words are searchable: ``library json html``), title, headings, anchors (the
text of links to the page), description and the main text. Tantivy's default
tokenizer splits on non-alphanumerics and lowercases, so an identifier such as
``os.path.join`` is indexed as its parts. A dotted name in a query asks for all its
parts, in any order, plus the exact phrase as a bonus (`dotted_names`): API docs
rarely print a qualified name whole where they define it (Sphinx shows
``extend(iterable)`` under ``class array.array``), so a phrase alone missed the
page that defines it. Title and anchors weigh most (`BOOSTS`): they say what a page
is about in fewer words than its text.

Writes are upserts: `apply(id, document)` deletes the id's older version and adds
the new one, `apply(id, None)` only deletes. Nothing is visible to a search until
`commit`, which the indexer calls in batches.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tantivy

__all__ = ["BOOSTS", "SEARCH_FIELDS", "FullTextIndex", "Hit", "build_schema", "dotted_names"]

#: Fields a query without a field name searches, and their weights.
BOOSTS: dict[str, float] = {
    "title": 3.0,
    "anchors": 2.0,
    "headings": 1.5,
    "url": 1.5,
    "description": 1.0,
    "text": 1.0,
}
SEARCH_FIELDS = tuple(BOOSTS)
#: Characters of a snippet.
SNIPPET_CHARS = 180
#: Heap of one index writer (Tantivy's floor is 15 MB per thread; one thread: the
#: crawl's event loop calls it, and the worker's other cores fetch and parse).
WRITER_HEAP_BYTES = 48 * 1024 * 1024
_SPACE = re.compile(r"\s")
#: Characters of a query read (a longer one is cut: bounded parse time).
MAX_QUERY_CHARS = 1000
#: A dotted name (``json.dumps``, ``3.11``) standing alone: not a field's value, not
#: already required or excluded (+/-), not part of a path or a longer token.
_DOTTED = re.compile(r'(?<![\w.:"+\-/])(\w+(?:\.\w+)+)(?![\w"/]|\.\w)')


def dotted_names(query: str) -> str:
    """`query` with each dotted name outside quotes as all its parts, required, plus
    its exact phrase: ``os.path.join`` becomes ``(+os +path +join) "os.path.join"``."""
    parts = query.split('"')
    for i in range(0, len(parts), 2):  # the even pieces are outside quotes
        parts[i] = _DOTTED.sub(_dotted_clause, parts[i])
    return '"'.join(parts)


def _dotted_clause(match: re.Match[str]) -> str:
    name = match.group(1)
    return "(" + " ".join("+" + part for part in name.split(".")) + f') "{name}"'


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("url", stored=True)
    builder.add_text_field("title", stored=True)
    builder.add_text_field("headings")
    builder.add_text_field("anchors")
    builder.add_text_field("description", stored=True)
    builder.add_text_field("text", stored=True)
    builder.add_text_field("language", stored=True, tokenizer_name="raw")
    builder.add_text_field("site", stored=True, tokenizer_name="raw")
    builder.add_float_field("fetched_at", stored=True)
    return builder.build()


@dataclass
class Hit:
    """One search result. `highlights`: (start, end) character ranges of `snippet`
    that matched the query."""

    url: str
    title: str
    score: float
    snippet: str
    highlights: list[tuple[int, int]] = field(default_factory=list)
    fetched_at: float = 0.0
    #: The document id (the canonical URL).
    id: str = ""

    def as_json(self, query: str, rank: int) -> dict[str, Any]:
        return {
            "query": query,
            "rank": rank,
            "url": self.url,
            "title": self.title,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "highlights": [list(span) for span in self.highlights],
        }

    def snippet_html(self) -> str:
        """The snippet with its matches in <b>, everything else HTML-escaped."""
        out, at = [], 0
        for start, end in self.highlights:
            out.append(html.escape(self.snippet[at:start]))
            out.append("<b>" + html.escape(self.snippet[start:end]) + "</b>")
            at = end
        out.append(html.escape(self.snippet[at:]))
        return "".join(out)


def _document(schema_doc: Mapping[str, Any], doc_id: str) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("id", doc_id)
    doc.add_text("url", str(schema_doc.get("url") or doc_id))
    doc.add_text("title", str(schema_doc.get("title") or ""))
    for heading in schema_doc.get("headings") or ():
        doc.add_text("headings", str(heading))
    for anchor in schema_doc.get("anchors") or ():
        doc.add_text("anchors", str(anchor))
    doc.add_text("description", str(schema_doc.get("description") or ""))
    doc.add_text("text", str(schema_doc.get("text") or ""))
    doc.add_text("language", str(schema_doc.get("language") or ""))
    doc.add_text("site", str(schema_doc.get("site") or ""))
    fetched_at = schema_doc.get("fetched_at")
    doc.add_float("fetched_at", float(fetched_at) if isinstance(fetched_at, int | float) else 0.0)
    return doc


class FullTextIndex:
    """The index in `path` (created when missing). `writable`: this process writes
    it (Tantivy lets one writer hold an index; readers are any number)."""

    def __init__(self, path: str | Path, *, writable: bool = False) -> None:
        self.path = Path(path)
        schema = build_schema()
        if writable:
            self.path.mkdir(parents=True, exist_ok=True)
            self.index = tantivy.Index(schema, path=str(self.path), reuse=True)
        elif self.path.is_dir() and tantivy.Index.exists(str(self.path)):
            self.index = tantivy.Index.open(str(self.path))
        else:
            raise FileNotFoundError(f"no search index in {self.path}")
        self.schema = self.index.schema
        self._writer: Any = (
            self.index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=1) if writable else None
        )
        #: Changes applied since the last commit.
        self.pending = 0

    def apply(self, doc_id: str, document: Mapping[str, Any] | None) -> None:
        """Put `document` under `doc_id`, replacing what was there; None deletes."""
        writer = self._writer
        if writer is None:
            raise RuntimeError(f"the index in {self.path} was opened read-only")
        writer.delete_documents_by_term("id", doc_id)
        if document is not None:
            writer.add_document(_document(document, doc_id))
        self.pending += 1

    def commit(self) -> int:
        """Make every applied change durable and searchable; returns how many."""
        done, self.pending = self.pending, 0
        if done and self._writer is not None:
            self._writer.commit()
            self.index.reload()
        return done

    def close(self) -> None:
        """Commit what is applied and let the writer go. A merge the last commits
        started is not waited for (`wait_merging_threads` took up to 0.8 s of a
        worker's stop on the dense web): what is committed is durable without it,
        the segments it would have merged stay valid, and the next writer merges
        them and removes what an unfinished merge left."""
        if self._writer is not None:
            self.commit()
            self._writer = None

    def num_docs(self) -> int:
        self.index.reload()
        return int(self.index.searcher().num_docs)

    def search(self, query: str, limit: int = 10) -> list[Hit]:
        """The best `limit` documents for `query` (Tantivy's query language, parsed
        leniently: a stray quote or colon never fails a search), BM25 with `BOOSTS`;
        dotted names as `dotted_names` reads them."""
        query = query[:MAX_QUERY_CHARS].strip()
        if not query or limit <= 0:
            return []
        parsed, _errors = self.index.parse_query_lenient(
            dotted_names(query), default_field_names=list(SEARCH_FIELDS), field_boosts=BOOSTS
        )
        searcher = self.index.searcher()
        found = searcher.search(parsed, limit, count=False).hits
        if not found:
            return []
        snippets = tantivy.SnippetGenerator.create(searcher, parsed, self.schema, "text")
        snippets.set_max_num_chars(SNIPPET_CHARS)
        hits = []
        for score, address in found:
            doc = searcher.doc(address)
            hits.append(_hit(doc, float(score), snippets.snippet_from_doc(doc)))
        return hits


def _hit(doc: Any, score: float, snippet: Any) -> Hit:
    # every whitespace character a space: one line per hit, highlights still aligned
    text = _SPACE.sub(" ", snippet.fragment())
    highlights = [(span.start, span.end) for span in snippet.highlighted()]
    if not text:  # the text did not match (title, anchors or URL did): its start
        start = str(doc.get_first("description") or doc.get_first("text") or "")
        text, highlights = _cut(start, SNIPPET_CHARS), []
    fetched_at = doc.get_first("fetched_at")
    return Hit(
        url=str(doc.get_first("url") or ""),
        title=str(doc.get_first("title") or ""),
        score=score if math.isfinite(score) else 0.0,
        snippet=text,
        highlights=highlights,
        fetched_at=float(fetched_at or 0.0),
        id=str(doc.get_first("id") or ""),
    )


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"
