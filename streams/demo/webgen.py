"""A deterministic synthetic web: the ground truth the crawler is judged against.

Why synthetic: a crawler's correctness (every reachable allowed page stored exactly
once, nothing robots.txt forbids fetched, duplicates recognised) can only be checked
against a web whose full link graph is known. This module *generates* such a web from a
seed and, from the same data that renders the HTML, computes the answers a correct
crawl must produce (`DemoWeb.reachable_allowed`, `DemoWeb.disallowed_linked`,
`DemoWeb.duplicate_groups`).

Design choices that keep the ground truth exact:

* Every host has the *same path layout* (``/``, ``/page-K.html``, ``/docs/page-K.html``,
  ``/blog/2024/page-K.html``, a few ``?ref=x`` variants, ``/private/doc-J.html``). A
  byte-identical copy of a page served on another host (or under another name in the
  same directory) therefore still has only relative links that resolve to real pages.
* Links are generated as structured :class:`Link` records (href as written, plus the
  host/path it resolves to); the HTML is rendered from them, and the ground truth BFS
  walks them. The unit tests cross-check the records against the rendered HTML with
  ``urllib.parse.urljoin`` so the two views cannot drift apart.
* A ``?ref=x`` variant serves the very bytes of its base page (as a tracking parameter
  would on a real site), so it is both a reachable URL and a member of a duplicate group.
* Duplicates ("copies") are always *leaves* of the spanning tree (page K links to
  4K+1..4K+4), so replacing a page's body by another page's never disconnects anything.

Generation is lazy and cached per page: structure (copy map, blob of pseudo-text) is
built up-front in tens of milliseconds; a page's links are derived from a per-page RNG
only when first needed, so even 200 hosts x 100 pages stays well under a second or two.
"""

from __future__ import annotations

import ipaddress
import posixpath
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple
from urllib.parse import urlsplit

__all__ = [
    "DOMAIN",
    "PRIVATE_PREFIX",
    "ROBOTS_TXT",
    "DemoWeb",
    "Link",
    "WebSpec",
    "canonical_url",
]

DOMAIN = "demo.test"
PRIVATE_PREFIX = "/private/"
ROBOTS_TXT = b"# Seine demo web\nUser-agent: *\nDisallow: /private/\n"
_QUERY = "?ref=x"
_FANOUT = 4  # spanning tree: page K links to pages FANOUT*K+1 .. FANOUT*K+FANOUT
_DIRS = ("/", "/docs/", "/blog/2024/")
_BASE_TAG_FRACTION = 0.05
_FRAGMENT_FRACTION = 0.08
_PARAGRAPH_CHARS = 1400
_HTML_HEADERS = {"Content-Type": "text/html; charset=utf-8"}
_TEXT_HEADERS = {"Content-Type": "text/plain; charset=utf-8"}


@dataclass(frozen=True)
class WebSpec:
    """Parameters of a demo web; equal specs always generate byte-identical webs.

    ``port`` is baked into absolute links and canonical URLs, so a web must be bound to
    the port it is served on (:meth:`DemoWeb.with_port`); 0 means "not bound yet".
    ``www_alias_fraction`` of hosts also link to themselves as ``www.<host>``, which
    serves the same bytes, so www-equivalence logic can be tested. ``use_ip_hosts``
    names hosts by their loopback IP instead of ``site-NNNN.demo.test`` (no --resolve
    needed, but no name-based virtual hosting exercised either).
    """

    hosts: int = 50
    pages_per_host: int = 40
    page_bytes: int = 8192
    links_per_page: int = 23
    cross_host_fraction: float = 0.2
    duplicate_fraction: float = 0.1
    disallowed_fraction: float = 0.05
    seed: int = 1
    www_alias_fraction: float = 0.0
    base_ip: str = "127.0.1.1"
    port: int = 0
    use_ip_hosts: bool = False

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.pages_per_host < 1:
            raise ValueError("a demo web needs at least one host with one page")
        if self.links_per_page < 0 or self.page_bytes < 0:
            raise ValueError("links_per_page and page_bytes must be >= 0")
        for name in (
            "cross_host_fraction",
            "duplicate_fraction",
            "disallowed_fraction",
            "www_alias_fraction",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port out of range: {self.port}")
        base = ipaddress.IPv4Address(self.base_ip)
        if base not in ipaddress.IPv4Network("127.0.0.0/8") or base.packed[3] in (0, 255):
            raise ValueError("base_ip must be a loopback address with last octet 1..254")
        # Raises if the last host would fall outside 127.0.0.0/8.
        _host_ip(self.base_ip, self.hosts - 1)


class Link(NamedTuple):
    """One ``<a href>`` of a page, with what it resolves to.

    ``host`` is the lower-case host the link points at when the href (or the page's
    ``<base>``) pins one, or None when it resolves against whichever host serves the
    page — that is what makes byte-identical copies on other hosts link correctly.
    ``target`` is path + query (no fragment), or None for links a crawler must not follow
    (``mailto:``, ``javascript:``).
    """

    href: str
    host: str | None
    target: str | None


class _Content(NamedTuple):
    title: str
    base: str | None
    links: list[tuple[str, str | None, str | None]]  # Link fields; plain tuples are cheaper


def _host_ip(base_ip: str, index: int) -> str:
    """The index-th usable loopback address from base_ip, skipping .0 and .255."""
    base = int(ipaddress.IPv4Address(base_ip))
    prefix, last = base & ~0xFF, base & 0xFF
    position = (last - 1) + index
    value = prefix + ((position // 254) << 8) + (position % 254) + 1
    address = ipaddress.IPv4Address(value)
    if address not in ipaddress.IPv4Network("127.0.0.0/8"):
        raise ValueError(f"host #{index} from {base_ip} falls outside 127.0.0.0/8")
    return str(address)


def canonical_url(url: str) -> str | None:
    """The canonical form the ground truth uses, or None for non-http URLs.

    Lower-case host, explicit ``:port`` unless 80, path (``/`` if empty) and query;
    fragment dropped. Dot-segments are expected to be resolved already (urljoin does).
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or not parts.hostname:
        return None
    port = parts.port or 80
    origin = parts.hostname.lower() if port == 80 else f"{parts.hostname.lower()}:{port}"
    return f"http://{origin}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")


def _prob_round(value: float, rnd: Callable[[], float]) -> int:
    """Round so that the *expected* count equals value (keeps fractions exact on average)."""
    whole = int(value)
    return whole + (1 if rnd() < value - whole else 0)


def _relative(target: str, from_dir: str) -> str:
    """A relative href from a document in from_dir to target (path[?query])."""
    path, _, query = target.partition("?")
    if path == "/":
        rel = "./" if from_dir == "/" else "../" * (from_dir.count("/") - 1)
    else:
        rel = posixpath.relpath(path, from_dir)
    return rel + (f"?{query}" if query else "")


class DemoWeb:
    """A generated web: pages by (host, path), plus the ground truth about it."""

    def __init__(self, spec: WebSpec) -> None:
        self.spec = spec
        self.port = spec.port
        n_hosts, n_pages = spec.hosts, spec.pages_per_host
        self._ips = [_host_ip(spec.base_ip, i) for i in range(n_hosts)]
        if spec.use_ip_hosts:
            self.hosts: list[str] = list(self._ips)
        else:
            self.hosts = [f"site-{i:04d}.{DOMAIN}" for i in range(n_hosts)]
        self._host_index: dict[str, int] = {h: i for i, h in enumerate(self.hosts)}

        rng = random.Random(self._mix(1, 0, 0))
        alias_rng = random.Random(self._mix(5, 0, 0))
        self._aliased: set[int] = set()
        if not spec.use_ip_hosts:
            self._aliased = {
                i for i in range(n_hosts) if alias_rng.random() < spec.www_alias_fraction
            }
        for i in sorted(self._aliased):
            self._host_index["www." + self.hosts[i]] = i

        # Path layout, identical on every host.
        self._paths: list[str] = ["/"] + [self._page_path(k) for k in range(1, n_pages)]
        self._page_of: dict[str, int] = {p: k for k, p in enumerate(self._paths)}
        self._query_pages = [k for k in range(1, n_pages) if k % 10 == 4]
        for k in self._query_pages:
            self._page_of[self._paths[k] + _QUERY] = k
        self._private = [f"{PRIVATE_PREFIX}doc-{j}.html" for j in range(max(1, n_pages // 4))]
        self._private_of = {p: j for j, p in enumerate(self._private)}
        self._query_paths = frozenset(self._paths[k] for k in self._query_pages)
        # Relative href for every (directory a document resolves from, linkable target).
        targets = [*self._page_of, *self._private]
        self._relative_table = {d: {t: _relative(t, d) for t in targets} for d in _DIRS}

        # Pseudo-text: a vocabulary and a long blob pages take slices from.
        syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
        vocab = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)})
        self._words = vocab
        self._blob = " ".join(rng.choices(vocab, k=220_000))

        self._copy_of = self._choose_copies()
        self._contents: dict[tuple[int, int], _Content] = {}
        self._bodies: dict[tuple[int, int], bytes] = {}
        self._bfs_cache: tuple[frozenset[str], frozenset[str], frozenset[str]] | None = None

    # ------------------------------------------------------------------ structure

    def _mix(self, tag: int, host: int, page: int) -> int:
        """A seed for one (purpose, host, page) RNG: derived arithmetically, never hash()."""
        return ((self.spec.seed * 1_000_003 + tag) * 1_000_003 + host) * 1_000_003 + page

    @staticmethod
    def _page_path(k: int) -> str:
        if k % 3 == 0:
            return f"/docs/page-{k}.html"
        if k % 5 == 0:
            return f"/blog/2024/page-{k}.html"
        return f"/page-{k}.html"

    @staticmethod
    def _dir_of(path: str) -> str:
        return path[: path.rindex("/") + 1]

    def _children(self, k: int) -> range:
        n = self.spec.pages_per_host
        return range(min(n, _FANOUT * k + 1), min(n, _FANOUT * k + _FANOUT + 1))

    def _choose_copies(self) -> dict[tuple[int, int], tuple[int, int]]:
        """Pick duplicate pages: leaves whose body is another same-directory page's body."""
        spec = self.spec
        n = spec.pages_per_host
        rng = random.Random(self._mix(3, 0, 0))
        leaves = [k for k in range(1, n) if not self._children(k)]
        copies: list[tuple[int, int]] = []
        for h in range(spec.hosts):
            count = min(len(leaves), _prob_round(n * spec.duplicate_fraction, rng.random))
            copies.extend((h, k) for k in sorted(rng.sample(leaves, count)))
        is_copy = set(copies)
        by_dir: dict[str, list[int]] = {}
        for k in range(1, n):
            by_dir.setdefault(self._dir_of(self._paths[k]), []).append(k)
        result: dict[tuple[int, int], tuple[int, int]] = {}
        for h, k in copies:
            same_dir = by_dir[self._dir_of(self._paths[k])]
            for _ in range(20):
                if spec.hosts > 1 and rng.random() < 0.5:
                    src_host = rng.randrange(spec.hosts - 1)
                    src_host += src_host >= h
                else:
                    src_host = h
                src = (src_host, rng.choice(same_dir))
                if src != (h, k) and src not in is_copy:
                    result[(h, k)] = src
                    break
        return result

    def _origin(self, host: str) -> str:
        return f"http://{host}" if self.port == 80 else f"http://{host}:{self.port}"

    def _content(self, h: int, k: int) -> _Content:  # noqa: C901 - hot path, one flat loop
        """The links (and title, base) of original page k of host h, cached.

        Hot path of both the ground truth BFS and rendering (20k pages for the bench), so
        links are plain tuples built in one flat loop over a plan of targets, drawing from
        ``rng.random`` directly and taking relative hrefs from a precomputed table.
        """
        key = (h, k)
        cached = self._contents.get(key)
        if cached is not None:
            return cached
        spec = self.spec
        rnd = random.Random(self._mix(2, h, k)).random
        host = self.hosts[h]
        origin = self._origin(host)
        paths, query_paths, private = self._paths, self._query_paths, self._private
        n, n_hosts = spec.pages_per_host, spec.hosts

        base: str | None = None
        from_dir = self._dir_of(paths[k])
        if k and rnd() < _BASE_TAG_FRACTION:
            from_dir = _DIRS[int(rnd() * len(_DIRS))]
            base = origin + from_dir
        relative = self._relative_table[from_dir]
        # Relative and absolute-path hrefs resolve against the base's host when there is one.
        pinned = host if base else None

        # The plan: (target host index, or -1 = this host via a same-host href form; target).
        children = self._children(k)
        plan: list[tuple[int, str]] = [(-1, paths[c]) for c in children]
        if k + 1 < n and k + 1 not in children:
            plan.append((-1, paths[k + 1]))
        budget = max(0, spec.links_per_page - len(plan))
        extra: list[tuple[int, str]] = []
        for _ in range(_prob_round(spec.links_per_page * spec.disallowed_fraction, rnd)):
            extra.append((-1, private[int(rnd() * len(private))]))
        if n_hosts > 1:
            for _ in range(_prob_round(spec.links_per_page * spec.cross_host_fraction, rnd)):
                other = int(rnd() * (n_hosts - 1))
                extra.append((other + (other >= h), paths[int(rnd() * n)]))
        if h in self._aliased:
            extra.append((-2, paths[int(rnd() * n)]))  # -2: this host's www. alias
        if rnd() < 0.3:
            extra.append((-3, f"mailto:webmaster@{host}"))  # -3: not crawlable
        if rnd() < 0.2:
            extra.append((-3, "javascript:void(0)"))
        extra = extra[:budget]
        while len(extra) < budget and n > 1:
            page = int(rnd() * (n - 1))
            extra.append((-1, paths[page + (page >= k)]))
        plan.extend(extra)
        # Shuffle by sorting on random keys (cheaper than random.shuffle).
        order = sorted([(rnd(), i) for i in range(len(plan))])

        links: list[tuple[str, str | None, str | None]] = []
        append = links.append
        for _, i in order:
            to_host, target = plan[i]
            if to_host == -3:
                append((target, None, None))
                continue
            if target in query_paths and rnd() < 0.3:
                target += _QUERY
            r = rnd()
            if to_host == -1 and r < 0.7:
                if r < 0.45:
                    href = relative[target]
                    if r < 0.12 and href[0] != ".":
                        href = "./" + href
                else:
                    href = target
                link_host = pinned
            else:
                if to_host == -1:
                    link_host = host
                elif to_host == -2:
                    link_host = "www." + host
                else:
                    link_host = self.hosts[to_host]
                shown = link_host.upper() if 0.8 < r < 0.85 else link_host
                href = (origin if shown is host else self._origin(shown)) + target
                if r >= 0.95:
                    href = href[5:]  # scheme-relative "//host:port/path"
            if rnd() < _FRAGMENT_FRACTION:
                href += f"#sec-{int(rnd() * 9)}"
            append((href, link_host, target))
        title = f"Home of {host}" if k == 0 else f"Page {k} of {host}"
        content = _Content(title, base, links)
        self._contents[key] = content
        return content

    # ------------------------------------------------------------------ rendering

    def _render(self, h: int, k: int) -> bytes:
        """The HTML of original page k of host h: ~page_bytes, links spread over paragraphs."""
        content = self._content(h, k)
        rnd = random.Random(self._mix(4, h, k)).random
        words, blob = self._words, self._blob
        n_words = len(words)
        base_tag = f'<base href="{content.base}">\n' if content.base else ""
        head = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{content.title}</title>\n{base_tag}</head>\n<body>\n"
            f"<h1>{content.title}</h1>\n"
        )
        tail = "</body>\n</html>\n"
        anchors = [
            f'<a href="{link[0]}">{words[int(rnd() * n_words)]}</a>' for link in content.links
        ]
        fixed = len(head) + len(tail) + sum(map(len, anchors)) + len(anchors)
        remaining = max(0, self.spec.page_bytes - fixed)
        n_par = max(1, round(remaining / _PARAGRAPH_CHARS))
        size = max(20, remaining // n_par - 9)
        span = len(blob) - size - 64
        group = -(-len(anchors) // n_par)
        parts = [head]
        for i in range(n_par):
            start = blob.find(" ", int(rnd() * span)) + 1
            text = blob[start : start + size]
            cut = text.find(" ", size // 2) + 1 or size
            middle = " ".join(anchors[i * group : (i + 1) * group])
            parts.append(f"<p>{text[:cut]}{middle} {text[cut:]}</p>\n")
        parts.append(tail)
        return "".join(parts).encode("ascii")

    def _body(self, key: tuple[int, int]) -> bytes:
        body = self._bodies.get(key)
        if body is None:
            body = self._bodies[key] = self._render(*key)
        return body

    def _private_body(self, host: str, j: int) -> bytes:
        return (
            f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>Private document {j} of {host}</title>\n</head>\n<body>\n"
            f"<p>robots.txt forbids this page; a polite crawler never fetches it.</p>\n"
            f"</body>\n</html>\n"
        ).encode("ascii")

    # ------------------------------------------------------------------ public API

    def with_port(self, port: int) -> DemoWeb:
        """The same web bound to port (links and canonical URLs embed it)."""
        return self if port == self.port else DemoWeb(replace(self.spec, port=port))

    def address_of(self, host: str) -> str:
        """The loopback IP serving host (``www.`` aliases share their host's IP)."""
        return self._ips[self._host_index[host.lower()]]

    def all_host_names(self) -> list[str]:
        """Every name that serves pages: the hosts plus their ``www.`` aliases."""
        return self.hosts + ["www." + self.hosts[i] for i in sorted(self._aliased)]

    def resolve_map(self, port: int) -> dict[str, str]:
        """host -> "ip:port" for every served name, for the crawler's --resolve overrides."""
        return {name: f"{self.address_of(name)}:{port}" for name in self.all_host_names()}

    def seeds(self) -> list[str]:
        """Entry URLs: every host's home page (robust even for a sparsely linked web)."""
        return [self._origin(host) + "/" for host in self.hosts]

    def content_key(self, host: str, target: str) -> tuple[int, int] | None:
        """Identity of the body served at (host, path[?query]): equal keys = equal bytes."""
        h = self._host_index.get(host.lower())
        k = self._page_of.get(target.partition("#")[0])
        if h is None or k is None:
            return None
        return self._copy_of.get((h, k), (h, k))

    def page(self, host: str, path: str) -> tuple[int, dict[str, str], bytes] | None:
        """(status, headers, body) served for host and request target, None for a 404.

        host may carry a ``:port`` suffix (as in a Host header); path may carry a query.
        """
        host = host.lower()
        if ":" in host:
            host = host.rsplit(":", 1)[0]
        h = self._host_index.get(host)
        if h is None:
            return None
        path = path.partition("#")[0]
        if path == "/robots.txt":
            return 200, dict(_TEXT_HEADERS), ROBOTS_TXT
        key = self.content_key(host, path)
        if key is not None:
            return 200, dict(_HTML_HEADERS), self._body(key)
        j = self._private_of.get(path)
        if j is not None:
            return 200, dict(_HTML_HEADERS), self._private_body(self.hosts[h], j)
        return None

    def links_of(self, host: str, target: str) -> list[Link]:
        """The links of the page at (host, target), as generated (copies share them)."""
        key = self.content_key(host, target)
        return [] if key is None else [Link(*link) for link in self._content(*key).links]

    def served_targets(self) -> list[tuple[str, str]]:
        """Every (host name, path[?query]) answering 200 with HTML: pages, ?ref variants,
        ``www.`` aliases and the /private/ documents (served, so a violation is visible)."""
        targets = [*self._page_of, *self._private]
        return [(name, t) for name in self.all_host_names() for t in targets]

    def served_urls(self) -> list[str]:
        """Canonical URLs of `served_targets`."""
        return [self._origin(name) + target for name, target in self.served_targets()]

    def _key_of_url(self, url: str) -> tuple[str, str] | None:
        canonical = canonical_url(url)
        if canonical is None:
            return None
        parts = urlsplit(canonical)
        return (parts.hostname or ""), canonical[len(f"http://{parts.netloc}") :]

    def _bfs(self, seeds: Iterable[str] | None) -> tuple[set[str], set[str], set[str]]:
        """Walk the link graph: (allowed reached, disallowed linked, linked but unserved)."""
        start = [self._key_of_url(u) for u in (self.seeds() if seeds is None else seeds)]
        queue = deque(key for key in start if key is not None)
        seen = set(queue)
        allowed: set[str] = set()
        disallowed: set[str] = set()
        unserved: set[str] = set()
        while queue:
            host, target = queue.popleft()
            url = self._origin(host) + target
            if target.startswith(PRIVATE_PREFIX):
                disallowed.add(url)
                if target not in self._private_of or host not in self._host_index:
                    unserved.add(url)
                continue
            allowed.add(url)
            key = self.content_key(host, target)
            if key is None:
                unserved.add(url)
                continue
            for _, link_host, link_target in self._content(*key).links:
                if link_target is None:
                    continue
                nxt = (link_host or host, link_target)
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return allowed, disallowed, unserved

    def _default_bfs(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        if self._bfs_cache is None:
            allowed, disallowed, unserved = self._bfs(None)
            self._bfs_cache = (frozenset(allowed), frozenset(disallowed), frozenset(unserved))
        return self._bfs_cache

    def reachable_allowed(
        self, seeds: Iterable[str] | None = None, *, www_equivalent: bool = False
    ) -> set[str]:
        """What a correct crawl from seeds must store (the ground truth).

        Canonical URLs that a BFS from seeds reaches by following links of pages robots.txt
        allows (for any agent); ``/private/`` URLs are never entered. Defaults to `seeds()`.

        With www_equivalent, ``www.<host>`` URLs are folded into ``<host>`` (for a crawler
        that treats the two as one site; the pages are byte-identical, so the set is the
        plain set with the prefix stripped).
        """
        allowed = set(self._default_bfs()[0]) if seeds is None else self._bfs(seeds)[0]
        if www_equivalent:
            allowed = {u.replace("http://www.", "http://", 1) for u in allowed}
        return allowed

    def disallowed_linked(self) -> set[str]:
        """URLs reachable pages link to that robots.txt forbids: a crawler must never fetch them."""
        return set(self._default_bfs()[1])

    def unserved_linked(self) -> set[str]:
        """Linked URLs that would 404: always empty for a correct generator (tests check it)."""
        return set(self._default_bfs()[2])

    def duplicate_groups(self) -> list[set[str]]:
        """Groups (size >= 2) of reachable allowed URLs whose bodies are byte-identical."""
        groups: dict[tuple[int, int], set[str]] = {}
        for url in self._default_bfs()[0]:
            host_target = self._key_of_url(url)
            key = None if host_target is None else self.content_key(*host_target)
            if key is not None:
                groups.setdefault(key, set()).add(url)
        return sorted((g for g in groups.values() if len(g) > 1), key=min)

    def copy_urls(self) -> set[str]:
        """The URLs of designated duplicate pages (a copy of some other page's body)."""
        return {self._origin(self.hosts[h]) + self._paths[k] for h, k in self._copy_of}
