"""The crawl's URL layer: resolve links and put them in one canonical form.

Why this module exists
----------------------
Every link the crawler sees passes through here, ~23 per page, so two things
matter: that we agree with browsers on what a link *means*, and that we do it
fast.

* Meaning: links are resolved by the WHATWG URL standard (what browsers do),
  via ``ada_url``, not by RFC 3986 ``urllib.parse.urljoin``. The two disagree on
  a lot of real-world markup (backslashes, tabs inside hrefs, ``http:g``, IPv4
  spellings, IDN hosts...). The conformance tests pin this against the
  web-platform-tests data.
* One form per resource: the frontier deduplicates on :func:`canonical`, so two
  spellings of the same URL must map to one string, and the mapping must be
  idempotent (a canonical URL that goes round Kafka and is canonicalised again
  must not become a "new" URL).
* Speed: ada is parsed *once* per link; canonicalisation then works on the
  serialised href, whose shape WHATWG guarantees (lower-case scheme, punycode
  host, no default port, dot segments gone, ``/`` path for http(s), ``#`` only
  as the fragment delimiter). :func:`resolve_and_canonicalize` also caches the
  parsed page URL and resolves the common simple relative links in pure Python.

Trap guards on a URL's shape live in streams.core.traps. Pure logic: no Kafka / faust imports.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import NamedTuple

__all__ = [
    "canonical",
    "copy_links_differ",
    "host_of",
    "resolve",
    "resolve_and_canonicalize",
    "resolve_canonical",
    "site_key",
]

# ---------------------------------------------------------------------------
# ada binding
# ---------------------------------------------------------------------------


def _public_serialize(data: bytes, base: bytes | None) -> str | None:
    """Serialise through ada's public API: slower, kept as the fallback binding."""
    import ada_url

    try:
        if base is None:
            return ada_url.normalize_url(data.decode())
        return ada_url.join_url(base.decode(), data.decode())
    except ValueError:
        return None


def _make_serializer() -> Callable[[bytes, bytes | None], str | None]:
    """Bind straight to ada's C API when we can.

    ``ada_url.join_url`` wraps every parse in ``ffi.gc`` and checks validity with
    an extra call; going to ``lib`` directly (parse, read href, free) saves about
    a third of the per-link cost, which is most of our budget. ``_ada_wrapper`` is
    a private module, so if a future ada-url moves it we fall back to the public
    functions instead of breaking the crawl.
    """
    try:
        from ada_url._ada_wrapper import ffi, lib

        parse = lib.ada_parse
        parse_with_base = lib.ada_parse_with_base
        get_href = lib.ada_get_href
        free = lib.ada_free
        unpack = ffi.unpack
    except Exception:  # pragma: no cover - depends on the installed ada-url build
        return _public_serialize

    def serialize(data: bytes, base: bytes | None) -> str | None:
        # An invalid parse reports an empty href, which saves an ada_is_valid call:
        # a valid URL never serialises to "".
        if base is None:
            u = parse(data, len(data))
        else:
            u = parse_with_base(data, len(data), base, len(base))
        try:
            s = get_href(u)
            if not s.length:
                return None
            return unpack(s.data, s.length).decode("utf-8", "replace")
        finally:
            free(u)

    return serialize


_serialize = _make_serializer()


def _utf8(s: str) -> bytes:
    """Encode as the URL parser's scalar-value string.

    WHATWG parses USVStrings: lone surrogates become U+FFFD (what a browser does
    to a JS string with them). Python strings from ``surrogateescape`` decoding
    carry such surrogates, and plain ``.encode()`` would raise on them.
    """
    try:
        return s.encode()
    except UnicodeEncodeError:
        fixed = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return fixed.encode()


# ---------------------------------------------------------------------------
# percent-encoding normalisation
# ---------------------------------------------------------------------------

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = "0123456789ABCDEFabcdef"


def _build_pct_table() -> dict[str, str]:
    """Map every ``%XY`` spelling to its normal form, and a stray ``%`` to ``%25``.

    Unreserved characters are decoded (RFC 3986 §6.2.2.2 says they are equivalent
    encoded or not); everything else keeps its escape with upper-case hex
    (§6.2.2.1). A ``%`` not followed by two hex digits becomes ``%25``: without
    that, decoding could *create* an escape (``%%341`` -> ``%41``) and a second
    pass would change the URL again, breaking idempotency. Browsers and servers
    read such a stray ``%`` literally, which ``%25`` spells unambiguously.
    """
    table = {"%": "%25"}
    for a in _HEX:
        for b in _HEX:
            ch = chr(int(a + b, 16))
            table["%" + a + b] = ch if ch in _UNRESERVED else "%" + (a + b).upper()
    return table


_PCT_TABLE = _build_pct_table()
_PCT_RE = re.compile(r"%(?:[0-9A-Fa-f]{2})?")


def _pct_repl(m: re.Match[str]) -> str:
    return _PCT_TABLE[m[0]]


def _normalize_pct(s: str) -> str:
    """Normalise percent-escapes in a path/query string (see :func:`_build_pct_table`)."""
    return _PCT_RE.sub(_pct_repl, s) if "%" in s else s


# ---------------------------------------------------------------------------
# canonical form
# ---------------------------------------------------------------------------


def _canon_href(href: str | None) -> str | None:
    """Canonicalise an href that ada has already serialised.

    Relies on the WHATWG serialisation: the scheme is lower-case, the host
    lower-case/punycode, the default port gone, dot segments removed and an http(s)
    path always present and starting with ``/``; every ``#`` before the fragment
    and every ``/`` inside the userinfo is percent-encoded. So the fragment starts
    at the first ``#`` and the path at the first ``/`` after ``scheme://``: plain
    string slicing, no second parse.
    """
    if href is None:
        return None
    if href.startswith("http://"):
        start = 7
    elif href.startswith("https://"):
        start = 8
    else:
        return None
    cut = href.find("#")
    if cut >= 0:
        href = href[:cut]
    if "%" in href:
        p = href.find("/", start)
        if p >= 0:
            href = href[:p] + _normalize_pct(href[p:])
    return href


def canonical(url: str) -> str | None:
    """Return the crawl's canonical form of an absolute http(s) URL, or None.

    Rules: scheme and host lower-cased; IDN hosts as punycode; default port
    dropped; fragment dropped; dot segments removed; in path and query the
    unreserved characters are decoded and other escapes get upper-case hex; an
    empty path becomes ``/``. Query order, an empty ``?``, trailing slashes and
    file names are kept, because servers may treat them as different resources.

    Never raises: the frontier calls this on whatever a page contained, and one
    hostile href must not kill a stream worker. Non-str input, undecodable
    surrogates, huge or invalid input all give ``None`` (or a URL, for the
    surrogate case, as a browser would). Idempotent:
    ``canonical(canonical(u)) == canonical(u)``.
    """
    try:
        if not isinstance(url, str):
            return None
        return _canon_href(_serialize(_utf8(url), None))
    except Exception:
        return None


# ---------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------


def resolve(base: str, href: str) -> str | None:
    """Resolve ``href`` against ``base`` the way a browser does (WHATWG URL).

    Returns the absolute URL's href (fragment kept, so it matches the
    web-platform-tests expectations exactly), or None when the link is not
    something we crawl: ``javascript:``, ``mailto:``, ``data:``, ``ftp:``, any other
    non-http(s) result, or a parse failure. Never raises.
    """
    try:
        if not isinstance(base, str) or not isinstance(href, str):
            return None
        out = _serialize(_utf8(href), _utf8(base))
        if out is not None and out.startswith(("http://", "https://")):
            return out
        return None
    except Exception:
        return None


def resolve_canonical(base: str, href: str) -> str | None:
    """``canonical(resolve(base, href))`` with a single parse instead of two."""
    try:
        if not isinstance(base, str) or not isinstance(href, str):
            return None
        return _canon_href(_serialize(_utf8(href), _utf8(base)))
    except Exception:
        return None


class _Base(NamedTuple):
    """A page URL prepared once for resolving all of that page's links."""

    raw: bytes  # the page URL as given, UTF-8, for ada's slow path
    ok: bool  # True when the simple-relative fast path may be used
    prefix: str  # canonical "scheme://userinfo@host:port"
    path: str  # canonical path of the page
    dir: str  # canonical path up to and including its last "/"
    query: str  # canonical "?query" of the page, or ""


@lru_cache(maxsize=1024)
def _prepare_base(base: str) -> _Base:
    """Parse a page URL once; cached because a fetch batch revisits few pages.

    A page URL is nearly always canonical already (it came through the frontier), so
    the absolute-link fast path of :func:`_fast_absolute` usually answers without
    calling ada: every page has a new URL, so this is one ada call a page saved."""
    raw = _utf8(base)
    canon = _fast_absolute(base) if base.isascii() else None
    if canon is None:
        canon = _canon_href(_serialize(raw, None))
    if canon is None:
        return _Base(raw, False, "", "", "", "")
    start = 7 if canon.startswith("http://") else 8
    p = canon.find("/", start)
    q = canon.find("?", p)
    path, query = (canon[p:q], canon[q:]) if q >= 0 else (canon[p:], "")
    return _Base(raw, True, canon[:p], path, path[: path.rfind("/") + 1], query)


def _remove_dot_segments(path: str) -> str:
    """Drop "." and ".." segments from an absolute path the way WHATWG's path state
    does for http(s): ".." pops a segment (never past the root), and a final "." or
    ".." leaves a trailing "/". Only for paths of the fast paths' characters (no
    escapes, so no "%2e" spellings, no backslashes)."""
    segments = path[1:].split("/")
    last = len(segments) - 1
    out: list[str] = []
    for i, seg in enumerate(segments):
        if seg == "..":
            if out:
                out.pop()
            if i == last:
                out.append("")
        elif seg == ".":
            if i == last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


#: A link that starts with a scheme. One other than http(s) (``javascript:``,
#: ``mailto:``, ``tel:``...) makes an absolute URL of that scheme whatever follows,
#: which the crawl drops: no ada call needed to know it.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_HTTP_SCHEMES = frozenset({"http", "https"})


# Links that resolve the same way under RFC 3986 and WHATWG and need no ada call:
# a relative path of plain characters (no ':' so no scheme, no '%', '\\', spaces or
# controls), an optional query of characters WHATWG leaves unencoded, and any
# fragment (which canonical drops anyway). A "//" start (a scheme-relative link) is
# excluded separately; dot segments are removed by :func:`_remove_dot_segments`. The
# hypothesis suite checks this path against ada on random input.
_FAST_REL = re.compile(
    r"([A-Za-z0-9_~!$&'()*+,;=@./-]*)(\?[A-Za-z0-9_~!$&()*+,;=@:/?.%-]*)?(?:#.*)?",
    re.DOTALL,
)


# Absolute and scheme-relative links ("http://host:port/path?q", "//host/path") whose
# authority is a plain host and port and whose path and query pass as above: the
# authority's canonical form is ada's, memoised per authority (a page links few hosts,
# and the same ones as its neighbours); the path needs no ada call, since the path
# of an http(s) URL is parsed the same whatever its host. "//" paths, userinfo and
# escapes in the path go to ada; dot segments are removed as for relative links.
_FAST_ABS = re.compile(
    r"(https?:)?//([A-Za-z0-9.-]+(?::[0-9]*)?)"
    r"((?:/[A-Za-z0-9_~!$&'()*+,;=@./-]*)?)(\?[A-Za-z0-9_~!$&()*+,;=@:/?.%-]*)?(?:#.*)?",
    re.DOTALL,
)


@lru_cache(maxsize=4096)
def _authority_prefix(scheme: str, authority: str) -> str | None:
    """Canonical "scheme://host[:port]" of a plain authority (None: leave it to ada)."""
    c = _canon_href(_serialize(f"{scheme}//{authority}/".encode(), None))
    if c is None or c.find("/", len(scheme) + 2) != len(c) - 1:
        return None
    return c[:-1]


def _fast_absolute(url: str, default_scheme: str = "") -> str | None:
    """Canonical form of a plain ASCII absolute (or, with ``default_scheme``,
    scheme-relative) http(s) URL without a per-URL ada call; None when it is not of
    the plain shape ``_FAST_ABS`` accepts (the caller then asks ada)."""
    a = _FAST_ABS.fullmatch(url)
    if a is None:
        return None
    scheme, authority, path, query = a.group(1, 2, 3, 4)
    if path.startswith("//") or not (scheme or default_scheme):
        return None
    prefix = _authority_prefix(scheme or default_scheme, authority)
    if prefix is None:
        return None
    if "/." in path:
        path = _remove_dot_segments(path)
    return prefix + (path or "/") + (_normalize_pct(query) if query else "")


#: Canonical forms :func:`_fast_absolute` gave, by the link with its scheme (a pure
#: function of that text, whatever page links it): pages link the same absolute URLs
#: over and over (navigation, popular pages), and a hit costs a dict lookup instead of
#: two regex matches and the string building. Bounded to a few MB a worker.
_ABSOLUTES: dict[str, str] = {}
_ABSOLUTES_MAX = 16_384


def resolve_and_canonicalize(base: str, hrefs: Iterable[str], *, dedupe: bool = True) -> list[str]:
    """Resolve and canonicalise all links of one page; drop the uncrawlable ones.

    This is the hot path of link extraction. The page URL is parsed once (and
    cached), simple relative links ("page-2.html", "/a/b?x=1", "#top") are joined
    in Python without calling ada, everything else goes through ada once. With
    ``dedupe`` (default) each canonical URL appears once, in first-seen order,
    since pages link the same URL many times and the frontier only needs it once.
    Never raises; a bad base makes every relative link unresolvable.
    """
    out: list[str] = []
    try:
        if not isinstance(base, str):
            return out
        b = _prepare_base(base)
    except Exception:
        return out
    seen: set[str] = set()
    fast_ok = b.ok
    fullmatch = _FAST_REL.fullmatch
    scheme_match = _SCHEME.match
    absolutes = _ABSOLUTES
    base_scheme = b.prefix[: b.prefix.find(":") + 1]
    for href in hrefs:
        c: str | None = None
        try:
            plain = fast_ok and href.isascii()
            m = fullmatch(href) if plain and not href.startswith("//") else None
            if m is not None:
                path, query = m.group(1, 2)
                if not path:
                    tail = b.query if query is None else _normalize_pct(query)
                    c = b.prefix + b.path + tail
                else:
                    if path[0] != "/":
                        path = b.dir + path
                    if "/." in path:
                        path = _remove_dot_segments(path)
                    c = b.prefix + path + (_normalize_pct(query) if query else "")
            elif plain:
                # "//host/p" under an http: page is "http://host/p": one memo for both
                key = base_scheme + href if href.startswith("/") else href
                c = absolutes.get(key)
                if c is None:
                    c = _fast_absolute(href, base_scheme)
                    if c is not None:
                        if len(absolutes) >= _ABSOLUTES_MAX:
                            absolutes.clear()
                        absolutes[key] = key if c == key else c  # one string, not two
            if c is None:
                sm = scheme_match(href)
                if sm is not None and sm[1].lower() not in _HTTP_SCHEMES:
                    continue  # javascript:, mailto:...: never an http(s) URL
                c = _canon_href(_serialize(_utf8(href), b.raw))
        except Exception:
            c = None
        if c is None:
            continue
        if dedupe:
            if c in seen:
                continue
            seen.add(c)
        out.append(c)
    return out


# ---------------------------------------------------------------------------
# hosts and sites
# ---------------------------------------------------------------------------

#: A port WHATWG accepts: up to 4 digits, or 5 digits of at most 65535 (ephemeral
#: ports such as the demo web's are 5 digits; leaving those to ada cost ~15 µs a link).
_VALID_PORT = (
    r"(?::(?:[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]|[0-9]{0,4}))"
)
# Hosts that need no WHATWG host parsing to know their hostname: lower-case DNS
# labels whose last label starts with a letter (so it is not an IPv4 spelling),
# no userinfo, a valid port. Punycode ("xn--") goes
# to ada, so any label validation ada does (or adds in a later version) applies.
_SIMPLE_HOST = re.compile(
    rf"https?://((?:[a-z0-9-]+\.)*[a-z][a-z0-9-]*){_VALID_PORT}?(?=[/?#]|\Z)",
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: An IPv4 host already in WHATWG's serialisation (four decimal octets, no leading
#: zeros), which host parsing returns unchanged; other spellings (``0x7f.1``,
#: ``127.1``, ``010.0.0.1``) go to ada.
_CANONICAL_IPV4_HOST = re.compile(
    rf"https?://((?:{_OCTET}\.){{3}}{_OCTET}){_VALID_PORT}?(?=[/?#]|\Z)",
)


#: host_of's regex answers by the URL's text up to its first "/" after the scheme's
#: (a crawl meets few hosts and asks for each one on every link and log record).
_HOSTS: dict[str, str] = {}
_HOSTS_MAX = 65_536


def host_of(url: str) -> str:
    """Lower-case hostname (no port, no userinfo) of an absolute URL, "" if none.

    Canonical URLs take a regex fast path; anything else is parsed by ada, so
    ``HTTP://User@Example.COM:8080`` and IDN spellings give the same answer as
    the canonical form would. IPv6 hosts keep their brackets, as WHATWG has them.

    The regex answers are memoised by ``url[:end]``, ``end`` being the first "/" from
    index 8 on: neither regex reads past that "/" (no character they consume is a
    "/"; their lookahead sees the "/" itself), so every URL with that text before that
    "/" gets the same answer. Only regex answers are memoised: ada's depends on the
    whole URL (a lone surrogate anywhere makes it fail).
    """
    try:
        end = url.find("/", 8)
        key = url[:end] if end > 0 else ""
        host = _HOSTS.get(key) if key else None
        if host is not None:
            return host
        m = _SIMPLE_HOST.match(url)
        if m is not None:
            host = m[1]
            if "xn--" in host:
                host = None
        if host is None:
            m = _CANONICAL_IPV4_HOST.match(url)
            if m is not None:
                host = m[1]
        if host is not None:
            if key:
                if len(_HOSTS) >= _HOSTS_MAX:
                    _HOSTS.clear()
                _HOSTS[key] = host
            return host
        import ada_url

        return str(ada_url.parse_url(url, attributes=("hostname",))["hostname"])
    except Exception:
        return ""


def site_key(host: str) -> str:
    """The host with one leading ``www.`` removed: ``www.example.com`` and
    ``example.com`` are, for politeness and partitioning, one site.

    Both forms must land on the same partition, or two workers would crawl one
    server concurrently and double the load. Lower-cases defensively so a caller
    that did not go through :func:`host_of` still gets the same key.
    """
    host = host.lower()
    if host.startswith("www.") and len(host) > 4:
        return host[4:]
    return host


#: A URL with a scheme (an absolute ``<base href>``).
_ABSOLUTE_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def copy_links_differ(copy_url: str, original_url: str, base: str | None) -> bool:
    """Whether a byte-identical copy's links can resolve to other URLs than the
    original's: its relative links resolve against its own URL (less query and
    fragment: a ``?ref=x`` variant of a page links exactly where the page does), unless
    an absolute ``<base href>`` pins both to one place. A copy on another host or under
    another file name links elsewhere, and pages only it links to are reachable."""
    if base and _ABSOLUTE_RE.match(base.strip()):
        return False

    def context(url: str) -> str:
        return url.split("#", 1)[0].split("?", 1)[0]

    return context(copy_url) != context(original_url)
