"""SURT keys (streams/store/surt.py), as pywb computes them for CDXJ lookups."""

from __future__ import annotations

import json

import pytest

from streams.store.surt import surt
from tests.unit.store_helpers import (
    CONFORMANCE,
)


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://archive.org/goo/?a=2&b&a=1", "org,archive)/goo?a=1&a=2&b"),
        ("http://www.example.com/", "com,example)/"),
        ("https://www2.Example.COM:443/Foo/Bar/", "com,example)/foo/bar"),
        ("http://example.com:8080/a/../b/./c//d/", "com,example:8080)/b/c/d"),
        ("http://user:pw@example.com/x#frag", "com,example)/x"),
        ("http://例え.テスト/パス", "xn--zckzah,xn--r8jz45g)/%e3%83%91%e3%82%b9"),
        ("http://example.com/%7Efoo", "com,example)/~foo"),
        ("http://example.com/?", "com,example)/"),
        ("example.com/path", "com,example)/path"),
        ("http://3232235777/", "1,1,168,192)/"),
        (
            "http://example.com/a?jsessionid=0123456789abcdef0123456789abcdef&x=1",
            "com,example)/a?x=1",
        ),
        ("dns:www.example.com", "dns:www.example.com"),
    ],
)
def test_surt_known_values(url: str, key: str) -> None:
    assert surt(url) == key


def test_surt_matches_reference_package() -> None:
    """Same keys as the ``surt`` package pywb uses (only where it is installed)."""
    ref = pytest.importorskip("surt")
    data = json.loads((CONFORMANCE / "urltestdata.json").read_text())
    urls = {d[k] for d in data if isinstance(d, dict) for k in ("input", "href") if d.get(k)}
    compared = 0
    for u in sorted(urls):
        try:
            expected = ref.surt(u)
        except Exception:
            continue
        assert surt(u) == expected, u
        compared += 1
    assert compared > 500


def test_surt_never_raises_on_wpt_inputs() -> None:
    if not (CONFORMANCE / "urltestdata.json").is_file():
        pytest.skip("urltestdata.json not found")
    data = json.loads((CONFORMANCE / "urltestdata.json").read_text())
    for d in data:
        if isinstance(d, dict):
            assert isinstance(surt(d["input"]), str)
