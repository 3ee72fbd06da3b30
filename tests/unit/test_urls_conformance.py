"""Conformance of streams.core.urls against the standard suites in shared/conformance.

The data lives beside the repo (``../shared/conformance``), not in it, so a fresh
clone with ``shared/`` next to it runs the same cases. A missing file is a hard
error, not a skip: silently skipping would let the suite go green while testing
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streams.core.urls import (
    canonical,
    host_of,
    resolve,
    resolve_and_canonicalize,
    resolve_canonical,
)

CONFORMANCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "conformance"

HTTP_SCHEMES = ("http:", "https:")


def _load(name: str) -> Any:
    path = CONFORMANCE / name
    if not path.is_file():
        raise FileNotFoundError(f"conformance data missing: {path} (shared/ must sit beside repo)")
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------
# web-platform-tests urltestdata.json
# ---------------------------------------------------------------------------

WPT_ALL: list[Any] = _load("urltestdata.json")
WPT_HTTP: list[dict[str, Any]] = [
    c
    for c in WPT_ALL
    if isinstance(c, dict)
    and isinstance(c.get("base"), str)
    and c["base"].lower().startswith(HTTP_SCHEMES)
]


def _wpt_expected(case: dict[str, Any]) -> str | None:
    """What resolve() must give: the href, or None for failures and non-http(s)."""
    if case.get("failure"):
        return None
    href: str = case["href"]
    return href if href.startswith(("http://", "https://")) else None


def _wpt_id(i: int, case: dict[str, Any]) -> str:
    return f"{i:03d}-{case['input'][:40]!r}"


def test_wpt_http_base_case_count() -> None:
    # The README of shared/conformance says 202; a changed file should be noticed.
    assert len(WPT_HTTP) == 202


@pytest.mark.parametrize("case", WPT_HTTP, ids=[_wpt_id(i, c) for i, c in enumerate(WPT_HTTP)])
def test_wpt_resolve(case: dict[str, Any]) -> None:
    assert resolve(case["base"], case["input"]) == _wpt_expected(case)


@pytest.mark.parametrize("case", WPT_HTTP, ids=[_wpt_id(i, c) for i, c in enumerate(WPT_HTTP)])
def test_wpt_canonical_consistent(case: dict[str, Any]) -> None:
    """Single-parse, batch and two-step paths agree, and canonical is idempotent."""
    expected = _wpt_expected(case)
    two_step = canonical(expected) if expected is not None else None
    assert resolve_canonical(case["base"], case["input"]) == two_step
    assert resolve_and_canonicalize(case["base"], [case["input"]]) == (
        [two_step] if two_step is not None else []
    )
    if two_step is not None:
        assert canonical(two_step) == two_step
        assert "#" not in two_step
        assert host_of(two_step) == case["hostname"]


# ---------------------------------------------------------------------------
# RFC 3986 §5.4 resolution examples and §6.2 normalisation examples
# ---------------------------------------------------------------------------

RFC: dict[str, Any] = _load("rfc3986_5.4_resolution_examples.json")
RFC_RESOLUTION: list[dict[str, Any]] = RFC["resolution_cases"]


# Where WHATWG parsing (what browsers and we do) differs from the RFC's strict
# answer, as the shared/conformance README documents. The file writes `//g` as
# "http://g" (RFC form, empty path); WHATWG serialises an http URL's empty path
# as "/". For `http:g` the file lists both readings; WHATWG takes the
# backward-compatible one for special schemes.
def _rfc_expected(case: dict[str, Any]) -> str | None:
    ref, exp = case["ref"], case["expected"]
    if ref == "//g":
        assert exp in ("http://g", "http://g/"), case  # the override still fits the file
        return "http://g/"
    if ref == "http:g":
        assert "http://a/b/c/g" in [exp, *case.get("expected_alternatives", [])], case
        return "http://a/b/c/g"
    return exp if exp.startswith(("http://", "https://")) else None  # "g:h" is not crawlable


def test_rfc_resolution_case_count() -> None:
    assert len(RFC_RESOLUTION) == 42


@pytest.mark.parametrize(
    "case",
    RFC_RESOLUTION,
    ids=[f"{c['section']}-{c['ref']!r}" for c in RFC_RESOLUTION],
)
def test_rfc_resolution(case: dict[str, Any]) -> None:
    assert resolve(case["base"], case["ref"]) == _rfc_expected(case)


def _pairs() -> list[tuple[str, str, str, bool]]:
    """Flatten normalization_cases into (section, a, b, equivalent) pairs."""
    out: list[tuple[str, str, str, bool]] = []
    for c in RFC["normalization_cases"]:
        if "equivalent_set" in c:
            for u in c["equivalent_set"]:
                out.append((c["section"], u, c["normal_form"], True))
        else:
            out.append((c["section"], c["a"], c["b"], bool(c["equivalent"])))
    return out


def _as_http(u: str) -> str:
    """Re-home a non-http example on http, keeping everything after the scheme."""
    scheme, rest = u.split(":", 1)
    return u if scheme.lower() in ("http", "https") else "http:" + rest


@pytest.mark.parametrize(
    ("section", "a", "b", "equivalent"), _pairs(), ids=[f"{p[0]}-{p[1]}" for p in _pairs()]
)
def test_rfc_normalization(section: str, a: str, b: str, equivalent: bool) -> None:
    # Non-http examples (6.2.2 uses "example://") are not crawlable: None. Their
    # path/percent/dot rules still apply to us, so check them re-homed on http.
    if not a.lower().startswith(HTTP_SCHEMES):
        assert canonical(a) is None
        assert canonical(b) is None
        a, b = _as_http(a), _as_http(b)
    ca, cb = canonical(a), canonical(b)
    assert ca is not None and cb is not None
    assert (ca == cb) is equivalent, (ca, cb)


def test_rfc_normal_form_is_a_fixed_point() -> None:
    for c in RFC["normalization_cases"]:
        if "normal_form" in c:
            assert canonical(c["normal_form"]) == c["normal_form"]
