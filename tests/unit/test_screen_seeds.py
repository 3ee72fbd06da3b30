"""Seeds refused before anything starts (streams/cli/screen.py)."""

from __future__ import annotations

import pytest

from streams.cli.screen import screen_seeds, seed_refusal
from streams.settings import Settings

CLOSED = Settings.of()  # private targets off: the default


@pytest.mark.parametrize(
    ("seed", "why"),
    [
        ("https://example.com/", ""),
        ("not a url", "seed 'not a url': a plain seed must be one URL on one line"),
        ("javascript:alert(1)", "seed 'javascript:alert(1)' is not an absolute URL"),
        ("ftp://x", "seed 'ftp://x' is not a valid http(s) URL"),
        ("http://127.0.0.1:9/", "is a loopback address (127.0.0.1): pass --allow-private"),
        ("http://10.1.2.3/", "is a private address (10.1.2.3)"),
        ("http://[::1]/", "is a loopback address (::1)"),
        ("http://2130706433/", "is a loopback address (127.0.0.1)"),  # legacy IPv4 spelling
        ("http://localhost:8080/", "is a loopback address (127.0.0.1)"),
        ("http://app.localhost/", "is a loopback address (127.0.0.1)"),
        ("http://notlocalhost.example/", ""),
    ],
)
def test_seed_refusal(seed: str, why: str) -> None:
    found = seed_refusal(seed, CLOSED)
    assert (why in found) if why else found == "", found


def test_private_targets_allowed_refuse_only_what_is_no_url() -> None:
    allowed = Settings.of(allow_private=True)
    assert seed_refusal("http://127.0.0.1:9/", allowed) == ""
    assert seed_refusal("not a url", allowed) != ""


def test_a_resolve_override_is_judged_by_its_address() -> None:
    settings = Settings.of(
        resolve={
            "site.test": "127.0.1.5:8080",
            "v6.test": "[::1]:8080",
            "pub.test": "93.184.216.34",
        }
    )
    assert "loopback address (127.0.1.5)" in seed_refusal("http://site.test/", settings)
    assert "loopback address (::1)" in seed_refusal("http://v6.test/", settings)
    assert seed_refusal("http://pub.test/", settings) == ""


def test_without_settings_only_the_url_is_judged() -> None:
    assert screen_seeds(["http://127.0.0.1/", "nope"], None) == (
        ["http://127.0.0.1/"],
        ["seed 'nope' is not an absolute URL"],
    )
