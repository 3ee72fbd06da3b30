"""SURT keys: a URL in the canonical, host-reversed form pywb looks CDXJ lines up by.

Only the standard library; the CDXJ export (``streams.store.cdxj``) keys its lines with
``surt()``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
from urllib.parse import SplitResultBytes, quote_from_bytes, unquote_to_bytes

__all__ = ["surt"]

_HAS_SCHEME_RE = re.compile(rb"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
_MULTI_HTTP_RE = re.compile(rb"^(https?://)+")
_URI_RE = re.compile(rb"^(?:([a-zA-Z][a-zA-Z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?")
_WWW_RE = re.compile(rb"^www\d*\.")
_DECIMAL_IP_RE = re.compile(rb"^[1-9][0-9]*(?:\.[0-9]+){0,3}$")
_OCTAL_IP_RE = re.compile(rb"^0[0-7]*(?:\.[0-7]+){0,3}$")
_SURT_SAFE = b"!\"$&'()*+,-./:;<=>?@[\\]^_`{|}~"
_PATH_SESSION_RES = (
    re.compile(rb"^(.*/)\((?:[a-z]\([0-9a-z]{24}\))+\)/([^?]+\.aspx.*)$", re.I),
    re.compile(rb"^(.*/)\([0-9a-z]{24}\)/([^?]+\.aspx.*)$", re.I),
)
_QUERY_SESSION_RES = tuple(
    re.compile(rb"^(.*)(?:" + p + rb")(?:&(.*))?$", re.I)
    for p in (
        rb"jsessionid=[0-9a-z]{32}",
        rb"phpsessid=[0-9a-z]{32}",
        rb"sid=[0-9a-z]{32}",
        rb"aspsessionid[a-z]{8}=[a-z]{24}",
        rb"cfid=[^&]+&cftoken=[^&]+",
    )
)


def _unescape_all(b: bytes) -> bytes:
    while True:
        un = unquote_to_bytes(b)
        if un == b:
            return b
        b = un


def _escape_once(b: bytes) -> bytes:
    return quote_from_bytes(b, safe=_SURT_SAFE).encode("ascii")


def _dot_segments(path: bytes) -> bytes:
    kept: list[bytes] = []
    for seg in path.split(b"/")[1:]:
        if seg == b".":
            continue
        if seg == b"..":
            if kept:
                kept.pop()
            else:
                kept.append(seg)
            continue
        kept.append(seg)
    if not kept:
        return b"/"
    return b"/" + b"".join(p + b"/" for p in kept[:-1] if p) + kept[-1]


def _numeric_host(host: bytes) -> bytes | None:
    """Dotted-quad form of an IPv4 host written as one number, octal or short form.

    ``inet_aton`` parses these forms locally, the way the resolver would, so the key never
    depends on the network.
    """
    if host.isdigit():
        return socket.inet_ntoa(struct.pack(">L", int(host) & 0xFFFFFFFF)).encode()
    if _DECIMAL_IP_RE.match(host) or _OCTAL_IP_RE.match(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host.decode("ascii"))).encode()
        except OSError:
            return None
    return None


def surt(url: str) -> str:  # noqa: C901 - one pass of pywb's canonicalisation steps, in order
    """SURT key of ``url`` as pywb computes it for CDXJ lookups.

    Why our own: pywb canonicalises lookups with the ``surt`` package's default
    (Google + IA canonicalisers, no scheme); a CDXJ whose keys differ is silently
    unfindable.  This reimplements that transform without the dependency: host lower-
    cased, IDNA, ``www\\d*.`` stripped, labels reversed with commas; default port
    dropped; path unescaped, dot-segments and empty segments removed, re-escaped and
    lowercased, trailing slash dropped; query lowercased, session ids stripped, arguments
    sorted; fragment dropped.  (Unlike ``surt``, numeric/octal host forms are not resolved
    through DNS: the key must not depend on the network.)
    """
    b = url.encode("utf-8", "surrogateescape").strip()
    b = b.replace(b"\t", b"").replace(b"\r", b"").replace(b"\n", b"")
    if not b:
        return "-"
    if not _HAS_SCHEME_RE.match(b):
        b = b"http://" + b
    b = _MULTI_HTTP_RE.sub(lambda m: m.group(1), b)
    m = _URI_RE.match(b)
    assert m is not None  # the pattern matches any string
    scheme = m.group(1) or b""
    netloc = (m.group(2) or b"").rstrip(b":")
    path = m.group(3) or b""
    query = m.group(4)

    split = SplitResultBytes(scheme, netloc, path, b"", b"")
    host = split.hostname or b""
    try:
        port = split.port or None
    except ValueError:
        port = None
    if scheme.startswith(b"http") and not host and path:
        head, _, tail = path.lstrip(b"/").partition(b"/")
        host, path = head, b"/" + tail

    if query:
        query = _escape_once(_unescape_all(query))
    if host:
        host = _unescape_all(host)
        if not host.isascii():
            with contextlib.suppress(ValueError):  # not IDNA-encodable: keep escaped bytes
                host = host.decode("utf-8", "ignore").encode("idna")
        host = host.replace(b"..", b".").strip(b".")
        host = _numeric_host(host) or _escape_once(host).lower()
        if scheme != b"dns":
            host = _WWW_RE.sub(b"", host, count=1)
    path = _unescape_all(path)
    if host:
        path = _dot_segments(path)
    path = _escape_once(path).lower()
    for rx in _PATH_SESSION_RES:
        pm = rx.match(path)
        if pm:
            path = pm.group(1) + pm.group(2)
    if len(path) > 1 and path.endswith(b"/"):
        path = path[:-1]
    default_port = {b"http": 80, b"https": 443}.get(scheme.lower())
    if port == default_port:
        port = None

    if query:
        for rx in _QUERY_SESSION_RES:
            qm = rx.match(query)
            if qm:
                query = qm.group(1) + (qm.group(2) or b"")
        query = query.lower()
        if len(query) > 1:
            args = sorted(tuple(a.split(b"=", 1)) for a in query.split(b"&"))
            query = b"&".join(b"=".join(a) for a in args)

    if host:
        out = b",".join(reversed(host.split(b".")))
        if port is not None:
            out += b":%d" % port
        out += b")"
    else:
        out = scheme + b":"
    if path:
        out += path
    elif query:
        out += b"/"
    if query:
        out += b"?" + query
    return out.decode("utf-8", "surrogateescape")
